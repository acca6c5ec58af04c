// The calibration store as `tailor plan` and `tailor run` use it: this
// machine's factors for a plan, and recording what a probe or a run
// measured. The file: platform::default_calibration_path() or --calibration.
// CLI-internal.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/args.h"
#include "dsl/job_spec.h"
#include "runner/protocol/calibration_runs.h"
#include "strategies/calibration.h"
#include "strategies/hardware.h"

namespace tailor::cli {

// The flags that choose the store: --calibration FILE, --no-calibration.
std::vector<FlagSpec> with_calibration_flags(std::vector<FlagSpec> flags);
// The store's file; empty with --no-calibration.
std::string calibration_path(const Args& args);

// The factors for `spec` on `hw` from the store at `path` (nullopt: none
// recorded, no store, or `path` empty; a store that cannot be read is
// reported on io.err and planning goes on uncalibrated).
std::optional<strategies::Calibration> calibration_for(const std::string& path, const dsl::JobSpec& spec,
                                                       const strategies::Hardware& hw, Streams io);

// Adds `runs` to the store at `path` (nothing when empty); a failure is
// reported on io.err, never fatal: the run's own results stand.
void record_calibration(const std::string& path, const std::vector<runner::CalibrationRun>& runs, Streams io);

}  // namespace tailor::cli
