// A weights file of either format a Hugging Face folder may hold:
// safetensors (model.safetensors, adapter_model.safetensors and their
// shards) or torch.save's zip (pytorch_model.bin, adapter_model.bin and
// their shards), both memory-mapped, their tensors as views.
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/status.h"
#include "runner/io/safetensors.h"
#include "runner/torch/torch_save_file.h"

namespace tailor::runner {

class WeightFile {
 public:
  // By name: a file ending in .safetensors is read as safetensors, any
  // other (.bin, .pt, .pth) as torch.save's format. Errors as the two
  // readers' (io::SafetensorsFile::open, TorchSaveFile::open).
  static Result<WeightFile> open(const std::string& path, bool inside_read_root = false);

  const std::vector<io::TensorView>& tensors() const;
  const io::TensorView* find(std::string_view name) const;
  const std::string& path() const;
  // Once `view` (one of tensors()) has been copied out: gives its pages of
  // the file's map back to the kernel (io::drop_mapped_pages), so that the
  // file does not stay resident beside the copies.
  void done_with(const io::TensorView& view) const;

 private:
  explicit WeightFile(std::variant<io::SafetensorsFile, TorchSaveFile> file) : file_(std::move(file)) {}
  std::variant<io::SafetensorsFile, TorchSaveFile> file_;
};

}  // namespace tailor::runner
