// The plan document: a Plan as JSON with a stable, documented schema
// (schema_version 1, described in strategies/README.md). `tailor plan
// --output json`, the daemon and tailor-runner all use this one document.
#pragma once

#include <string>

#include "dsl/job_spec.h"
#include "strategies/planner.h"

namespace tailor::strategies {

inline constexpr int kPlanSchemaVersion = 1;

std::string plan_to_json(const Plan& plan, const dsl::JobSpec& spec);

}  // namespace tailor::strategies
