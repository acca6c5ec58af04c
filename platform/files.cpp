#include "platform/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tailor::platform {

Status write_file_atomic(const std::string& path, const std::string& content, Durability durability) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    std::string msg = "creating " + tmp + ": " + std::strerror(err);
    return err == ENOSPC || err == EDQUOT ? Status::no_space(std::move(msg)) : Status::io_error(std::move(msg));
  }
  std::size_t done = 0;
  bool ok = true;
  while (ok && done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<std::size_t>(n);
  }
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

}  // namespace tailor::platform
