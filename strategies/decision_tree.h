// The OOM decision tree of the seed documents, walked greedily and
// recorded: does it fit? -> mixed precision -> gradient checkpointing ->
// smaller micro-batch with accumulation -> ZeRO-1/2 and 8-bit optimizer
// states -> LoRA -> QLoRA -> ZeRO-3 -> CPU offload -> does not fit.
// Each step is a question, an answer with byte figures, and the action
// taken; pinned knobs and allow/forbid lists skip steps. The walk explains;
// the search (planner.cpp) then looks for a faster plan among all that fit.
#pragma once

#include <vector>

#include "strategies/constraints.h"
#include "strategies/planner.h"

namespace tailor::strategies {

std::vector<Decision> walk_decision_tree(const dsl::JobSpec& spec, const Hardware& hw, const Constraints& c,
                                         const PlanOptions& o);

// Appends the search's verdict to the plan's decisions.
void add_search_decision(Plan& plan, const Candidate* best, int candidates);

}  // namespace tailor::strategies
