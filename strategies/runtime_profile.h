// What another training stack keeps in memory that tailor-runner does not
// (or the reverse), as named inputs of the memory model, grouped by stack:
// `planner.runtime` in a spec picks one, so one model predicts both
// tailor-runner's runs and, say, an Axolotl user's. Each input is a
// measured or documented difference, not a fudge factor; the corpus test
// (tests/strategies/published_memory_test.cpp) checks them against
// published measurements of each stack.
#pragma once

#include "dsl/job_spec.h"
#include "strategies/memory_model.h"

namespace tailor::strategies {

struct RuntimeProfile {
  dsl::Runtime runtime = dsl::Runtime::kTailor;
  // The loss keeps only the logits and their gradient (tailor-runner's
  // sliced cross-entropy, torchtune's chunked one, compiled losses); false:
  // composed ops that upcast the logits to fp32 and keep the log-softmax.
  bool lean_cross_entropy = true;
  // A quantised frozen linear keeps its input for backward (bitsandbytes'
  // MatMul4Bit saves it whenever it requires grad, up to 0.43; 0.44 keeps
  // none).
  bool quantized_linear_keeps_input = false;
  // The peak the caching allocator reserves over the peak it hands out
  // (fragmentation: freed blocks of the wrong size stay cached).
  double reserved_over_allocated = 1.0;
  // The same under parameter sharding (ZeRO-3/FSDP): FSDP1's record_stream
  // on its all-gather buffers keeps blocks cached longer.
  double reserved_over_allocated_sharded = 1.0;
  // MemoryInput::optimizer_step_temporaries: torch's foreach AdamW (hf,
  // torchtune, litgpt) allocates one moment-sized temporary in its step.
  double optimizer_step_temporaries = 0;
  // MemoryInput::fp32_non_quantized: PEFT's k-bit preparation under QLoRA.
  bool fp32_non_quantized = false;
  // MemoryInput::unsharded_accumulated_gradients: FSDP1's no_sync()
  // accumulation over units that mix frozen and trainable weights.
  bool unsharded_accumulated_gradients = false;
  // MemoryInput::unties_embeddings, quantizes_head, dequantized_copies:
  // litgpt's model and Lightning's bitsandbytes plugin.
  bool unties_embeddings = false;
  bool quantizes_head = false;
  double dequantized_copies = 1;
  // MemoryInput::gathered_units, head_unit_gathered.
  double gathered_units = 2;
  bool head_unit_gathered = false;
  // MemoryInput::gradient_buckets (of kTailorGradientBucketBytes); the
  // others' buckets (DDP's 25 MiB) are not modelled yet.
  double gradient_buckets = 0;
  // MemoryInput::offload_streams_gradients.
  bool offload_streams_gradients = true;
  // MemoryInput::whole_gradient_transient.
  bool whole_gradient_transient = false;
};

const RuntimeProfile& runtime_profile(dsl::Runtime runtime);

// Sets the memory model's inputs that the profile decides.
void apply(const RuntimeProfile& profile, MemoryInput& in);

// The reserved peak of an allocated peak: `context` (outside the caching
// allocator) stays, the rest grows by the profile's fragmentation
// (`sharded`: parameters sharded, ZeRO-3).
Bytes reserved_peak(const RuntimeProfile& profile, Bytes allocated_total, Bytes context, bool sharded);

}  // namespace tailor::strategies
