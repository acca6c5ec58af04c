// What tailor-runner is asked to do: the plan document (strategy and the
// resolved job spec it embeds), read without LibTorch.
#pragma once

#include <string>

#include "core/status.h"
#include "dsl/job_spec.h"
#include "strategies/strategy.h"

namespace tailor::runner {

// tailor-runner's exit codes (the daemon decides on them).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;     // anything else: retried with backoff
inline constexpr int kExitBadInput = 2;    // plan, spec, data or checkpoint unusable: never retried
inline constexpr int kExitOutOfMemory = 3; // the budget (or the GPU) ran out: re-plan
inline constexpr int kExitCancelled = 4;   // SIGTERM/SIGINT: stopped after a checkpoint where possible

struct RunConfig {
  dsl::JobSpec spec;
  strategies::Strategy strategy;
  std::int64_t budget_bytes = 0;  // the plan's device budget (memory minus headroom)
  bool on_cpu = true;
  std::int64_t device_memory_bytes = 0;  // the planned device's memory (host RAM for a CPU plan)
  std::string plan_path;
};

// Reads a plan document written by `tailor plan --output json` (schema 1).
// Errors name the file and the key.
Result<RunConfig> read_plan_file(const std::string& path);
Result<RunConfig> parse_plan(const std::string& json_text, const std::string& name);

}  // namespace tailor::runner
