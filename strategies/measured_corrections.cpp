#include "strategies/measured_corrections.h"

#include <array>

namespace tailor::strategies {
namespace {

constexpr std::array<CorrectionInfo, 7> kCorrections = {{
    {Correction::kRecomputedLayer, "recomputed_layer", "activations",
     "the recomputed layer counted whole, its frozen linears' gradients included, beside its largest tensor's "
     "gradient: LoRA and QLoRA runs with checkpointing peaked 8-14% above the estimate without the frozen part "
     "(tests/runner/torch/adapter_memory_test.cpp)"},
    {Correction::kLastLayerBackward, "last_layer_backward", "activations",
     "the last layer's largest tensor's, input's and residual's gradients beside its activations once the logits "
     "are freed (under adapters, the fused SwiGLU's MLP gradients): ZeRO-3 ranks peaked 4-8% above the estimate "
     "without it, a reward run 11% and LoRA/QLoRA runs 2-6% (tests/runner/torch/memory_accuracy_test.cpp, "
     "adapter_memory_test.cpp)"},
    {Correction::kFusedHeadAccumulation, "fused_head_accumulation", "logits",
     "head-sized gradient buffers of the fused head under accumulation: one on the CPU "
     "(tests/runner/torch/fused_head_training_test.cpp), about 2.4 on an H200, counted as 3 (a 1.24B Llama peaked "
     "6.1% above the estimate without them; docs/gpu-measurements.md)"},
    {Correction::kPairHeadGradient, "pair_head_gradient", "logits",
     "preference pairs on a GPU: a trained head's gradient made a row at a time and summed, 1.3 head-sized "
     "buffers measured on an H200 for DPO and SimPO (a 1.24B Llama, 650 MiB above the estimate), counted as 1.5; "
     "none on the CPU (docs/gpu-measurements.md, 2026-11-28)"},
    {Correction::kScoreHeadAccumulation, "score_head_accumulation", "overhead",
     "a reward model under accumulation: the embedding's gradient made whole at the end of backward, one buffer "
     "on the CPU (6% above the estimate without it), three on an H200 (1.03 GB; docs/gpu-measurements.md, "
     "2026-11-28)"},
    {Correction::kGradientBuckets, "gradient_buckets", "overhead",
     "ZeRO-0 across ranks: the fp32 all-reduce buckets live as backward ends, beyond the activations freed by "
     "then: 2 ranks with every layer recomputed peaked 11% above the estimate without them "
     "(tests/runner/ranks_test.cpp; RuntimeQuirks::gradient_buckets)"},
    {Correction::kOptimizerStep, "optimizer_step", "overhead",
     "the optimizer step's temporaries where they exceed the backward peak: torch's foreach AdamW allocates "
     "sqrt(v) for every parameter at once (RuntimeQuirks::optimizer_step_temporaries; the runtime profiles' "
     "corpus, tests/strategies/data/peak_corpus.yaml); tailor-runner updates in place"},
}};

}  // namespace

std::span<const CorrectionInfo> corrections() { return kCorrections; }

const CorrectionInfo& correction_info(Correction c) { return kCorrections[static_cast<std::size_t>(c)]; }

}  // namespace tailor::strategies
