#include "platform/file_lock.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace tailor::platform {

Result<FileLock> FileLock::acquire(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::io_error("opening " + path + ": " + std::strerror(errno));
  int rc;
  do {
    rc = ::flock(fd, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) return Status::failed_precondition(path + " is locked by another process");
    return Status::io_error("locking " + path + ": " + std::strerror(err));
  }
  return FileLock(fd);
}

FileLock::FileLock(FileLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);
}

Result<bool> file_lock_held(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return false;
    return Status::io_error("opening " + path + ": " + std::strerror(errno));
  }
  int rc;
  do {
    rc = ::flock(fd, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  const int err = errno;
  ::close(fd);  // releases the probe's own lock, if it got one
  if (rc == 0) return false;
  if (err == EWOULDBLOCK) return true;
  return Status::io_error("probing the lock of " + path + ": " + std::strerror(err));
}

std::vector<pid_t> processes_with_file_open(const std::string& path) {
  std::vector<pid_t> out;
  struct stat target {};
  if (::stat(path.c_str(), &target) != 0) return out;
  const pid_t self = ::getpid();
  std::error_code ec;
  for (const auto& proc : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = proc.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::atol(name.c_str()));
    if (pid == self) continue;
    std::error_code fec;
    for (const auto& fd : std::filesystem::directory_iterator(proc.path() / "fd", fec)) {
      struct stat st {};
      // stat follows the /proc link to the open file itself.
      if (::stat(fd.path().c_str(), &st) == 0 && st.st_dev == target.st_dev && st.st_ino == target.st_ino) {
        out.push_back(pid);
        break;
      }
    }
  }
  return out;
}

}  // namespace tailor::platform
