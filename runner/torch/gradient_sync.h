// How one step's gradients become the same update on every rank: the seam
// between the training loop (trainer.cpp) and the ZeRO stage. Built once a
// run by make_gradient_sync(), the one place the stage is read:
//  - replicated (stage 0, or one rank): every rank holds the whole model,
//    gradients and optimizer; the gradients are all-reduced, the step's last
//    micro-batch's overlapped with its backward (data_parallel.h);
//  - sharded optimizer (ZeRO-1 and 2): each rank updates the tensors it owns
//    (partition_by_size), their gradients summed onto it after the last
//    backward (1) or during each (2), the updated tensors broadcast after
//    the step (Rajbhandari et al. 2020, sections 5.1-5.2);
//  - sharded parameters (ZeRO-3, or one rank offloading its parameters):
//    each rank keeps a part of every tensor, gathered per unit (zero3.h).
// The trainer calls the same steps whatever the stage: before each
// micro-batch, after each backward, reduce after the last, finiteness and
// norm across the ranks, after the update; a checkpoint's pieces, a
// resumed checkpoint's states, this rank's static bytes.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/status.h"
#include "dsl/technique.h"
#include "runner/dist/communicator.h"
#include "runner/torch/checkpoint.h"
#include "runner/torch/model.h"
#include "runner/torch/nccl_group.h"
#include "runner/torch/optimizer.h"
#include "strategies/strategy.h"

namespace tailor::runner {

struct SyncSetup {
  int zero_stage = 0;
  bool offload_params = false;  // the parameters' parts in host memory (ZeRO-3 on one rank too)
  dsl::Optimizer optimizer = dsl::Optimizer::kAdamw;
  int rank = 0, world = 1;
  dist::Communicator* comm = nullptr;  // null: one rank that shares nothing
  NcclGroup* nccl = nullptr;           // GPU tensors over NCCL rather than `comm`
};

class GradientSync {
 public:
  virtual ~GradientSync() = default;

  // What this rank's optimizer updates: the trainable tensors, those it owns
  // (ZeRO-1/2) or its parts of them (ZeRO-3), with their options (empty:
  // param_options() of each).
  struct Share {
    std::vector<torch::Tensor> tensors;
    std::vector<ParamOptions> options;
  };
  virtual Share optimizer_share() const = 0;
  // The optimizer's tensors are not the model's (ZeRO-3's parts): their
  // gradients are freed through the optimizer too.
  virtual bool optimizer_has_own_tensors() const { return false; }

  // Before the first step, after a resume wrote the weights.
  virtual void begin_training() {}
  // Before each micro-batch's forward; `last`: the step's last.
  virtual void before_micro_batch(bool /*last*/) {}
  virtual Status after_backward() { return Status::ok(); }
  // After the step's last backward: the global batch's gradients where
  // this rank's optimizer reads them.
  virtual Status reduce() = 0;
  // Whether every rank's gradients are finite, and their L2 norm, from
  // this rank's figures (the same where each rank holds all of them).
  virtual Result<bool> all_finite(bool mine) { return mine; }
  virtual Result<double> norm(double mine) { return mine; }
  // After the optimizer's update: every rank's parameters current.
  virtual Status after_update() { return Status::ok(); }

  // Checkpoints. Sharded: every rank writes its pieces (checkpoint.h);
  // `checkpointed` as the trainer saves it, `states` this rank's optimizer
  // states, `per` of them per trainable tensor.
  virtual bool writes_shards() const { return false; }
  virtual std::vector<ShardPiece> checkpoint_pieces(const std::vector<torch::Tensor>& /*checkpointed*/,
                                                    const std::vector<torch::Tensor>& /*states*/,
                                                    std::size_t /*per*/) const {
    return {};
  }
  // A checkpoint's states of every trainable tensor (the one-rank layout,
  // written with any rank count) as this rank's optimizer holds them.
  virtual std::vector<torch::Tensor> states_of_rank(std::vector<torch::Tensor> whole, std::size_t /*per*/) const {
    return whole;
  }

  // This rank's static bytes: `parts` as measured on the model's tensors
  // (weights, adapter, gradients) corrected for what the rank keeps.
  virtual void correct_static_bytes(const CausalLMImpl& /*model*/, strategies::MemoryBreakdown& /*parts*/) const {}
  // Parameter offload: this rank's parts and their gradients in host memory.
  struct HostParts {
    std::int64_t parameters = 0, gradients = 0;
  };
  virtual std::optional<HostParts> host_parts() const { return std::nullopt; }

  // Forward passes are collective (ZeRO-3 gathers per unit): a rank
  // without a batch still runs one.
  virtual bool collective_forward() const { return false; }
  // Before rank 0 writes the model: the whole tensors (or only `only`)
  // onto its host memory, a tensor at a time. Collective.
  virtual Status gather_for_output(const std::vector<torch::Tensor>& /*only*/) { return Status::ok(); }
};

// The plan's synchronisation for `trainable` (the model's tensors that
// require gradients). ZeRO-3 installs itself as the model's unit hook.
std::unique_ptr<GradientSync> make_gradient_sync(const SyncSetup& setup, CausalLMImpl& model,
                                                 const std::vector<torch::Tensor>& trainable);

// Whether the plan shares anything across ranks: ZeRO-1, 2 or 3 over
// several ranks, or parameter offload on one.
bool is_sharded(const SyncSetup& setup);

}  // namespace tailor::runner
