// Writing files so that a reader (or a crash) never sees half of one.
#pragma once

#include <cstddef>
#include <string>

#include "core/status.h"

namespace tailor::platform {

// Whether the file must survive a power cut, or only this process.
enum class Durability {
  kPowerCut,  // fsync before the rename
  kProcess,   // no fsync: a crash of the writer (or any process) leaves the
              // whole file; only the machine stopping may lose it. For files
              // whose readers die with the machine (a runner's plan and pid).
};

// Writes `content` to `path` through `path`.tmp and renames it: a reader
// sees the old file or the new one, never half of one. The file is created
// with `mode` less the umask (0600 for a secret: no moment where others may
// read it). IOError naming the file and the reason (NoSpace when the file system
// is full); the temporary file is removed on failure.
Status write_file_atomic(const std::string& path, const std::string& content,
                         Durability durability = Durability::kPowerCut, unsigned mode = 0644);

// Writes all n bytes of data to fd (retrying short writes and EINTR), or
// returns false with errno set.
bool write_all(int fd, const void* data, std::size_t n);

// strerror(errno), read at once, before another call can change errno.
std::string errno_text();

}  // namespace tailor::platform
