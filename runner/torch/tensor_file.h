// Tensor files (torch::save's archive format, which torch::load and
// Python's torch.load read), written whole or not at all.
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>
#include "core/status.h"

namespace tailor::runner {

// Serialises into memory through the archive's writer callback, then writes
// the file through platform::write_file_atomic (`path`.tmp, fsync, rename).
// Not torch::save(value, path): that writes through a std::ofstream owned by
// libtorch, which aborted the process ("unexpected pos" from a destructor,
// uncatchable) when the wheel's libraries ran beside a newer libstdc++ on a
// GPU machine (docs/gpu-measurements.md, "On an H100"). IOError naming the file.
Status save_tensor_file(const std::vector<torch::Tensor>& tensors, const std::string& path);
Status save_tensor_file(const torch::Tensor& tensor, const std::string& path);

}  // namespace tailor::runner
