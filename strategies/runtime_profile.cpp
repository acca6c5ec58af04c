#include "strategies/runtime_profile.h"

namespace tailor::strategies {

const RuntimeProfile& runtime_profile(dsl::Runtime runtime) {
  // tailor-runner: its sliced loss and NF4 linears; in-place optimizer
  // steps; ZeRO-3 gathers the next unit while one computes. Its CUDA fragmentation is not
  // measured yet: torchtitan's (also compiled kernels and no record_stream)
  // stands in.
  static const RuntimeProfile kTailor{
      .runtime = dsl::Runtime::kTailor,
      .quirks = {.lean_cross_entropy = true,
                 .gathered_units = 2,
                 .head_unit_gathered = true,
                 .whole_gradient_transient = true,
                 .gradient_buckets = 2,
                 .offload_streams_gradients = false},
      .reserved_over_allocated = 1.08,
      .reserved_over_allocated_sharded = 1.08};
  // transformers with PEFT/TRL: composed losses upcasting the logits,
  // bitsandbytes' Linear4bit (before 0.44 it keeps every input, as in the
  // corpus' runs; 0.44 keeps none), foreach AdamW, and prepare_model_for_
  // kbit_training's fp32 upcast under QLoRA, and FSDP1 under ZeRO-3 (accelerate's,
  // wrapping the blocks: the root unit stays gathered). Fragmentation: the medians of the
  // published pairs of allocated and nvidia-smi peaks of the same
  // fms-acceleration runs (tests/strategies/data/peak_corpus.yaml): 1.21 on
  // one GPU (12 pairs), 1.32 under FSDP1 (27 pairs).
  static const RuntimeProfile kHf{.runtime = dsl::Runtime::kHf,
                                  .quirks = {.lean_cross_entropy = false,
                                             .quantized_linear_keeps_input = true,
                                             .optimizer_step_temporaries = 1,
                                             .fp32_non_quantized = true,
                                             .fp32_norm_inputs = true,
                                             .norm_keeps_normalized = true,
                                             .adapter_input_copies = true,
                                             .whole_module_copies = true,
                                             .root_unit_gathered = true},
                                  .reserved_over_allocated = 1.21,
                                  .reserved_over_allocated_sharded = 1.32};
  // torchtune: chunked cross-entropy, torchao's NF4 linear (saves only the
  // quantised weight), fused AdamW, expandable segments (little
  // fragmentation: its reserved figures sit at the allocated estimate).
  static const RuntimeProfile kTorchtune{.runtime = dsl::Runtime::kTorchtune,
                                         .quirks = {.lean_cross_entropy = true},
                                         .reserved_over_allocated = 1.0,
                                         .reserved_over_allocated_sharded = 1.0};
  // litgpt: chunked lm_head and loss on bf16 logits, bitsandbytes for QLoRA
  // through Lightning's plugin (every linear, the head too, quantised from
  // fp16), torch's foreach AdamW, Lightning's FSDP1 (use_orig_params, one
  // unit per block holding frozen and LoRA weights; the root unit, with the
  // embedding and the head, gathered through the step) accumulating under
  // no_sync, a tied embedding copied into a head of its own, q, k and v as
  // views of one fused linear's output, and RMSNorm upcasting its input.
  static const RuntimeProfile kLitgpt{.runtime = dsl::Runtime::kLitgpt,
                                      .quirks = {.lean_cross_entropy = true,
                                                 .quantized_linear_keeps_input = true,
                                                 .optimizer_step_temporaries = 1,
                                                 .unsharded_accumulated_gradients = true,
                                                 .unties_embeddings = true,
                                                 .fused_qkv_views = true,
                                                 .fp32_norm_inputs = true,
                                                 .quantizes_head = true,
                                                 .dequantized_copies = 2,
                                                 .root_unit_gathered = true},
                                      .reserved_over_allocated = 1.08,
                                      .reserved_over_allocated_sharded = 1.08};
  // torchtitan: compiled loss, fused AdamW, FSDP2 (no record_stream).
  static const RuntimeProfile kTorchtitan{.runtime = dsl::Runtime::kTorchtitan,
                                          .quirks = {.lean_cross_entropy = true},
                                          .reserved_over_allocated = 1.08,
                                          .reserved_over_allocated_sharded = 1.08};
  switch (runtime) {
    case dsl::Runtime::kHf: return kHf;
    case dsl::Runtime::kTorchtune: return kTorchtune;
    case dsl::Runtime::kLitgpt: return kLitgpt;
    case dsl::Runtime::kTorchtitan: return kTorchtitan;
    case dsl::Runtime::kTailor: break;
  }
  return kTailor;
}

void apply(const RuntimeProfile& profile, MemoryInput& in) { in.quirks = profile.quirks; }

void apply_transformers(const dsl::LibraryVersion& version, RuntimeQuirks& quirks) {
  if (version.major != 4) return;
  quirks.held_checkpoints = true;
  quirks.shifted_logits_copy = version.minor >= 46 && version.minor <= 48;
}

void apply_versions(const dsl::PlannerSpec& planner, MemoryInput& in) {
  if (planner.runtime != dsl::Runtime::kHf || planner.transformers.empty()) return;
  if (const auto v = dsl::parse_library_version(planner.transformers)) apply_transformers(*v, in.quirks);
}

Bytes reserved_peak(const RuntimeProfile& profile, Bytes allocated_total, Bytes context, bool sharded) {
  const double tensors = static_cast<double>((allocated_total - context).count());
  const double factor = sharded ? profile.reserved_over_allocated_sharded : profile.reserved_over_allocated;
  return context + Bytes(static_cast<std::int64_t>(tensors * factor));
}

}  // namespace tailor::strategies
