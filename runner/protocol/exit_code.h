// tailor-runner's exit codes: the one list that the runner returns, writes
// into its final event, and that `tailor run` and tailord's supervisor
// decide on. Torch-free.
#pragma once

#include <optional>

namespace tailor::runner {

enum class RunnerExit : int {
  kOk = 0,
  kFailure = 1,      // anything else: retried with backoff
  kBadInput = 2,     // plan, spec, data or checkpoint unusable: never retried
  kOutOfMemory = 3,  // the budget (or the GPU) ran out: re-plan
  kCancelled = 4,    // SIGTERM/SIGINT: stopped after a checkpoint where possible
  kDiverged = 5,     // the loss became NaN or infinite: the same plan diverges again at the
                     // same step from the same checkpoint, so it is never retried as it is
};

constexpr int exit_status(RunnerExit e) { return static_cast<int>(e); }
// nullopt for a status that is not one of the above (e.g. 127 from exec).
std::optional<RunnerExit> runner_exit_from_status(int status);
// "ok", "failure", "bad input", "out of memory", "cancelled", "diverged".
const char* to_string(RunnerExit e);

}  // namespace tailor::runner
