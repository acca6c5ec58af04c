#include "platform/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tailor::platform {

Status write_file_atomic(const std::string& path, const std::string& content, Durability durability, unsigned mode) {
  const std::string tmp = path + ".tmp";
  // A temporary file a crash left keeps its own mode through O_CREAT: it
  // goes first, so that the new one is created with `mode` (less the umask).
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, static_cast<mode_t>(mode));
  if (fd < 0) {
    const int err = errno;
    std::string msg = "creating " + tmp + ": " + std::strerror(err);
    return err == ENOSPC || err == EDQUOT ? Status::no_space(std::move(msg)) : Status::io_error(std::move(msg));
  }
  bool ok = write_all(fd, content.data(), content.size());
  ok = ok && (durability == Durability::kProcess || ::fsync(fd) == 0);
  const int err = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int why = ok ? errno : err;
    ::unlink(tmp.c_str());
    std::string msg = "writing " + path + ": " + std::strerror(why);
    return why == ENOSPC || why == EDQUOT ? Status::no_space(std::move(msg)) : Status::io_error(std::move(msg));
  }
  return Status::ok();
}

bool write_all(int fd, const void* data, std::size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace tailor::platform
