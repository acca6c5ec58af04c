// Collectives between the ranks of one job over TCP: a full mesh of
// connections set up through rank 0 (MASTER_ADDR:MASTER_PORT), ring
// all-reduce and reduce-scatter, direct broadcast, send and receive.
// Torch-free: callers pass contiguous host buffers.
//
// Why our own and not c10d's ProcessGroupGloo: the PyPI wheel ships no Gloo
// headers and Debian's libgloo-dev is years older than the Gloo compiled into
// it, and Gloo lacks what ZeRO needs on the CPU (reduce-scatter, bf16).
// A ring over loopback sockets moves the same bytes (2(N-1)/N of the buffer
// per rank for an all-reduce, Patarasuk & Yuan 2009) and is deterministic:
// every rank ends with bit-identical sums, so replicas never drift.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "runner/dist/rank_env.h"

namespace tailor::runner::dist {

struct CommunicatorOptions {
  // How long rank 0 waits for every rank to join (and the others to reach it).
  std::chrono::milliseconds rendezvous_timeout{std::chrono::seconds(300)};
  // How long one transfer may wait for its peer before the collective fails.
  std::chrono::milliseconds collective_timeout{std::chrono::minutes(30)};
};

class Communicator {
 public:
  // Joins the job's mesh. A rank that never joins, a port that cannot be
  // bound or ranks that disagree about the world size are errors naming the
  // rank and address; the others fail at their next collective.
  static Result<std::unique_ptr<Communicator>> connect(const RankEnv& env, const CommunicatorOptions& options = {});
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }

  // In-place element-wise sums over every rank (ring: reduce-scatter, then
  // all-gather). Every rank ends with the same bits.
  Status all_reduce_sum(float* data, std::size_t count);
  Status all_reduce_sum(double* data, std::size_t count);
  // The first phase only: afterwards rank r holds the sum of segment r
  // (segment_range with `align`), the rest of `data` is scratch.
  Status reduce_scatter_sum(float* data, std::size_t count, std::size_t align = 1);
  // Every rank's segment (segment_range with `align`) to every rank.
  Status all_gather(void* data, std::size_t count, std::size_t element_bytes, std::size_t align = 1);
  // `bytes` of `root`'s buffer into everyone's.
  Status broadcast(void* data, std::size_t bytes, int root);
  Status send(int peer, const void* data, std::size_t bytes);
  Status recv(int peer, void* data, std::size_t bytes);
  Status barrier();
  // Shuts every connection down: transfers in progress on any thread fail at
  // once, and the peers see this rank stop. For leaving while another thread
  // may be blocked in a collective.
  void abort();

  // The part [begin, end) of a `count`-element buffer that rank `r` reduces:
  // about count / N elements, boundaries on multiples of `align` (so that
  // block-wise quantised states split at block boundaries).
  std::pair<std::size_t, std::size_t> segment_range(std::size_t count, int r, std::size_t align = 1) const;

  // Bytes this rank has sent since it joined (for the benchmark's bytes-moved
  // figure against the 2Ψ formula).
  std::uint64_t bytes_sent() const { return bytes_sent_; }

 private:
  Communicator(int rank, int world, std::vector<int> fds, std::chrono::milliseconds timeout)
      : rank_(rank), world_(world), fds_(std::move(fds)), timeout_(timeout) {}
  template <typename T>
  Status ring_reduce_scatter(T* data, std::size_t count, std::size_t align);
  Status ring_all_gather(char* data, std::size_t count, std::size_t element_bytes, std::size_t align);
  // Sends to `to` and receives from `from` at once, so that a ring never
  // deadlocks on full socket buffers.
  Status exchange(int to, const void* out, std::size_t out_bytes, int from, void* in, std::size_t in_bytes);
  Status peer_error(int peer, const char* what, int err) const;

  int rank_ = 0, world_ = 1;
  std::vector<int> fds_;  // by peer rank; -1 for this rank
  std::chrono::milliseconds timeout_;
  std::vector<char> scratch_;
  std::uint64_t bytes_sent_ = 0;
};

}  // namespace tailor::runner::dist
