// What a run leaves in the calibration store (platform/calibration_store.h):
// its plan's predictions, without the calibration the plan applied, beside
// what it measured: each probed candidate that fitted, and a finished run's
// peak and speed. Read from the plan document and metrics.jsonl, so that
// `tailor run`, `tailor plan --probe` and tailord record alike. Torch-free.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "strategies/calibration.h"

namespace tailor::runner {

struct CalibrationRun {
  strategies::CalibrationKey key;
  std::string source;   // "probe" or "job"
  std::string summary;  // the strategy
  strategies::CalibrationSample sample;
};

// A probed plan document's candidates that fitted; empty when it has no
// measured probe (or is not a plan document).
std::vector<CalibrationRun> probe_calibration(const std::string& probed_plan_json);

// A finished run of `plan_json`: the plan's per-device peak and speed
// against the highest peak and the median tokens/s of rank 0's steps after
// the first (the first pays for warming up) in `metrics_lines`, and the
// median contention of those steps; nullopt
// with fewer than two steps, or when the lines or plan cannot be read.
std::optional<CalibrationRun> run_calibration(const std::string& plan_json,
                                              const std::vector<std::string>& metrics_lines);

}  // namespace tailor::runner
