// The memory model: bytes per device, by component, for a model shape, a
// batch shape and a strategy. Every formula is in memory_model.cpp with its
// source; constants that are assumptions rather than arithmetic are named
// here and can be corrected by measured calibration.
//
// What it deliberately does not model: allocator fragmentation (the spec's
// headroom covers it), NCCL buffers, and kernels' private workspaces beyond
// the named overhead constants.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/units.h"
#include "dsl/job_spec.h"
#include "dsl/model_family.h"
#include "strategies/measured_corrections.h"
#include "strategies/strategy.h"

namespace tailor::strategies {

// Parameter counts of an architecture, split the way memory needs them.
struct ParameterCounts {
  std::int64_t total = 0;
  std::int64_t block_linear = 0;  // weights of the blocks' linear layers (what QLoRA quantises)
  std::int64_t expert = 0;        // every block's experts and router (mixture of experts)
  std::int64_t expert_quantizable = 0;  // of those, the expert weights QLoRA stores in NF4 (not the routers)
  std::int64_t largest_expert = 0;  // one expert's gate/up weight (2I x C): the dequantise buffer under QLoRA
  std::int64_t active_expert = 0; // of those, what one token goes through (its experts and the routers)
  std::int64_t other = 0;         // embeddings, head, norms, biases: kept in the compute dtype
  std::int64_t largest_linear = 0;  // the biggest single linear weight (dequantise / gather buffer)
  std::int64_t per_layer = 0;     // all parameters of one block
};
ParameterCounts count_parameters(const dsl::ModelArch& arch);

// LoRA parameters for `targets` (empty = every linear of the blocks) at rank r:
// r * (in + out) per targeted linear, per layer (Hu et al. 2021).
std::int64_t lora_parameter_count(const dsl::ModelArch& arch, std::int64_t rank,
                                  const std::vector<std::string>& targets);

// Assumptions that are not arithmetic. Defaults are documented at their
// definition; `calibrated()` applies measured correction factors.
// tailor-runner's cross-entropy off the fused CPU kernel works on slices of
// this many logits (runner/torch/cross_entropy.h); its one fp32 temporary is
// the logits term's only addition to the logits and their gradient. 64 MiB:
// smaller slices cost an H100 step time (2^22 logits: 8% of a 0.9B Llama's).
inline constexpr std::int64_t kCrossEntropySliceElements = std::int64_t{1} << 24;

struct MemoryConstants {
  // Per GPU process: the CUDA context, which no allocator counts, and the
  // cuBLAS workspaces, which LibTorch's caching allocator does count.
  Bytes gpu_context_overhead;
  Bytes gpu_allocator_workspace;
  Bytes cpu_runtime_overhead;  // tracked on CPU: none (the tracking allocator counts tensors only)
  double logits_bytes_per_element_half;  // composed ops: fp32 log-probs + the gradients w.r.t. them and the logits, per b*s*V element
  double logits_bytes_per_element_fp32;
  double logits_bytes_per_element_lean_half;  // tailor-runner's cross-entropy: logits + their gradient
  double logits_bytes_per_element_lean_fp32;
  // Multiplicative corrections from measurements (1.0 = formulas as derived).
  double activation_factor = 1.0;
  double logits_factor = 1.0;
  double static_factor = 1.0;  // weights, gradients, optimizer states, master weights, adapters

  static MemoryConstants defaults();
};

// Calibration: the constants corrected by a measured run, so that the same
// strategy's estimate reproduces `measured` (per-component peaks, e.g. from
// the runner's tracking allocator). `estimated` must come from `base`.
// Components the measurement does not cover (zero bytes) keep their factor.
MemoryConstants calibrate(const MemoryConstants& base, const MemoryBreakdown& estimated,
                          const MemoryBreakdown& measured);

// The shape of one forward pass.
// Under preference training (Strategy::pairs) b counts pairs, and the
// passes see 2b rows: estimate_memory doubles it.
struct BatchShape {
  std::int64_t micro_batch = 1;  // b
  std::int64_t seq_len = 0;      // s
};

// tailor-runner's all-reduce buckets: large enough that loopback latency is
// amortised, small next to what they carry.
inline constexpr std::int64_t kTailorGradientBucketBytes = std::int64_t{4} << 20;

// How a training stack's memory differs from the formulas, each a named
// term with its source: tailor-runner's by default, the others' from
// their runtime profile (runtime_profile.h), which is what sets them.
struct RuntimeQuirks {
  // tailor-runner's cross-entropy (runner/torch/cross_entropy.h) keeps the
  // logits and their gradient only, on every device; false models composed
  // ops (a cast, log_softmax, nll_loss), as other frameworks run them.
  bool lean_cross_entropy = true;
  // transformers 4.46-4.48's ForCausalLMLoss (loss/loss_utils.py), and
  // fms-acceleration's FastForCausalLMLoss modelled on it, cast the logits
  // to fp32 and copy the shifted slice contiguously while the model still
  // holds its half-precision logits: in forward 2 + 4 + 4 B per logit, plus
  // the 4 B of log-probabilities composed ops write, above the 12 B (4 B
  // lean) kept at the start of backward. 4.49 pads the labels instead.
  bool shifted_logits_copy = false;
  // Bytes per logit of the model's output that the training loop keeps
  // through backward (0: none). The HF Trainer's compute_loss lets the
  // output go once it has the loss; Answer.AI's fsdp_qlora train.py keeps
  // `output` until the next step's forward replaces it, and transformers
  // before 4.46 return fp32 logits (the model's forward casts them before
  // its loss): 4 B per logit beside the loss's 12 at the start of backward.
  double held_output_bytes_per_logit = 0;
  // Whether a quantised (NF4/int8) frozen linear keeps its input for
  // backward. tailor-runner's does not (only the input gradient is needed);
  // bitsandbytes' MatMul4Bit does (it saves A whenever A requires grad), so
  // QLoRA with bitsandbytes keeps every block linear's input.
  bool quantized_linear_keeps_input = false;
  // Temporaries of the optimizer step, in bytes per optimizer-state element
  // of one moment: torch's foreach AdamW allocates sqrt(v) for every
  // parameter at once (one moment's size) while weights, gradients and
  // states are all alive, which can exceed the backward peak. tailor-runner
  // updates in place (0).
  double optimizer_step_temporaries = 0;
  // PEFT's prepare_model_for_kbit_training (which TRL's SFTTrainer and
  // Axolotl call for a 4-bit base) casts every parameter that is not
  // quantised (embeddings, norms, lm_head) to fp32: those weights take 4
  // bytes, and the residual stream they feed, with every checkpointed layer
  // input and the logits, is fp32. Only with a quantised base, and not
  // under ZeRO-3/FSDP, where TRL skips the preparation (sharded QLoRA).
  bool fp32_non_quantized = false;
  // FSDP1's no_sync() under gradient accumulation (litgpt's
  // fabric.no_backward_sync): every micro-step but the last leaves each
  // unit's gradient unsharded, and a FlatParameter mixing frozen and LoRA
  // weights (use_orig_params=True) has a gradient for all of them. So under
  // ZeRO-3 with accumulation each rank holds a full-size gradient of every
  // unit with a trainable parameter: the blocks (frozen weights included)
  // under LoRA, the whole model in full fine-tuning. Source: torch 2.1
  // fsdp/_runtime_utils.py (post-backward returns before resharding the
  // gradient when not syncing), flat_param.py (requires_grad of a mixed
  // FlatParameter); litgpt's 2-GPU LoRA tables measure it (peak_corpus).
  bool unsharded_accumulated_gradients = false;
  // litgpt keeps no tied weights: its checkpoint converter copies a tied
  // embedding into a separate lm_head (litgpt/scripts/convert_hf_checkpoint.py),
  // so Llama 3.2 1B/3B carry the head twice.
  bool unties_embeddings = false;
  // litgpt projects q, k and v with one linear and splits its output into
  // views (litgpt/model.py's CausalSelfAttention; lit_gpt's of 2023 alike).
  // With as many K/V heads as query heads, V reaches the attention as such a
  // view, and the attention saving it keeps the whole q/k/v output alive
  // beside the rotated q and k; with fewer, K and V are first repeated to
  // every query head (flash attention needs it in training). Under LoRA the
  // fused linear has one adapter, so one dropout serves q, k and v, and
  // where not all three are adapted, the index_copy padding the adapter's
  // output keeps it (litgpt/lora.py, zero_pad). Measured on lit_gpt's own
  // modules (saved tensors, docs/planner.md "What stacks keep for backward").
  bool fused_qkv_views = false;
  // An RMSNorm that casts its input to fp32 first keeps that copy for
  // backward: 4 B per element of each norm's input rather than the compute
  // dtype's. litgpt's since 2023-10-24 (6178c7cc, "Half precision fixes";
  // lit_gpt before it kept the input as it came).
  bool fp32_norm_inputs = false;
  // transformers' LlamaRMSNorm (and its copies: Mistral, Qwen2/3) multiplies
  // its weight by the normalised input cast back to the compute dtype, which
  // the multiplication keeps when the weight trains: a full fine-tune's
  // norms keep one more compute-dtype copy of their input.
  bool norm_keeps_normalized = false;
  // PEFT since 0.12 (autocast_adapter_dtype) keeps LoRA weights in fp32
  // under a half-precision base and casts each adapter's input to fp32, which
  // the Trainer's autocast casts back for the matmul: every adapted linear
  // keeps its own compute-dtype copy of its input rather than sharing the
  // one the base linear reads, as with dropout.
  bool adapter_input_copies = false;
  // PEFT's modules_to_save (ModulesToSaveWrapper) trains a copy of each
  // module and keeps the original beside it (for disable_adapter), so the
  // embedding and head it trains are held twice; tailor-runner trains them
  // in place.
  bool whole_module_copies = false;
  // Lightning's bitsandbytes plugin quantises every nn.Linear, the lm_head
  // included (litgpt passes no ignore_modules); PEFT/transformers and
  // tailor-runner keep the head in the compute dtype.
  bool quantizes_head = false;
  // Dequantised copies of a 4-bit weight alive at once in its matmul:
  // Lightning quantises from fp16, so bitsandbytes dequantises to fp16 and
  // MatMul4Bit casts that to bf16 (2); quantised from the compute dtype, 1.
  double dequantized_copies = 1;
  // Reentrant checkpointing around FSDP1 units whose weights are all frozen:
  // transformers 4.x's model loop checkpoints each decoder layer's call,
  // the FSDP unit's, with use_reentrant=True by default, and PEFT's
  // fsdp_auto_wrap_policy gives the LoRA weights units of their own. The
  // recomputation runs FSDP's pre-forward on the detached copy of the saved
  // input, and the post-backward hook FSDP registers on that leaf keeps it,
  // and the gradient backward gives it, until the backward ends (torch's
  // fsdp/_runtime_utils.py, _register_post_backward_reshard_only_hook;
  // utils/checkpoint.py, detach_variable). So under ZeRO-3 with adapters
  // every checkpointed input and its gradient are alive at the end of
  // backward. runtime_profile_interop_test measures it on torch's FSDP1
  // (every input alive with its gradient; none without reentrance, none
  // with transformers 5, which checkpoints inside the layer): off in the hf
  // profile, on for the corpus' transformers 4.x runs (docs/planner.md).
  bool held_checkpoints = false;
  // ZeRO-3: units gathered whole at once. FSDP, DeepSpeed and tailor-runner
  // (runner/torch/zero3.h) hold the one computing and the one prefetched
  // (2); tailor-runner counts the head's unit when it is the larger.
  double gathered_units = 2;
  bool head_unit_gathered = false;
  // FSDP1 does not free the root unit's gathered parameters after forward
  // under FULL_SHARD ("used immediately in backward": torch's
  // fsdp/_runtime_utils.py, _post_forward_reshard), and a wrap policy of
  // blocks leaves the embedding, the final norm and an untied head to the
  // root. So that unit is whole on every rank from the start of forward
  // through backward, beside the gathered blocks. DeepSpeed's ZeRO-3 gathers
  // and releases each submodule on a schedule of its own, not modelled here.
  bool root_unit_gathered = false;
  // ZeRO-3: whole gradients alive until they are reduce-scattered into the
  // parts. tailor-runner sends each as backward completes it, in fp32, one
  // in flight while backward computes the next: the fp32 sum being sent
  // and the gradient just computed, of the largest trainable tensor at
  // most. Measured: without it, full fine-tunes under ZeRO-3 peaked 2-5%
  // above the estimate (with synchronous sends, one gradient).
  bool whole_gradient_transient = false;
  // Stage 0 across ranks: gradient buckets staged in fp32 for the
  // all-reduce at once (the one filling and the one in flight).
  double gradient_buckets = 0;
  Bytes gradient_bucket_bytes = Bytes(kTailorGradientBucketBytes);
  // Offload: gradients streamed to the host as backward produces them
  // (DeepSpeed's ZeRO-Offload: the device holds about two layers' worth);
  // false: the device keeps this rank's gradients until the step, and the
  // host holds a copy of its parameters and gradients in their own dtype
  // (tailor-runner, runner/torch/optimizer.h) rather than fp32 gradients;
  // with the parameters offloaded too, the host holds the ZeRO-3 parts and
  // their gradients, and the optimizer updates them there without copies.
  bool offload_streams_gradients = true;
};

struct MemoryInput {
  const dsl::ModelArch* arch = nullptr;
  BatchShape batch;
  Strategy strategy;
  std::vector<std::string> lora_targets;  // empty = all linear layers
  double lora_dropout = 0.0;
  bool on_gpu = true;       // false: CPU training (no CUDA context)
  // The runner's fused CPU kernels (runner/torch/fused_ops.h) keep fewer
  // tensors than composed ops: SwiGLU keeps only its input, RoPE nothing.
  // On by default for CPU.
  bool fused_kernels = false;
  bool dropout = false;     // model dropout (GPT-3-style training); fine-tuning here runs without
  // orpo: each pair's chosen row goes through the head twice (its completion
  // for the odds ratio, its prompt for the NLL over the whole sequence).
  bool prompt_nll = false;
  // reward: the head is a (1, hidden) score read at each row's last token,
  // no vocabulary projection and no logits.
  bool score_head = false;
  // strategy.lora.modules_to_save beside adapters: the embedding and an
  // untied head trained whole (gradients, optimizer states and, under mixed
  // precision, fp32 master weights as a full fine-tune keeps them).
  dsl::WholeModules whole_modules;
  // What the stack that runs the job keeps beyond the formulas (runtime_profile.h).
  RuntimeQuirks quirks;
};

// A measured term's bytes in one estimate.
struct CorrectionTerm {
  Correction id;
  Bytes bytes;  // added to its component (correction_info(id).component), before the overlap
};

struct MemoryEstimate {
  MemoryBreakdown per_device;  // the peak on each GPU (all ranks are alike)
  Bytes reference;             // dpo's and kto's separate reference: the frozen copy (this rank's part at
                               // ZeRO-3), counted in per_device.weights (in host under parameter offload)
  Bytes host;                  // host RAM the strategy needs (offload buffers, 0 without offload)
  Bytes root_unit;             // FSDP1's root unit, whole through the step (RuntimeQuirks::root_unit_gathered),
                               // counted in per_device.overhead
  std::int64_t trainable_parameters = 0;
  std::int64_t frozen_parameters = 0;
  std::vector<CorrectionTerm> corrections;  // the measured terms counted above, in the order they were added
  Bytes calibrated;  // added to per_device.overhead by this machine's calibration (calibration.h)
};

MemoryEstimate estimate_memory(const MemoryInput& in, const MemoryConstants& k = MemoryConstants::defaults());

// ---- the individual formulas, exposed for tests and explanations ----------

// Bytes per element of each dtype involved.
double weight_bytes_per_param(Precision p);    // as stored for compute
double gradient_bytes_per_param(Precision p);
double optimizer_bytes_per_param(Optimizer o, Precision p, std::int64_t block_size = 2048);
double master_bytes_per_param(Precision p);    // 4 under mixed precision, else 0
double quantized_bytes_per_param(Quantization q, std::int64_t out_features = 4096);

// Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
// Transformer Models", eq. 1): activations of one GPT-3-style layer with
// 16-bit activations, dropout and standard attention: s*b*h*(34 + 5*a*s/h).
double korthikanti_layer_bytes(std::int64_t s, std::int64_t b, std::int64_t h, std::int64_t a);

// One layer's saved activations for this architecture, tensor by tensor
// (see the table in memory_model.cpp), in bytes. `fused`: as the runner's
// fused CPU kernels keep them (MemoryInput::fused_kernels). `kv_repeated`:
// memory-efficient attention is given K and V repeated to every query head
// (the runner on a GPU in fp32, where no fused kernel takes grouped heads).
struct ActivationTerm {
  std::string tensor;  // "attention scores (softmax output)"
  double bytes = 0;
  // The linears (Hugging Face names) whose weight gradient is the only use
  // of this tensor in backward: when all of them are frozen (and not
  // adapted), LibTorch does not keep it. Empty: kept regardless.
  std::vector<std::string> weight_grad_of;
};
struct LayerTermOptions {
  bool fused = false;
  bool kv_repeated = false;
  // The stack's: what its attention, norms and adapters keep
  // (fused_qkv_views, fp32_norm_inputs, norm_keeps_normalized).
  RuntimeQuirks quirks;
};
// The name a term's weight_grad_of gives a norm's weight: never a LoRA
// target, so such a term is kept in full fine-tunes only.
inline constexpr const char* kNormWeight = "norm weight";
std::vector<ActivationTerm> layer_activation_terms(const dsl::ModelArch& arch, BatchShape batch, Attention attention,
                                                   bool dropout, double bytes_per_element,
                                                   const LayerTermOptions& options = {});

// ZeRO per-GPU model-state bytes for P parameters under mixed-precision
// AdamW (Rajbhandari et al. 2020, fig. 1): stage 0: 16P; 1: 4P + 12P/N;
// 2: 2P + 14P/N; 3: 16P/N.
double zero_model_state_bytes(double params, std::int64_t stage, std::int64_t gpus);

}  // namespace tailor::strategies
