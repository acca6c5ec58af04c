#include "runner/dist/communicator.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace tailor::runner::dist {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::uint32_t kMagic = 0x7a11a0d1;  // "tailor dist", version 1

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1 << 30));
}

std::string errno_text(int err) { return std::strerror(err); }

// A closed or reset connection: the peer process stopped.
bool peer_gone(int err) { return err == EPIPE || err == ECONNRESET || err == 0; }

struct TransferError {
  int err = 0;          // 0 with failed: the peer closed the connection
  bool failed = false;
  bool timed_out = false;
  bool on_send = false;
};

// Sends `out` on `out_fd` while receiving `in` from `in_fd` (which may be
// the same socket), both non-blocking, until both are done or `deadline`.
TransferError transfer(int out_fd, const char* out, std::size_t out_n, int in_fd, char* in, std::size_t in_n,
                       Clock::time_point deadline, std::uint64_t* sent_total) {
  std::size_t sent = 0, got = 0;
  while (sent < out_n || got < in_n) {
    pollfd p[2];
    int n = 0, wi = -1, ri = -1;
    if (sent < out_n) {
      p[n] = {out_fd, POLLOUT, 0};
      wi = n++;
    }
    if (got < in_n) {
      if (wi >= 0 && in_fd == out_fd) {
        p[wi].events |= POLLIN;
        ri = wi;
      } else {
        p[n] = {in_fd, POLLIN, 0};
        ri = n++;
      }
    }
    const int r = ::poll(p, static_cast<nfds_t>(n), remaining_ms(deadline));
    if (r < 0) {
      if (errno == EINTR) continue;
      return {errno, true, false, wi >= 0};
    }
    if (r == 0) return {ETIMEDOUT, true, true, ri < 0};
    if (wi >= 0 && (p[wi].revents & (POLLOUT | POLLERR | POLLHUP))) {
      const ssize_t k = ::send(out_fd, out + sent, out_n - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k > 0) {
        sent += static_cast<std::size_t>(k);
        if (sent_total) *sent_total += static_cast<std::uint64_t>(k);
      } else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return {errno, true, false, true};
      }
    }
    if (ri >= 0 && (p[ri].revents & (POLLIN | POLLERR | POLLHUP))) {
      const ssize_t k = ::recv(in_fd, in + got, in_n - got, MSG_DONTWAIT);
      if (k > 0) {
        got += static_cast<std::size_t>(k);
      } else if (k == 0) {
        return {0, true, false, false};
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return {errno, true, false, false};
      }
    }
  }
  return {};
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  int get() const { return fd_; }
  int release() {
    const int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

void tune(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

Result<in_addr> resolve(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return Status::invalid_argument("MASTER_ADDR " + host + " does not resolve to an IPv4 address: " + gai_strerror(rc));
  }
  const in_addr a = reinterpret_cast<const sockaddr_in*>(res->ai_addr)->sin_addr;
  ::freeaddrinfo(res);
  return a;
}

std::string address_text(in_addr a, int port) {
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &a, buf, sizeof buf);
  return std::string(buf) + ":" + std::to_string(port);
}

Result<Fd> listen_on(in_addr a, int port) {
  Fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (s.get() < 0) return Status::unavailable("socket: " + errno_text(errno));
  const int one = 1;
  ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr = a;
  sa.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::bind(s.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(s.get(), 256) != 0) {
    return Status::unavailable("cannot listen on " + address_text(a, port) + ": " + errno_text(errno));
  }
  ::fcntl(s.get(), F_SETFL, ::fcntl(s.get(), F_GETFL) | O_NONBLOCK);
  return s;
}

int bound_port(int fd) {
  sockaddr_in sa{};
  socklen_t len = sizeof sa;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  return ntohs(sa.sin_port);
}

// Accepts one connection before `deadline`; an empty Fd on time-out.
Result<Fd> accept_until(int listener, Clock::time_point deadline) {
  for (;;) {
    pollfd p{listener, POLLIN, 0};
    const int r = ::poll(&p, 1, remaining_ms(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::unavailable("poll: " + errno_text(errno));
    if (r == 0) return Fd();
    Fd c(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
    if (c.get() >= 0) {
      tune(c.get());
      return c;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
      return Status::unavailable("accept: " + errno_text(errno));
    }
  }
}

// Connects, retrying while nobody listens yet (ranks start in any order).
Result<Fd> connect_until(in_addr a, int port, Clock::time_point deadline) {
  int last = 0;
  while (Clock::now() < deadline) {
    Fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (s.get() < 0) return Status::unavailable("socket: " + errno_text(errno));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr = a;
    sa.sin_port = htons(static_cast<std::uint16_t>(port));
    int rc = ::connect(s.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{s.get(), POLLOUT, 0};
      while ((rc = ::poll(&p, 1, remaining_ms(deadline))) < 0 && errno == EINTR) {
      }
      int err = ETIMEDOUT;
      socklen_t len = sizeof err;
      if (rc > 0) ::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc == 0) {
      tune(s.get());
      return s;
    }
    last = errno;
    if (last != ECONNREFUSED && last != ETIMEDOUT && last != ECONNRESET && last != EHOSTUNREACH) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the peer is not listening yet
  }
  return Status::unavailable("cannot reach " + address_text(a, port) + ": " + errno_text(last ? last : ETIMEDOUT));
}

// Rendezvous messages: fixed-size big-endian words.
struct Hello {
  std::uint32_t magic = kMagic;
  std::uint32_t rank = 0, world = 0, port = 0;
};

Status send_words(int fd, const std::uint32_t* w, std::size_t n, Clock::time_point deadline, const std::string& peer) {
  std::vector<std::uint32_t> net(w, w + n);
  for (auto& x : net) x = htonl(x);
  const TransferError e = transfer(fd, reinterpret_cast<const char*>(net.data()), n * 4, fd, nullptr, 0, deadline, nullptr);
  if (e.failed) return Status::unavailable("rendezvous with " + peer + ": " + (e.timed_out ? "timed out" : errno_text(e.err)));
  return Status::ok();
}

Status recv_words(int fd, std::uint32_t* w, std::size_t n, Clock::time_point deadline, const std::string& peer) {
  const TransferError e = transfer(fd, nullptr, 0, fd, reinterpret_cast<char*>(w), n * 4, deadline, nullptr);
  if (e.failed) {
    return Status::unavailable("rendezvous with " + peer + ": " +
                               (e.timed_out ? "timed out" : e.err == 0 ? "connection closed" : errno_text(e.err)));
  }
  for (std::size_t i = 0; i < n; ++i) w[i] = ntohl(w[i]);
  return Status::ok();
}

Status send_hello(int fd, const Hello& h, Clock::time_point deadline, const std::string& peer) {
  const std::uint32_t w[4] = {h.magic, h.rank, h.world, h.port};
  return send_words(fd, w, 4, deadline, peer);
}

Result<Hello> recv_hello(int fd, Clock::time_point deadline, const std::string& peer) {
  std::uint32_t w[4];
  TAILOR_RETURN_IF_ERROR(recv_words(fd, w, 4, deadline, peer));
  if (w[0] != kMagic) return Status::unavailable("rendezvous: " + peer + " is not a tailor-runner rank of this version");
  return Hello{w[0], w[1], w[2], w[3]};
}

}  // namespace

Result<std::unique_ptr<Communicator>> Communicator::connect(const RankEnv& env, const CommunicatorOptions& options) {
  const int world = env.world, rank = env.rank;
  std::vector<int> fds(static_cast<std::size_t>(world), -1);
  if (world == 1) return std::unique_ptr<Communicator>(new Communicator(0, 1, std::move(fds), options.collective_timeout));
  std::vector<Fd> links(static_cast<std::size_t>(world));
  const auto deadline = Clock::now() + options.rendezvous_timeout;
  auto master = resolve(env.master_addr);
  if (!master.is_ok()) return master.status();
  const std::string master_text = address_text(*master, env.master_port);
  const double timeout_s = static_cast<double>(options.rendezvous_timeout.count()) / 1000.0;
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.0f s", timeout_s);

  std::vector<std::uint32_t> table(static_cast<std::size_t>(2 * world), 0);  // address, port per rank
  if (rank == 0) {
    auto listener = listen_on(*master, env.master_port);
    if (!listener.is_ok()) return listener.status();
    int joined = 1;
    while (joined < world) {
      auto c = accept_until(listener->get(), deadline);
      if (!c.is_ok()) return c.status();
      if (c->get() < 0) {
        std::string missing;
        for (int r = 1; r < world; ++r) {
          if (links[static_cast<std::size_t>(r)].get() < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        }
        return Status::unavailable("rendezvous at " + master_text + ": rank" + (world - joined > 1 ? "s " : " ") +
                                   missing + " of " + std::to_string(world) + " did not join within " + secs);
      }
      auto h = recv_hello(c->get(), deadline, "a rank connecting to " + master_text);
      if (!h.is_ok()) return h.status();
      if (static_cast<int>(h->world) != world) {
        return Status::invalid_argument("rendezvous: rank " + std::to_string(h->rank) + " was started with WORLD_SIZE " +
                                        std::to_string(h->world) + ", rank 0 with " + std::to_string(world));
      }
      const int r = static_cast<int>(h->rank);
      if (r < 1 || r >= world || links[static_cast<std::size_t>(r)].get() >= 0) {
        return Status::invalid_argument("rendezvous: two processes joined as rank " + std::to_string(r));
      }
      sockaddr_in peer{};
      socklen_t len = sizeof peer;
      ::getpeername(c->get(), reinterpret_cast<sockaddr*>(&peer), &len);
      table[static_cast<std::size_t>(2 * r)] = ntohl(peer.sin_addr.s_addr);
      table[static_cast<std::size_t>(2 * r + 1)] = h->port;
      links[static_cast<std::size_t>(r)] = std::move(*c);
      ++joined;
    }
    for (int r = 1; r < world; ++r) {
      TAILOR_RETURN_IF_ERROR(send_words(links[static_cast<std::size_t>(r)].get(), table.data(), table.size(), deadline,
                                        "rank " + std::to_string(r)));
    }
  } else {
    auto to_master = connect_until(*master, env.master_port, deadline);
    if (!to_master.is_ok()) {
      return Status::unavailable("rendezvous: rank " + std::to_string(rank) + " found no rank 0 within " + secs + " (" +
                                 to_master.status().message() + ")");
    }
    // Listen where rank 0 reached us: the interface the others can reach too.
    sockaddr_in local{};
    socklen_t len = sizeof local;
    ::getsockname(to_master->get(), reinterpret_cast<sockaddr*>(&local), &len);
    auto listener = listen_on(local.sin_addr, 0);
    if (!listener.is_ok()) return listener.status();
    Hello h;
    h.rank = static_cast<std::uint32_t>(rank);
    h.world = static_cast<std::uint32_t>(world);
    h.port = static_cast<std::uint32_t>(bound_port(listener->get()));
    TAILOR_RETURN_IF_ERROR(send_hello(to_master->get(), h, deadline, "rank 0 at " + master_text));
    TAILOR_RETURN_IF_ERROR(recv_words(to_master->get(), table.data(), table.size(), deadline, "rank 0 at " + master_text));
    links[0] = std::move(*to_master);
    // Lower ranks listen already (the kernel completes connections before
    // accept), so connecting down and then accepting up cannot deadlock.
    for (int r = 1; r < rank; ++r) {
      in_addr a{};
      a.s_addr = htonl(table[static_cast<std::size_t>(2 * r)]);
      auto c = connect_until(a, static_cast<int>(table[static_cast<std::size_t>(2 * r + 1)]), deadline);
      if (!c.is_ok()) return c.status();
      TAILOR_RETURN_IF_ERROR(send_hello(c->get(), h, deadline, "rank " + std::to_string(r)));
      links[static_cast<std::size_t>(r)] = std::move(*c);
    }
    for (int k = rank + 1; k < world; ++k) {
      auto c = accept_until(listener->get(), deadline);
      if (!c.is_ok()) return c.status();
      if (c->get() < 0) return Status::unavailable("rendezvous: higher ranks did not connect within " + std::string(secs));
      auto peer = recv_hello(c->get(), deadline, "a higher rank");
      if (!peer.is_ok()) return peer.status();
      const int r = static_cast<int>(peer->rank);
      if (r <= rank || r >= world || links[static_cast<std::size_t>(r)].get() >= 0) {
        return Status::invalid_argument("rendezvous: unexpected rank " + std::to_string(r));
      }
      links[static_cast<std::size_t>(r)] = std::move(*c);
    }
  }
  for (int r = 0; r < world; ++r) fds[static_cast<std::size_t>(r)] = links[static_cast<std::size_t>(r)].release();
  auto comm = std::unique_ptr<Communicator>(new Communicator(rank, world, std::move(fds), options.collective_timeout));
  // Everyone connected to everyone before anyone starts.
  TAILOR_RETURN_IF_ERROR(comm->barrier());
  return comm;
}

void Communicator::abort() {
  for (int fd : fds_) {
    if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
  }
}

Communicator::~Communicator() {
  for (int fd : fds_) {
    if (fd >= 0) ::close(fd);
  }
}

std::pair<std::size_t, std::size_t> Communicator::segment_range(std::size_t count, int r, std::size_t align) const {
  const auto n = static_cast<std::size_t>(world_);
  const std::size_t a = std::max<std::size_t>(1, align);
  auto bound = [&](std::size_t k) {
    if (k >= n) return count;
    return std::min(count, (count * k / n + a - 1) / a * a);
  };
  const auto k = static_cast<std::size_t>(r);
  return {bound(k), bound(k + 1)};
}

Status Communicator::peer_error(int peer, const char* what, int err) const {
  if (err == ETIMEDOUT) {
    return Status::unavailable("rank " + std::to_string(peer) + " did not answer within " +
                               std::to_string(timeout_.count() / 1000) + " s (" + what + "; hung or stopped)");
  }
  if (peer_gone(err)) return Status::unavailable("rank " + std::to_string(peer) + " stopped (its connection closed)");
  return Status::unavailable(std::string(what) + " with rank " + std::to_string(peer) + ": " + errno_text(err));
}

Status Communicator::exchange(int to, const void* out, std::size_t out_bytes, int from, void* in, std::size_t in_bytes) {
  const int out_fd = out_bytes ? fds_[static_cast<std::size_t>(to)] : -1;
  const int in_fd = in_bytes ? fds_[static_cast<std::size_t>(from)] : -1;
  const TransferError e = transfer(out_fd, static_cast<const char*>(out), out_bytes, in_fd, static_cast<char*>(in),
                                   in_bytes, Clock::now() + timeout_, &bytes_sent_);
  if (!e.failed) return Status::ok();
  return peer_error(e.on_send ? to : from, e.on_send ? "sending" : "receiving", e.timed_out ? ETIMEDOUT : e.err);
}

template <typename T>
Status Communicator::ring_reduce_scatter(T* data, std::size_t count, std::size_t align) {
  const int n = world_, next = (rank_ + 1) % n, prev = (rank_ + n - 1) % n;
  // At step s rank r passes on segment r-1-s (its running sum) and adds what
  // arrives into segment r-2-s; after n-1 steps segment r holds every rank's.
  for (int s = 0; s < n - 1; ++s) {
    const auto [so, se] = segment_range(count, (rank_ + 2 * n - 1 - s) % n, align);
    const auto [ro, re] = segment_range(count, (rank_ + 2 * n - 2 - s) % n, align);
    scratch_.resize(std::max(scratch_.size(), (re - ro) * sizeof(T)));
    T* in = reinterpret_cast<T*>(scratch_.data());
    TAILOR_RETURN_IF_ERROR(exchange(next, data + so, (se - so) * sizeof(T), prev, in, (re - ro) * sizeof(T)));
    T* dst = data + ro;
    for (std::size_t i = 0; i < re - ro; ++i) dst[i] += in[i];
  }
  return Status::ok();
}

Status Communicator::ring_all_gather(char* data, std::size_t count, std::size_t element_bytes, std::size_t align) {
  const int n = world_, next = (rank_ + 1) % n, prev = (rank_ + n - 1) % n;
  for (int s = 0; s < n - 1; ++s) {
    const auto [so, se] = segment_range(count, (rank_ + n - s) % n, align);
    const auto [ro, re] = segment_range(count, (rank_ + 2 * n - 1 - s) % n, align);
    TAILOR_RETURN_IF_ERROR(exchange(next, data + so * element_bytes, (se - so) * element_bytes, prev,
                                    data + ro * element_bytes, (re - ro) * element_bytes));
  }
  return Status::ok();
}

Status Communicator::all_reduce_sum(float* data, std::size_t count) {
  if (world_ == 1 || count == 0) return Status::ok();
  TAILOR_RETURN_IF_ERROR(ring_reduce_scatter(data, count, 1));
  return ring_all_gather(reinterpret_cast<char*>(data), count, sizeof(float), 1);
}

Status Communicator::all_reduce_sum(double* data, std::size_t count) {
  if (world_ == 1 || count == 0) return Status::ok();
  TAILOR_RETURN_IF_ERROR(ring_reduce_scatter(data, count, 1));
  return ring_all_gather(reinterpret_cast<char*>(data), count, sizeof(double), 1);
}

Status Communicator::reduce_scatter_sum(float* data, std::size_t count, std::size_t align) {
  if (world_ == 1 || count == 0) return Status::ok();
  return ring_reduce_scatter(data, count, align);
}

Status Communicator::all_gather(void* data, std::size_t count, std::size_t element_bytes, std::size_t align) {
  if (world_ == 1 || count == 0) return Status::ok();
  return ring_all_gather(static_cast<char*>(data), count, element_bytes, align);
}

Status Communicator::broadcast(void* data, std::size_t bytes, int root) {
  if (world_ == 1 || bytes == 0) return Status::ok();
  if (rank_ != root) return recv(root, data, bytes);
  for (int r = 0; r < world_; ++r) {
    if (r != root) TAILOR_RETURN_IF_ERROR(send(r, data, bytes));
  }
  return Status::ok();
}

Status Communicator::send(int peer, const void* data, std::size_t bytes) {
  return exchange(peer, data, bytes, peer, nullptr, 0);
}

Status Communicator::recv(int peer, void* data, std::size_t bytes) {
  return exchange(peer, nullptr, 0, peer, data, bytes);
}

Status Communicator::barrier() {
  double x = 0;
  return all_reduce_sum(&x, 1);
}

}  // namespace tailor::runner::dist
