// The POSIX tar format (pax, IEEE Std 1003.1-2017, "pax Interchange
// Format"), as much of it as a folder of regular files needs: a 512-byte
// ustar header per file, a pax extended header before it when the path or
// size does not fit ustar's fields, the content padded to 512 bytes, and
// two zero blocks at the end. GNU tar, bsdtar and Python's tarfile read it.
#pragma once

#include <cstdint>
#include <string>

namespace tailor::daemon {

inline constexpr std::uint64_t kTarBlock = 512;

// The header block(s) of a regular file at `path` (relative, '/'-separated)
// of `size` bytes, mode 0644, modified at `mtime` (Unix seconds).
std::string tar_file_header(const std::string& path, std::uint64_t size, std::int64_t mtime);

// The zero bytes after `size` bytes of content, up to the next block.
std::string tar_padding(std::uint64_t size);

// The end of an archive: two zero blocks.
std::string tar_end();

}  // namespace tailor::daemon
