// A file descriptor that closes when it goes: the data readers' files
// (data_records.cpp, table_records.cpp).
#pragma once

#include <unistd.h>

namespace tailor::dsl {

class OwnedFd {
 public:
  explicit OwnedFd(int fd) : fd_(fd) {}
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  ~OwnedFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace tailor::dsl
