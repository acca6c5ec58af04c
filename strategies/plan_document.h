// The plan document: a Plan as JSON with a stable, documented schema
// (schema_version 1, described in strategies/README.md). `tailor plan
// --output json`, the daemon and tailor-runner all use this one document.
#pragma once

#include <string>

#include "core/json_writer.h"
#include "dsl/job_spec.h"
#include "strategies/planner.h"

namespace tailor::strategies {

inline constexpr int kPlanSchemaVersion = 1;

std::string plan_to_json(const Plan& plan, const dsl::JobSpec& spec);

// The per-component fields of the plan's memory.per_gpu object (the caller
// opens and closes it); the runner writes its measurements with the same
// keys, so estimate and measurement compare key by key.
void write_memory_breakdown(JsonWriter& w, const MemoryBreakdown& m);

}  // namespace tailor::strategies
