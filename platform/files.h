// Writing files so that a reader (or a crash) never sees half of one.
#pragma once

#include <string>

#include "core/status.h"

namespace tailor::platform {

// Writes `content` to `path` through `path`.tmp, fsync and rename: a reader
// sees the old file or the new one, never half of one. IOError naming the
// file and the reason (NoSpace when the file system is full); the temporary
// file is removed on failure.
Status write_file_atomic(const std::string& path, const std::string& content);

}  // namespace tailor::platform
