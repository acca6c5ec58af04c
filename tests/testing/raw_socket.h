// A plain TCP client on 127.0.0.1 with a 10 s receive timeout, for tests
// that need what an HTTP client library will not do: send half a request,
// hold a connection open, see exactly when the server closes it.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <string>

namespace tailor::testing {

class RawSocket {
 public:
  explicit RawSocket(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    timeval tv{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~RawSocket() { ::close(fd_); }
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;
  bool connected() const { return connected_; }
  void send(const std::string& data) const { (void)!::send(fd_, data.data(), data.size(), MSG_NOSIGNAL); }
  // Everything until the peer closes or `until` shows up (or 10 s pass);
  // ended() says whether the peer closed.
  std::string receive(const std::string& until = "") {
    std::string out;
    char buf[4096];
    for (;;) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) ended_ = true;
      if (n <= 0) return out;
      out.append(buf, static_cast<std::size_t>(n));
      if (!until.empty() && out.find(until) != std::string::npos) return out;
    }
  }
  bool ended() const { return ended_; }
  // Whether the server closes the connection within `timeout` without
  // sending anything.
  bool closed_within(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
    char c;
    const ssize_t n = ::recv(fd_, &c, 1, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool ended_ = false;
};

}  // namespace tailor::testing
