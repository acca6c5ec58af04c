#include "runner/io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "platform/files.h"
#include "runner/data/file_io.h"

namespace tailor::runner::io {

Result<FileMap> map_file(const std::string& path, bool inside_read_root) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const std::string why = platform::errno_text();
    return errno == ENOENT ? Status::not_found(path + ": " + why) : Status::io_error(path + ": " + why);
  }
  auto close_with = [fd](Status s) {
    ::close(fd);
    return s;
  };
  if (inside_read_root) {
    if (Status inside = data::check_inside_read_root(fd, path); !inside.is_ok()) return close_with(inside);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) return close_with(Status::io_error(path + ": " + platform::errno_text()));
  if (!S_ISREG(st.st_mode)) return close_with(Status::invalid_argument(path + " is not a regular file"));
  FileMap map;
  map.size = static_cast<std::size_t>(st.st_size);
  if (map.size == 0) {
    ::close(fd);
    return map;
  }
  void* m = ::mmap(nullptr, map.size, PROT_READ, MAP_PRIVATE, fd, 0);
  const std::string why = m == MAP_FAILED ? platform::errno_text() : "";
  ::close(fd);
  if (m == MAP_FAILED) return Status::io_error(path + ": mmap: " + why);
  map.data = m;
  return map;
}

void unmap_file(const FileMap& map) {
  if (map.data != nullptr) ::munmap(map.data, map.size);
}

}  // namespace tailor::runner::io
