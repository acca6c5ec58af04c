// The planner: the fastest strategy that fits, and why.
//
//   plan_job(spec, hardware) -> Plan (plan.h); each strategy estimated by
//   evaluate() (candidate.h)
//     1. constraints: pinned knobs, allow/forbid, the global batch (kept exact
//        by micro-batch x accumulation x ranks), what the device supports
//     2. search: every candidate of ranks x precision x checkpointing x
//        micro-batch x adapter x optimizer x ZeRO stage x offload is
//        estimated (memory model + cost model) and asked whether the runner
//        can execute it; of those that fit and run, the fastest wins, unless
//        one within the cost model's error keeps more memory free, avoids
//        offload or uses fewer techniques (the policy below)
//     3. decision tree (decision_tree.cpp): the OOM walk from the spec as
//        written to the plan chosen, question by question with byte figures,
//        as data (Decision, plan.h)
//     4. alternatives: the best plan of each other kind, with why it lost,
//        and the plan it would choose if the runner executed more; when
//        nothing fits, the shortfall and the smallest catalog GPU that would.
// Never throws; "nothing fits" is a Plan with fits == false.
#pragma once

#include "strategies/candidate.h"
#include "strategies/plan.h"

namespace tailor::strategies {

Plan plan_job(const dsl::JobSpec& spec, const Hardware& hardware, const PlanOptions& options = {});

// Every executable plan of one process that fits, in the policy's order
// (each the policy's choice among those left after the ones before): a
// probe's candidates are the first strategy.probe of them. For sweeps.
std::vector<Candidate> plans_in_policy_order(const dsl::JobSpec& spec, const Hardware& hardware,
                                             const PlanOptions& options = {});

}  // namespace tailor::strategies
