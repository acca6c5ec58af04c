#include "strategies/runtime_profile.h"

namespace tailor::strategies {

const RuntimeProfile& runtime_profile(dsl::Runtime runtime) {
  // Fragmentation: PyTorch's caching allocator rounds and caches blocks;
  // the reserved/allocated ratio at the peak is the RESERVED_OVER_ALLOCATED
  // figure measured below (the corpus test derives it from published pairs
  // of allocated and reserved peaks of the same runs).
  static const RuntimeProfile kTailor{dsl::Runtime::kTailor, true, false, 1.08, 0};
  // transformers' models upcast the logits to fp32 inside a composed loss,
  // and QLoRA runs on bitsandbytes' Linear4bit.
  static const RuntimeProfile kHf{dsl::Runtime::kHf, false, true, 1.25, 1};
  // torchtune: chunked cross-entropy, torchao's NF4 linear (saves only the
  // quantised weight).
  static const RuntimeProfile kTorchtune{dsl::Runtime::kTorchtune, true, false, 1.0, 0};
  // litgpt: its own GPT with a composed loss; QLoRA through bitsandbytes.
  static const RuntimeProfile kLitgpt{dsl::Runtime::kLitgpt, false, true, 1.08, 1};
  // torchtitan: compiled loss.
  static const RuntimeProfile kTorchtitan{dsl::Runtime::kTorchtitan, true, false, 1.08, 0};
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
}

Bytes reserved_peak(const RuntimeProfile& profile, Bytes allocated_total, Bytes context) {
  const double tensors = static_cast<double>((allocated_total - context).count());
  return context + Bytes(static_cast<std::int64_t>(tensors * profile.reserved_over_allocated));
}

}  // namespace tailor::strategies
