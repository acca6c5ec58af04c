#include "runner/torch/gradient_sync.h"

#include <algorithm>
#include <cmath>

#include "runner/torch/data_parallel.h"
#include "runner/torch/lora.h"
#include "runner/torch/zero3.h"
#include "strategies/memory_model.h"

namespace tailor::runner {
namespace {

// Gradient buckets as the planner counts them (strategies/memory_model.h).
constexpr std::int64_t kGradientBucketBytes = strategies::kTailorGradientBucketBytes;

Result<double> sum_over_ranks(dist::Communicator& comm, double mine) {
  std::vector<double> v = {mine};
  TAILOR_RETURN_IF_ERROR(all_reduce_values(comm, v));
  return v[0];
}

// Stage 0: the whole model on every rank. Over several ranks the step's
// last backward hands each finished gradient to an all-reduce in flight.
class Replicated final : public GradientSync {
 public:
  Replicated(const SyncSetup& s, const std::vector<torch::Tensor>& trainable) : trainable_(trainable) {
    if (s.world > 1) overlap_ = std::make_unique<OverlappedAllReduce>(*s.comm, trainable, kGradientBucketBytes, s.nccl);
  }
  Share optimizer_share() const override { return {trainable_, {}}; }
  void before_micro_batch(bool last) override {
    if (overlap_ && last) overlap_->arm();
  }
  Status reduce() override { return overlap_ ? overlap_->finish() : Status::ok(); }

 private:
  std::vector<torch::Tensor> trainable_;
  std::unique_ptr<OverlappedAllReduce> overlap_;
};

// Where each rank holds a share of the gradients, finiteness and the norm
// are the ranks' together.
class ShardedBase : public GradientSync {
 public:
  explicit ShardedBase(const SyncSetup& s) : comm_(*s.comm), rank_(s.rank) {}
  bool writes_shards() const override { return true; }
  Result<bool> all_finite(bool mine) override {
    TAILOR_ASSIGN_OR_RETURN(const double bad, sum_over_ranks(comm_, mine ? 0.0 : 1.0));
    return bad == 0;
  }
  Result<double> norm(double mine) override {
    TAILOR_ASSIGN_OR_RETURN(const double squares, sum_over_ranks(comm_, mine * mine));
    return std::sqrt(squares);
  }

 protected:
  dist::Communicator& comm_;
  int rank_;
};

// ZeRO-1 and 2: whole tensors owned by ranks.
class ShardedOptimizer final : public ShardedBase {
 public:
  ShardedOptimizer(const SyncSetup& s, const std::vector<torch::Tensor>& trainable)
      : ShardedBase(s),
        stage_(s.zero_stage),
        world_(s.world),
        nccl_(s.nccl),
        trainable_(trainable),
        owner_(partition_by_size(trainable, s.world)),
        sharder_(*s.comm, trainable, owner_, /*during_backward=*/s.zero_stage >= 2, s.nccl) {}

  Share optimizer_share() const override {
    Share share;
    for (std::size_t i = 0; i < trainable_.size(); ++i) {
      if (owner_[i] == rank_) share.tensors.push_back(trainable_[i]);
    }
    return share;
  }
  void before_micro_batch(bool) override { sharder_.begin_backward(); }
  Status reduce() override {
    if (world_ == 1) return Status::ok();
    TAILOR_RETURN_IF_ERROR(sharder_.check());
    // ZeRO-2 sent each gradient during backward.
    return stage_ == 1 ? sharder_.reduce_all() : Status::ok();
  }
  // Every rank needs every parameter.
  Status after_update() override { return broadcast_from_owners(comm_, trainable_, owner_, nccl_); }

  // Rank 0 the parameters whole (they are replicated); every rank the
  // states of the tensors it owns.
  std::vector<ShardPiece> checkpoint_pieces(const std::vector<torch::Tensor>& checkpointed,
                                            const std::vector<torch::Tensor>& states, std::size_t per) const override {
    std::vector<ShardPiece> out;
    if (rank_ == 0) {
      for (std::size_t i = 0; i < checkpointed.size(); ++i) {
        out.push_back({"model." + std::to_string(i), checkpointed[i].sizes().vec(), 0, checkpointed[i]});
      }
    }
    std::size_t mine = 0;
    for (std::size_t i = 0; i < trainable_.size(); ++i) {
      if (owner_[i] != rank_) continue;
      for (std::size_t k = 0; k < per; ++k) {
        const torch::Tensor& t = states[mine * per + k];
        if (t.defined()) out.push_back({"optimizer." + std::to_string(i * per + k), t.sizes().vec(), 0, t});
      }
      ++mine;
    }
    return out;
  }
  std::vector<torch::Tensor> states_of_rank(std::vector<torch::Tensor> whole, std::size_t per) const override {
    std::vector<torch::Tensor> mine;
    for (std::size_t i = 0; i < trainable_.size(); ++i) {
      if (owner_[i] != rank_) continue;
      for (std::size_t k = 0; k < per; ++k) mine.push_back(std::move(whole[i * per + k]));
    }
    return mine;
  }

 private:
  int stage_, world_;
  NcclGroup* nccl_;
  std::vector<torch::Tensor> trainable_;
  std::vector<int> owner_;
  GradientSharder sharder_;
};

// ZeRO-3: a part of every tensor of the model on each rank.
class ShardedParameters final : public ShardedBase {
 public:
  ShardedParameters(const SyncSetup& s, CausalLMImpl& model, const std::vector<torch::Tensor>& trainable)
      : ShardedBase(s), model_(model), trainable_(trainable) {
    // The units the forward pass gathers: the embeddings, each block with
    // its adapters, the head.
    std::vector<std::vector<torch::Tensor>> units(model.unit_count());
    for (std::size_t u = 0; u < units.size(); ++u) {
      units[u] = model.unit_parameters(u);
      if (u >= 1 && u + 1 < units.size()) {
        for (torch::Tensor& t : lora_layer_tensors(model, u - 1)) units[u].push_back(std::move(t));
      }
    }
    // Decayed and quantised as the whole tensors would be (8-bit states
    // split at block boundaries).
    const dsl::Optimizer kind = s.optimizer;
    sharder_ = std::make_unique<ParameterSharder>(
        *s.comm, units,
        [kind](const torch::Tensor& t) {
          return t.requires_grad() && param_options(t, kind).blockwise_8bit ? kAdamw8bitBlockSize : std::int64_t{1};
        },
        s.offload_params, s.nccl);
    model.set_unit_hook(sharder_.get());
    for (const torch::Tensor& t : trainable_) {
      share_.tensors.push_back(sharder_->shard_of(t));
      share_.options.push_back(param_options(t, kind));
    }
  }
  ~ShardedParameters() override { model_.set_unit_hook(nullptr); }

  Share optimizer_share() const override { return share_; }
  bool optimizer_has_own_tensors() const override { return true; }
  void begin_training() override { sharder_->shard(); }
  Status after_backward() override { return sharder_->end_backward(); }
  // Each gradient was reduce-scattered as backward finished it.
  Status reduce() override { return Status::ok(); }

  std::vector<ShardPiece> checkpoint_pieces(const std::vector<torch::Tensor>& checkpointed,
                                            const std::vector<torch::Tensor>& states, std::size_t per) const override {
    std::vector<ShardPiece> out;
    for (std::size_t i = 0; i < checkpointed.size(); ++i) {
      std::string name = "model." + std::to_string(i);
      if (auto piece = sharder_->piece_of(checkpointed[i], name)) {
        out.push_back(std::move(*piece));
      } else if (rank_ == 0) {  // a tensor the sharder does not hold: rank 0's, whole
        out.push_back({std::move(name), checkpointed[i].sizes().vec(), 0, checkpointed[i]});
      }
    }
    for (ShardPiece& p : sharder_->state_pieces(trainable_, states, per)) out.push_back(std::move(p));
    return out;
  }
  std::vector<torch::Tensor> states_of_rank(std::vector<torch::Tensor> whole, std::size_t per) const override {
    return sharder_->shard_states(trainable_, whole, per);
  }

  // This rank's parts (gathered units are transient); offloaded parts and
  // their gradients are host memory.
  void correct_static_bytes(const CausalLMImpl& model, strategies::MemoryBreakdown& parts) const override {
    std::vector<const void*> adapters;
    for (const torch::Tensor& t : lora_parameters(model)) adapters.push_back(t.unsafeGetTensorImpl());
    const auto owned = sharder_->owned_bytes([&](const torch::Tensor& t) {
      return std::find(adapters.begin(), adapters.end(), t.unsafeGetTensorImpl()) != adapters.end();
    });
    const bool device = !sharder_->host_parts();
    parts.adapter = Bytes(device ? owned.adapter : 0);
    parts.weights = Bytes(device ? owned.other : 0);
    parts.gradients += Bytes(device ? owned.gradients : 0);
  }
  std::optional<HostParts> host_parts() const override {
    if (!sharder_->host_parts()) return std::nullopt;
    const auto owned = sharder_->owned_bytes([](const torch::Tensor&) { return false; });
    return HostParts{owned.other, owned.gradients};
  }
  bool collective_forward() const override { return true; }
  Status gather_for_output(const std::vector<torch::Tensor>& only) override {
    return sharder_->gather_to(0, only, /*to_host=*/true);
  }

 private:
  CausalLMImpl& model_;
  std::vector<torch::Tensor> trainable_;
  std::unique_ptr<ParameterSharder> sharder_;
  Share share_;
};

}  // namespace

bool is_sharded(const SyncSetup& s) { return s.zero_stage >= 1 && (s.world > 1 || s.offload_params); }

std::unique_ptr<GradientSync> make_gradient_sync(const SyncSetup& setup, CausalLMImpl& model,
                                                 const std::vector<torch::Tensor>& trainable) {
  if (!is_sharded(setup)) return std::make_unique<Replicated>(setup, trainable);
  if (setup.zero_stage >= 3) return std::make_unique<ShardedParameters>(setup, model, trainable);
  return std::make_unique<ShardedOptimizer>(setup, trainable);
}

}  // namespace tailor::runner
