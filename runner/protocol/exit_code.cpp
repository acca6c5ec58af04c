#include "runner/protocol/exit_code.h"

namespace tailor::runner {

std::optional<RunnerExit> runner_exit_from_status(int status) {
  if (status < exit_status(RunnerExit::kOk) || status > exit_status(RunnerExit::kDiverged)) return std::nullopt;
  return static_cast<RunnerExit>(status);
}

const char* to_string(RunnerExit e) {
  switch (e) {
    case RunnerExit::kOk: return "ok";
    case RunnerExit::kFailure: return "failure";
    case RunnerExit::kBadInput: return "bad input";
    case RunnerExit::kOutOfMemory: return "out of memory";
    case RunnerExit::kCancelled: return "cancelled";
    case RunnerExit::kDiverged: return "diverged";
  }
  return "?";
}

}  // namespace tailor::runner
