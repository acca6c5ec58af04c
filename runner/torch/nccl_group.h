// The gradient and parameter traffic of ranks that each have a GPU of their
// own, through NCCL (c10d's ProcessGroupNCCL) on the tensors where they lie,
// instead of dist::Communicator's TCP ring through host copies: on one H200,
// two ranks sharing the GPU over that ring trained at 1/11 of one rank's
// speed (docs/gpu-measurements.md, "On an H200"). The ring stays the control
// plane (the store's port, losses, flags, checksums) and carries everything
// on the CPU.
//
// Ordering without blocking the host: a call is queued after the work
// already on the calling thread's current CUDA stream (ProcessGroupNCCL runs
// it on a stream of its own that first waits for that one), and the current
// stream then waits for it, so the kernels queued next read the result. The
// runner computes on the default stream on every thread (autograd's device
// thread and the collectives' workers included), so whichever thread issues
// a collective, it lands between the kernels that produce its input and
// those that consume its output. Every rank must issue the same collectives
// in the same order, as with the ring.
//
// NCCL refuses two ranks on one GPU ("Duplicate GPU detected", NCCL 2.28.9
// on an H200): ranks that share a GPU keep the ring.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "runner/dist/communicator.h"

namespace tailor::runner {

// [begin, end) of a flat tensor per rank, rank r's at r.
using Segments = std::vector<std::pair<std::int64_t, std::int64_t>>;

// Rank r's part of `count` elements as `comm` cuts them (segment_range).
Segments segments_of(const dist::Communicator& comm, std::int64_t count, std::int64_t align);

class NcclGroup {
 public:
  // Collective over `comm`: rank 0 serves a c10d TCPStore on a free port of
  // `master_addr` and sends the port to the others over `comm`; then every
  // rank joins NCCL on CUDA device `device`. `timeout` bounds each
  // collective (NCCL's watchdog then fails the rank). Unavailable without
  // the CUDA path or a GPU, with the reason.
  static Result<std::unique_ptr<NcclGroup>> connect(dist::Communicator& comm, const std::string& master_addr,
                                                    int device, std::chrono::milliseconds timeout);
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }

  // Each takes contiguous tensors on this rank's GPU; a failure (a peer
  // gone, the timeout) is an Unavailable error naming the collective.
  // In place: the sum over the ranks on every rank.
  Status all_reduce_sum(const torch::Tensor& t);
  // In place on `root`: the sum over the ranks; the others' `t` unchanged.
  Status reduce_sum(const torch::Tensor& t, int root);
  // `root`'s bytes into every rank's `t`.
  Status broadcast(const torch::Tensor& t, int root);
  // 1-D `flat` cut into `segments`: rank r's segment to every rank.
  Status all_gather(const torch::Tensor& flat, const Segments& segments);
  // 1-D `flat` cut into `segments`: segment r summed over the ranks into
  // rank r's `flat` (the rest of it is left as sent).
  Status reduce_scatter_sum(const torch::Tensor& flat, const Segments& segments);

 private:
  struct Impl;
  NcclGroup(int rank, int world, std::unique_ptr<Impl> impl);

  int rank_ = 0, world_ = 1;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tailor::runner
