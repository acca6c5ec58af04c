// A whole file mapped read-only: what the weight readers (safetensors,
// torch.save's zip) view their tensors in.
#pragma once

#include <cstddef>
#include <string>

#include "core/status.h"

namespace tailor::runner::io {

struct FileMap {
  void* data = nullptr;  // nullptr for an empty file
  std::size_t size = 0;
};

// Opens `path`, checks that it is a regular file (and, with
// inside_read_root, that under tailord it lies inside the spec root:
// runner/data/file_io.h), maps it whole (MAP_PRIVATE, PROT_READ) and closes
// the descriptor again, since the map keeps the file alive. The caller
// unmaps it (unmap_file). NotFound for a missing file, IOError when it
// cannot be opened or mapped, InvalidArgument otherwise; each names the file.
Result<FileMap> map_file(const std::string& path, bool inside_read_root);

void unmap_file(const FileMap& map);

}  // namespace tailor::runner::io
