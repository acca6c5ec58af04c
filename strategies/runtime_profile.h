// What another training stack keeps in memory that tailor-runner does not
// (or the reverse), as named inputs of the memory model, grouped by stack:
// `planner.runtime` in a spec picks one, so one model predicts both
// tailor-runner's runs and, say, an Axolotl user's. Each input is a
// measured or documented difference, not a fudge factor; the corpus test
// (tests/strategies/published_memory_test.cpp) checks them against
// published measurements of each stack.
#pragma once

#include "dsl/job_spec.h"
#include "dsl/library_version.h"
#include "strategies/memory_model.h"

namespace tailor::strategies {

struct RuntimeProfile {
  dsl::Runtime runtime = dsl::Runtime::kTailor;
  // What its training keeps beyond the formulas.
  RuntimeQuirks quirks;
  // The peak the caching allocator reserves over the peak it hands out
  // (fragmentation: freed blocks of the wrong size stay cached).
  double reserved_over_allocated = 1.0;
  // The same under parameter sharding (ZeRO-3/FSDP): FSDP1's record_stream
  // on its all-gather buffers keeps blocks cached longer.
  double reserved_over_allocated_sharded = 1.0;
};

const RuntimeProfile& runtime_profile(dsl::Runtime runtime);

// Sets the memory model's inputs that the profile decides.
void apply(const RuntimeProfile& profile, MemoryInput& in);

// What transformers 4.x keeps beyond 5.x, the hf profile's (planner.
// transformers): its model loop checkpoints each decoder layer reentrantly
// by default (RuntimeQuirks::held_checkpoints), and 4.46-4.48's loss copies
// the shifted logits in fp32 (shifted_logits_copy). 5.x adds nothing.
void apply_transformers(const dsl::LibraryVersion& version, RuntimeQuirks& quirks);

// The planner section's versions onto `in` (after apply): only under the
// runtime they belong to, and only a version that parses (the spec loader
// refuses the others).
void apply_versions(const dsl::PlannerSpec& planner, MemoryInput& in);

// The reserved peak of an allocated peak: `context` (outside the caching
// allocator) stays, the rest grows by the profile's fragmentation
// (`sharded`: parameters sharded, ZeRO-3).
Bytes reserved_peak(const RuntimeProfile& profile, Bytes allocated_total, Bytes context, bool sharded);

}  // namespace tailor::strategies
