// Data parallelism over dist::Communicator for the trainer (or, given an
// NcclGroup, over NCCL for tensors on GPUs): gradients summed
// across ranks, ZeRO-1's ownership of parameters (each rank keeps the
// optimizer states and fp32 master weights of its share and sends the
// updated parameters to the others), and tensors sent whole between ranks
// (the checkpoint gathers ZeRO-1's states on rank 0).
#pragma once

#include <torch/torch.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "core/status.h"
#include "runner/dist/communicator.h"
#include "runner/torch/nccl_group.h"

namespace tailor::runner {

// Which rank owns each tensor: the largest first, each to the least-loaded
// rank by bytes, so every rank computes the same split and the shares are
// nearly equal (ZeRO partitions flat buffers, Rajbhandari et al. 2020;
// whole tensors keep each update a single fused pass).
std::vector<int> partition_by_size(const std::vector<torch::Tensor>& tensors, int world);

// Sums every tensor's .grad over the ranks, in place, in buckets of at most
// `bucket_bytes` (fp32; 16-bit gradients are summed in fp32 and rounded once).
// Tensors without a gradient contribute zeros. With `nccl`, GPU gradients
// are summed on the GPU.
Status all_reduce_gradients(dist::Communicator& comm, const std::vector<torch::Tensor>& params,
                            std::int64_t bucket_bytes, NcclGroup* nccl = nullptr);

// Stage 0 with the all-reduce overlapped with backward (DDP's reducer, Li et
// al. 2020): once armed, post-accumulate hooks gather each gradient backward
// finishes into buckets of `bucket_bytes` (fp32) in the order backward
// produces them, the same on every rank, and a thread of its own sums each
// full bucket across the ranks and writes the sums back while backward goes
// on. Arm it for the step's last micro-batch; finish() after that backward
// sends the last bucket and waits. Destroying it while a bucket is in flight
// aborts the communicator (the peers see this rank stop) rather than wait.
class OverlappedAllReduce {
 public:
  OverlappedAllReduce(dist::Communicator& comm, std::vector<torch::Tensor> params, std::int64_t bucket_bytes,
                      NcclGroup* nccl = nullptr);
  ~OverlappedAllReduce();
  OverlappedAllReduce(const OverlappedAllReduce&) = delete;
  OverlappedAllReduce& operator=(const OverlappedAllReduce&) = delete;

  void arm();
  Status finish();
  void on_gradient(std::size_t index);  // the hook (autograd's thread)

 private:
  void enqueue();
  void run();  // the communication thread
  Status reduce(const std::vector<std::size_t>& bucket);

  dist::Communicator& comm_;
  NcclGroup* nccl_;
  std::vector<torch::Tensor> params_;
  std::int64_t bucket_elements_;
  bool armed_ = false;
  std::vector<std::size_t> current_;  // the bucket being filled
  std::vector<char> seen_;            // this step's gradients so far
  std::string twice_;                 // a gradient finished twice in one backward
  std::int64_t current_elements_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::vector<std::size_t>> queue_;
  bool busy_ = false, stop_ = false;
  Status error_;
  std::thread thread_;
};

// Calls `owner->on_gradient(index)` when backward has accumulated a
// parameter's gradient (stage 0's buckets, ZeRO-2's and ZeRO-3's sends).
template <typename Owner>
class GradientHook : public torch::autograd::PostAccumulateGradHook {
 public:
  GradientHook(Owner* owner, std::size_t index) : owner_(owner), index_(index) {}
  void operator()(const torch::autograd::Variable&) override { owner_->on_gradient(index_); }

 private:
  Owner* owner_;
  std::size_t index_;
};

// Sums small figures (losses, counts, flags) over the ranks.
Status all_reduce_values(dist::Communicator& comm, std::vector<double>& values);

// Each tensor's value from its owner to every rank.
Status broadcast_from_owners(dist::Communicator& comm, const std::vector<torch::Tensor>& tensors,
                             const std::vector<int>& owner, NcclGroup* nccl = nullptr);

// Gradients summed into their owners' .grad and freed on every other rank:
// each rank sends the gradients it does not own once (Ψ(N-1)/N bytes) and
// later receives the updated parameters it does not own, 2Ψ(N-1)/N in all,
// as much as an all-reduce moves.
//  - ZeRO-1: reduce_all() after the step's last backward;
//  - ZeRO-2 (`during_backward`): as backward finishes each gradient (a
//    post-accumulate hook), so a rank holds the gradients of its share only
//    (Rajbhandari et al. 2020, section 5.2) and one tensor's of the rest.
//    Every rank must run the same backward passes (the hooks are
//    collective); a failed transfer throws out of backward with the
//    communicator's message. The hooks are removed on destruction.
class GradientSharder {
 public:
  GradientSharder(dist::Communicator& comm, std::vector<torch::Tensor> params, std::vector<int> owner,
                  bool during_backward, NcclGroup* nccl = nullptr);
  // Every gradient to its owner, in order; those no rank has are skipped.
  Status reduce_all();
  // ZeRO-2: before each backward. A gradient that arrives twice in one
  // backward is not sent again (its owner could not tell the parts apart);
  // check() after that backward reports it.
  void begin_backward();
  Status check() const;
  ~GradientSharder();
  GradientSharder(const GradientSharder&) = delete;
  GradientSharder& operator=(const GradientSharder&) = delete;

  void on_gradient(std::size_t index);

 private:
  dist::Communicator& comm_;
  NcclGroup* nccl_;
  std::vector<torch::Tensor> params_;
  std::vector<int> owner_;
  bool hooked_ = false;
  std::vector<char> seen_;
  std::string twice_;
};

// A tensor (possibly undefined) with its dtype and shape, to one peer.
Status send_tensor(dist::Communicator& comm, int peer, const torch::Tensor& t);
Result<torch::Tensor> recv_tensor(dist::Communicator& comm, int peer);

}  // namespace tailor::runner
