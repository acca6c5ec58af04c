#include "strategies/runtime_profile.h"

namespace tailor::strategies {

const RuntimeProfile& runtime_profile(dsl::Runtime runtime) {
  // Fields: lean cross-entropy, 4-bit linears keep their input, reserved /
  // allocated (unsharded, sharded), optimizer step temporaries, fp32 upcast
  // of what is not quantised, unsharded gradients under accumulation, an
  // untied head, a quantised head, dequantised copies, units gathered at
  // once under ZeRO-3 and whether the head's unit counts among them,
  // gradient buckets at stage 0, gradients streamed to the host under
  // offload, a whole gradient beside the parts under ZeRO-3.
  //
  // tailor-runner: its sliced loss and NF4 linears; in-place optimizer
  // steps; ZeRO-3 gathers the next unit while one computes. Its CUDA fragmentation is not
  // measured yet: torchtitan's (also compiled kernels and no record_stream)
  // stands in.
  static const RuntimeProfile kTailor{dsl::Runtime::kTailor, true, false, 1.08, 1.08, 0, false, false,
                                      false, false, 1, 2, true, 2, false, true};
  // transformers with PEFT/TRL: composed losses upcasting the logits,
  // bitsandbytes' Linear4bit (before 0.44 it keeps every input, as in the
  // corpus' runs; 0.44 keeps none), foreach AdamW, and prepare_model_for_
  // kbit_training's fp32 upcast under QLoRA. Fragmentation: the medians of the
  // published pairs of allocated and nvidia-smi peaks of the same
  // fms-acceleration runs (tests/strategies/data/peak_corpus.yaml): 1.21 on
  // one GPU (12 pairs), 1.32 under FSDP1 (27 pairs).
  static const RuntimeProfile kHf{dsl::Runtime::kHf, false, true, 1.21, 1.32, 1, true};
  // torchtune: chunked cross-entropy, torchao's NF4 linear (saves only the
  // quantised weight), fused AdamW, expandable segments (little
  // fragmentation: its reserved figures sit at the allocated estimate).
  static const RuntimeProfile kTorchtune{dsl::Runtime::kTorchtune, true, false, 1.0, 1.0, 0, false};
  // litgpt: chunked lm_head and loss on bf16 logits, bitsandbytes for QLoRA
  // through Lightning's plugin (every linear, the head too, quantised from
  // fp16), torch's foreach AdamW, Lightning's FSDP1 (use_orig_params, one
  // unit per block holding frozen and LoRA weights) accumulating under
  // no_sync, and a tied embedding copied into a head of its own.
  static const RuntimeProfile kLitgpt{dsl::Runtime::kLitgpt, true, true, 1.08, 1.08, 1, false, true, true, true, 2};
  // torchtitan: compiled loss, fused AdamW, FSDP2 (no record_stream).
  static const RuntimeProfile kTorchtitan{dsl::Runtime::kTorchtitan, true, false, 1.08, 1.08, 0, false};
  switch (runtime) {
    case dsl::Runtime::kHf: return kHf;
    case dsl::Runtime::kTorchtune: return kTorchtune;
    case dsl::Runtime::kLitgpt: return kLitgpt;
    case dsl::Runtime::kTorchtitan: return kTorchtitan;
    case dsl::Runtime::kTailor: break;
  }
  return kTailor;
}

void apply(const RuntimeProfile& profile, MemoryInput& in) {
  in.lean_cross_entropy = profile.lean_cross_entropy;
  in.quantized_linear_keeps_input = profile.quantized_linear_keeps_input;
  in.optimizer_step_temporaries = profile.optimizer_step_temporaries;
  in.fp32_non_quantized = profile.fp32_non_quantized;
  in.unsharded_accumulated_gradients = profile.unsharded_accumulated_gradients;
  in.unties_embeddings = profile.unties_embeddings;
  in.quantizes_head = profile.quantizes_head;
  in.dequantized_copies = profile.dequantized_copies;
  in.gathered_units = profile.gathered_units;
  in.head_unit_gathered = profile.head_unit_gathered;
  in.gradient_buckets = profile.gradient_buckets;
  in.offload_streams_gradients = profile.offload_streams_gradients;
  in.whole_gradient_transient = profile.whole_gradient_transient;
  in.gradient_bucket_bytes = Bytes(kTailorGradientBucketBytes);
}

Bytes reserved_peak(const RuntimeProfile& profile, Bytes allocated_total, Bytes context, bool sharded) {
  const double tensors = static_cast<double>((allocated_total - context).count());
  const double factor = sharded ? profile.reserved_over_allocated_sharded : profile.reserved_over_allocated;
  return context + Bytes(static_cast<std::int64_t>(tensors * factor));
}

}  // namespace tailor::strategies
