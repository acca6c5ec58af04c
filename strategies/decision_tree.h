// The OOM decision tree (its rungs drawn in strategies/README.md), as the
// explanation of the plan chosen: does it fit as written? -> ranks the
// runner executes -> mixed precision -> gradient checkpointing -> smaller
// micro-batch with accumulation -> ZeRO-1/2 -> 8-bit optimizer states ->
// LoRA -> QLoRA -> ZeRO-3 -> CPU offload -> the search's choice. The walk starts at the spec
// as written and takes exactly the steps the chosen plan took, so it ends
// at that plan; every step not taken says why (not needed, a pin, a forbid,
// the device, the runner, or the ranking), with the bytes it would have
// saved.
#pragma once

#include <vector>

#include "strategies/candidate.h"
#include "strategies/constraints.h"
#include "strategies/plan.h"

namespace tailor::strategies {

// `plan` has its chosen candidate, budgets and preferred/fastest
// alternatives set; the decisions are returned, not stored.
std::vector<Decision> walk_decision_tree(const dsl::JobSpec& spec, const Hardware& hw, const Constraints& c,
                                         const PlanOptions& o, const Plan& plan);

}  // namespace tailor::strategies
