// What this build's tailor-runner can execute: the one list that `tailor
// run`, tailord and the runner itself consult, so that a plan is made only
// of what the runner implements (planning forbids the rest) and the runner
// refuses the rest as bad input. Torch-free.
#pragma once

#include <span>

#include "core/status.h"
#include "dsl/job_spec.h"
#include "strategies/strategy.h"

namespace tailor::runner {

// Techniques of the decision tree the runner does not implement yet: ZeRO
// and offload need several rank processes (one per GPU).
std::span<const dsl::Technique> techniques_not_in_runner();

// Adds techniques_not_in_runner() to spec.strategy.forbid.
void forbid_unexecutable(dsl::JobSpec& spec);

// InvalidArgument naming the pinned knob when the spec pins what the
// runner cannot execute (a plan could only ignore the pin).
Status check_pins_executable(const dsl::JobSpec& spec);

// InvalidArgument saying what the runner cannot execute in `s`: ZeRO,
// offload, several GPUs in one process, a base quantisation other than
// NF4 with double quantisation.
Status check_executable(const strategies::Strategy& s);

}  // namespace tailor::runner
