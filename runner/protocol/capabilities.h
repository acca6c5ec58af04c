// What this build's tailor-runner can execute: the one predicate that
// `tailor plan`, `tailor run`, tailord and the runner itself consult, so
// that a plan is made only of what the runner implements (the planner asks
// it of every candidate) and the runner refuses the rest as bad input.
// Torch-free.
#pragma once

#include <span>
#include <string>

#include "core/status.h"
#include "dsl/job_spec.h"
#include "strategies/planner.h"
#include "strategies/strategy.h"

namespace tailor::runner {

// Techniques of the decision tree the runner does not implement (none
// today: every rung, parameter offload included, runs).
std::span<const dsl::Technique> techniques_not_in_runner();

// Why this build's runner cannot execute `s` ("" when it can): a base
// quantisation other than NF4 with double quantisation.
std::string why_not_executable(const strategies::Strategy& s);

// Planner options whose executability is this runner's: every command that
// plans for tailor-runner plans through them.
strategies::PlanOptions runner_plan_options(const dsl::Catalog* catalog);

// InvalidArgument naming the pinned knob when the spec pins what the
// runner cannot execute (a plan could only ignore the pin).
Status check_pins_executable(const dsl::JobSpec& spec);

// InvalidArgument with why_not_executable(s), when not empty.
Status check_executable(const strategies::Strategy& s);

}  // namespace tailor::runner
