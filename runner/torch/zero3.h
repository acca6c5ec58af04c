// ZeRO-3 (Rajbhandari et al. 2020, section 5.3), sharded per parameter as
// FSDP2 does: each tensor of the model, trainable or frozen (adapters and
// NF4 storage included), is cut into N flat parts (Communicator's
// segment_range) and rank r keeps part r only, as a tensor of its own: the
// "shard", which is what the optimizer updates. The model's tensors keep
// their shapes with an empty storage. Just before a unit of the forward
// pass computes (model.h's UnitHook: the embeddings, each block, the head)
// its tensors are all-gathered into their storage, and right after it
// emptied again; backward gathers each block once more as the gradient of
// its output is complete (a hook on the block's input releases it after)
// and its gradients are reduce-scattered into the shards' gradients as
// backward finishes each one (a post-accumulate hook). The optimizer step
// touches shards only: nothing is sent after it.
//
// Storage is swapped under autograd's feet on purpose: a block's saved
// activations reference the weights' storage (a linear keeps its weight for
// the input gradient) and read the refilled bytes in backward. The bytes
// are written through the raw pointer (or an alias), so version counters
// do not move.
//
// The collectives run on a worker thread of their own (dist::SerialWorker),
// in the same order on every rank, while the compute thread goes on: the
// next unit is gathered while this one computes (forward: the next block;
// backward: the block below the next), and each gradient is
// reduce-scattered while backward computes the next one (one in flight at
// a time, so at most two whole gradients are alive). The last block stays
// gathered from its forward into its backward.
//
// Per step and rank: every parameter byte but its own part is received
// twice (forward, backward; the embeddings, the head and the last block
// once) and every gradient reduce-scattered once, 3Ψ(N-1)/N in all, as the
// ZeRO paper and FSDP; memory holds Ψ/N of weights, gradients and states
// plus two units (the one computing and the one arriving).
//
// Parameter offload (ZeRO-Infinity, Rajbhandari et al. 2021, with the
// parts in CPU memory rather than NVMe): the parts and their gradients are
// host tensors (the tracking allocator's host ledger; pinned when the model
// is on a GPU), so the device holds only the gathered units and the
// gradients backward is producing; the optimizer updates the parts where
// they are.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "runner/dist/communicator.h"
#include "runner/dist/serial_worker.h"
#include "runner/torch/checkpoint.h"
#include "runner/torch/model.h"
#include "runner/torch/nccl_group.h"

namespace tailor::runner {

class ParameterSharder : public UnitHook {
 public:
  // `units[u]`: the tensors unit u reads (a tensor may be in several; empty
  // tensors are left alone). `alignment(t)`: part boundaries of t on
  // multiples of that many elements (8-bit optimizer blocks), 1 otherwise.
  // Each part is copied out of its tensor now; shard() empties the tensors.
  // `host_parts`: the parts and their gradients in host memory. `nccl`:
  // GPU tensors gathered and reduce-scattered on the GPU (nccl_group.h)
  // rather than through host memory over `comm`.
  ParameterSharder(dist::Communicator& comm, const std::vector<std::vector<torch::Tensor>>& units,
                   const std::function<std::int64_t(const torch::Tensor&)>& alignment, bool host_parts = false,
                   NcclGroup* nccl = nullptr);
  ~ParameterSharder() override;
  ParameterSharder(const ParameterSharder&) = delete;
  ParameterSharder& operator=(const ParameterSharder&) = delete;

  // This rank's part of `t`, a 1-D tensor (a leaf requiring grad when t does,
  // whose .grad receives t's summed gradient part).
  torch::Tensor shard_of(const torch::Tensor& t) const;
  // The parts copied again from the whole tensors (after a resume wrote
  // them), then every whole tensor emptied: before training.
  void shard();

  // UnitHook: collective (every rank runs the same forward). A failed
  // transfer throws, out of the forward or backward pass.
  void before_unit(std::size_t unit, const torch::Tensor& input) override;
  void after_unit(std::size_t unit) override;
  // After each backward (collective): waits for the gradients in flight,
  // then empties any unit still gathered (the first block when the
  // embeddings are frozen, whose input has no gradient to hook; the head
  // when forward ran without grad). A failed transfer is an error.
  Status end_backward();

  // Every whole tensor onto rank `root` (collective), for the export; with
  // `only` not empty, just those tensors (the adapters, when the base is
  // not written). Each tensor is assembled in host memory, one at a time;
  // with `to_host` it stays there (the model's tensor becomes a host
  // tensor), so the whole model is never on one GPU.
  Status gather_to(int root, const std::vector<torch::Tensor>& only = {}, bool to_host = false);

  // This rank's part of model tensor `t` as checkpoint piece `name`
  // (checkpoint.h); nullopt for a tensor the sharder does not hold.
  std::optional<ShardPiece> piece_of(const torch::Tensor& t, std::string name) const;
  // The optimizer states of the parts of `trainable` (TrainingOptimizer's
  // state_tensors(), `per` a tensor) as pieces of the one-rank layout's
  // states "optimizer.<i * per + k>", as shard_states() cuts them: states
  // element-wise in the parameter's shape, 8-bit codes flat, block scales
  // by block. shard_states() is the inverse: this rank's parts of the whole
  // states of a checkpoint.
  std::vector<ShardPiece> state_pieces(const std::vector<torch::Tensor>& trainable,
                                       const std::vector<torch::Tensor>& local, std::size_t per) const;
  std::vector<torch::Tensor> shard_states(const std::vector<torch::Tensor>& trainable,
                                          const std::vector<torch::Tensor>& whole, std::size_t per) const;

  bool host_parts() const { return host_parts_; }
  // This rank's parts in bytes, split by `is_adapter` (of the whole tensor),
  // and their gradients (host bytes under host_parts()).
  struct Owned {
    std::int64_t adapter = 0, other = 0, gradients = 0;
  };
  Owned owned_bytes(const std::function<bool(const torch::Tensor&)>& is_adapter) const;

  void on_gradient(std::size_t slot);  // the post-accumulate hook

 private:
  struct Slot {
    torch::Tensor whole;
    torch::Tensor shard;
    torch::Tensor staging;  // a GPU tensor's gather, in host memory until copied
    std::int64_t numel = 0, bytes = 0, align = 1;
    std::int64_t begin = 0, end = 0;  // this rank's elements
    int refs = 0;                     // gathered units holding it
  };
  // A unit's gather: issued (storage allocated, the all-gathers queued),
  // then completed (waited for; GPU tensors copied from staging). release()
  // completes a unit before emptying it, so no transfer writes into freed
  // storage.
  enum class Unit : char { kReleased, kIssued, kGathered };
  const Slot& slot_of(const torch::Tensor& t) const;
  void issue(std::size_t unit);
  void complete(std::size_t unit);
  void gather(std::size_t unit);
  void release(std::size_t unit);
  void start_fill(Slot& s);  // allocate, copy this rank's part, queue the all-gather
  void on_input_gradient(std::size_t unit);
  Status reduce_part(std::size_t slot, const torch::Tensor& sum);  // on the worker

  // The part and gradient memory's: the host ledger or not, as built.
  torch::Tensor part_like(const torch::Tensor& t) const;

  dist::Communicator& comm_;
  NcclGroup* nccl_ = nullptr;
  bool host_parts_ = false;
  std::vector<Slot> slots_;
  std::unordered_map<const void*, std::size_t> by_storage_;
  std::vector<std::vector<std::size_t>> units_;
  std::vector<Unit> state_;
  std::vector<dist::SerialWorker::Ticket> ready_;  // per unit: its gathers are done when this is
  dist::SerialWorker::Ticket last_reduce_ = 0;     // the gradient in flight
  std::unique_ptr<dist::SerialWorker> worker_;     // last: stopped first
};

}  // namespace tailor::runner
