// AdamW (decoupled weight decay, Loshchilov & Hutter 2019), SGD with
// momentum and Lion (Chen et al. 2023: one momentum, sign updates) over the
// model's parameters, owning the precision conventions:
//  - fp32: parameters, gradients and states fp32;
//  - bf16 / fp16 mixed: 16-bit parameters and gradients, an fp32 master copy
//    updated by fp32 states and copied back into the 16-bit parameters;
//  - pure bf16: parameters, gradients and states all bf16, no master copy.
// Updates run in place per parameter (no whole-model temporaries); AdamW on
// CPU in one fused pass over parameter, gradient and states. Weight
// decay applies to matrices only, not to norms, biases or 1-D parameters.
// adamw_8bit keeps both moments block-wise in 8 bits (adamw_8bit.h) for
// tensors of at least kAdamw8bitMinElements elements, fp32 moments for the
// rest; the master-copy conventions above are unchanged.
// Offloaded (ZeRO-Offload, Ren et al. 2021): the optimizer keeps a host copy
// of each parameter and its states and master weights in host memory (the
// tracking allocator's host ledger, HostLedgerScope; pinned for a GPU's
// parameters); offload_gradients()
// moves the gradients there, the update runs there with the same
// conventions, and the parameters on the device are written from the
// copies. The same numbers as without offload, and the same checkpoint
// layout. Where the parameters themselves are host tensors (ZeRO-3's parts
// under parameter offload), the optimizer updates them in place, its
// states and masters in the host ledger too, and there is nothing to copy.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "dsl/job_spec.h"
#include "runner/torch/adamw_8bit.h"

namespace tailor::runner {

// Lion's betas, the paper's defaults: the update interpolates with beta1,
// the momentum moves with beta2.
inline constexpr double kLionBeta1 = 0.9;
inline constexpr double kLionBeta2 = 0.99;

// How one parameter is treated, when it is not the tensor it stands for
// (ZeRO-3 updates a flat part of each parameter: decay and the 8-bit
// threshold follow the whole parameter).
struct ParamOptions {
  bool decay = false;           // matrices: dim >= 2
  bool blockwise_8bit = false;  // adamw_8bit: numel >= kAdamw8bitMinElements
};
ParamOptions param_options(const torch::Tensor& whole, dsl::Optimizer kind);

// Where the optimizer keeps its states and runs its update.
enum class OptimizerHome {
  kDevice,      // beside the parameters
  kHostCopies,  // the host, updating host copies of the device's parameters
  kHost,        // the host, where the parameters already are
};

// A checkpoint's optimizer state (state_tensors() in the one-rank layout)
// written by AdamW, for 8-bit AdamW, or the other way: the moments of
// tensors the 8-bit optimizer quantises are quantised block-wise as it
// keeps them, or dequantised into `precision`'s state dtype; the rest (fp32
// moments, master weights) carry over. So an out-of-memory re-plan that
// switches between the two resumes from the same checkpoint. `params`: the
// whole trainable tensors, in order. nullopt when the states are neither
// AdamW's nor 8-bit AdamW's for these tensors, or `to` is not the other.
std::optional<std::vector<torch::Tensor>> convert_adamw_states(const std::vector<torch::Tensor>& states,
                                                               const std::vector<torch::Tensor>& params,
                                                               dsl::Optimizer to, dsl::Precision precision);

class TrainingOptimizer {
 public:
  // `options`: one per parameter, or empty for param_options() of each.
  TrainingOptimizer(std::vector<torch::Tensor> params, dsl::Precision precision, dsl::Optimizer kind,
                    double weight_decay, const std::vector<ParamOptions>& options = {},
                    OptimizerHome home = OptimizerHome::kDevice);

  bool offloaded() const { return home_ != OptimizerHome::kDevice; }
  // Offloaded: each parameter's gradient added into its host copy's and
  // freed on the device.
  void offload_gradients();
  // Offloaded: the host copies read again from the parameters (after a
  // resume wrote them).
  void sync_from_device();

  // One update with learning rate `lr`; gradients are multiplied by
  // `grad_scale` first (clipping and loss-scale unscaling in one factor).
  void step(double lr, double grad_scale);
  void zero_grad();

  // Global L2 norm of the gradients (fp32 accumulation), divided by
  // `unscale` (the fp16 loss scale; 1 otherwise).
  double grad_norm(double unscale = 1.0) const;
  bool grads_finite() const;

  std::int64_t state_bytes() const;   // moments / momentum
  std::int64_t master_bytes() const;  // fp32 master copies
  std::int64_t steps() const { return t_; }

  // Everything a checkpoint needs, as tensors in a fixed order: per
  // parameter master, m, v, and for adamw_8bit also the m and v absmax
  // (m and v are then uint8 codes; all four undefined for fp32-state slots).
  std::vector<torch::Tensor> state_tensors() const;
  // Restores from state_tensors(); false when the shapes do not match.
  bool load_state_tensors(const std::vector<torch::Tensor>& tensors, std::int64_t steps);

 private:
  struct Slot {
    torch::Tensor param;   // what the update writes: the parameter, or its host copy when offloaded
    torch::Tensor device;  // offloaded: the parameter itself
    torch::Tensor master;  // undefined unless mixed precision
    torch::Tensor m, v;    // v undefined for SGD
    std::optional<Adam8bitState> q8;  // adamw_8bit on a large tensor: replaces m and v
    bool decay = false;
  };
  // AdamW as one pass per parameter on CPU (kernels.h); false when the
  // dtypes or device need the ATen ops instead.
  bool fused_step(Slot& s, double lr, double grad_scale, double bc1, double bc2);

  std::vector<Slot> slots_;
  OptimizerHome home_ = OptimizerHome::kDevice;
  dsl::Optimizer kind_;
  double weight_decay_;
  double beta1_ = 0.9, beta2_ = 0.95, eps_ = 1e-8, momentum_ = 0.9;
  std::int64_t t_ = 0;
};

}  // namespace tailor::runner
