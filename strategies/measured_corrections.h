// The memory model's measured terms: bytes whose size was settled by
// measuring a run that peaked above its estimate, rather than by a formula
// alone. Each has a name, the component it adds to and where it was
// measured; estimate_memory() records what each adds to an estimate
// (MemoryEstimate::corrections), and the plan document and `tailor plan
// --explain` list them, so an estimate says how much of it rests on
// measurement. The formulas themselves and their papers: memory_model.cpp.
#pragma once

#include <span>

namespace tailor::strategies {

enum class Correction {
  kRecomputedLayer,        // checkpointing: the layer recomputed in backward, its gradients beside it
  kLastLayerBackward,      // no recomputation: the last layer's gradients beside its activations
  kFusedHeadAccumulation,  // the fused head with accumulation: head-sized gradient buffers
  kPairHeadGradient,       // preference pairs on a GPU: the head's gradient made a row at a time
  kScoreHeadAccumulation,  // a reward model with accumulation: embedding-sized gradient buffers
  kGradientBuckets,        // ZeRO-0 across ranks: fp32 all-reduce buckets at the end of backward
  kOptimizerStep,          // the optimizer step's temporaries beyond the backward peak
};

struct CorrectionInfo {
  Correction id;
  const char* key;        // in plan documents
  const char* component;  // the MemoryComponent key it adds to (strategy.h)
  const char* source;     // what was measured, where, and what the estimate missed without it
};

// Every measured term, in Correction's order.
std::span<const CorrectionInfo> corrections();
const CorrectionInfo& correction_info(Correction c);

}  // namespace tailor::strategies
