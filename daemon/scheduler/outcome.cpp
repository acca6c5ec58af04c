#include "daemon/scheduler/outcome.h"

#include <algorithm>
#include <cmath>

#include "runner/protocol/exit_code.h"

namespace tailor::daemon {

Outcome decide_outcome(const AttemptEnd& end, const OutcomePolicy& policy) {
  using runner::RunnerExit;
  Outcome o;
  o.failures = end.failures;
  o.oom_restarts = end.oom_restarts;
  const bool exited = end.signal == 0 && end.exit_code >= 0;
  const auto exit = exited ? runner::runner_exit_from_status(end.exit_code) : std::nullopt;
  if (end.cancel_requested) {
    o.verdict = Verdict::kCancelled;
    return o;
  }
  if (exit == RunnerExit::kOk) {
    o.verdict = Verdict::kSucceeded;
    return o;
  }
  if (exit == RunnerExit::kOutOfMemory) {
    o.oom_restarts = end.oom_restarts + 1;
    o.verdict = Verdict::kFailed;
    o.cause = FailureCause::kOutOfMemory;
    if (!end.oom_reported) {
      o.reason = "out of memory (exit 3) without an oom event to re-plan from";
    } else if (o.oom_restarts > policy.max_oom_replans) {
      o.reason = "out of memory " + std::to_string(o.oom_restarts) + " times; gave up after " +
                 std::to_string(policy.max_oom_replans) + " re-plans";
    } else {
      o.verdict = Verdict::kReplan;
      o.cause = FailureCause::kNone;
    }
    return o;
  }
  if (exit == RunnerExit::kDiverged) {
    o.verdict = Verdict::kFailed;
    o.cause = FailureCause::kDiverged;
    o.reason = "training diverged (a non-finite loss), not retried: the same plan diverges again at the same step";
    return o;
  }
  if (exit == RunnerExit::kBadInput) {
    o.verdict = Verdict::kFailed;
    o.cause = FailureCause::kBadInput;
    o.reason = "bad input, not retried";
    return o;
  }
  // A failure, a signal, a runner killed while tailord was down, or a
  // status the runner never returns (a crash): retried with backoff.
  o.failures = end.failures + 1;
  if (o.failures > end.retries) {
    o.verdict = Verdict::kFailed;
    o.cause = FailureCause::kRetriesExhausted;
    o.reason = "gave up after " + std::to_string(end.retries) + " retries";
    return o;
  }
  o.verdict = Verdict::kRetry;
  const double doubled = policy.backoff_seconds * std::pow(2.0, static_cast<double>(o.failures - 1));
  o.backoff_seconds = std::min(doubled, policy.max_backoff_seconds);
  return o;
}

double retry_not_before(double stored_wall, std::optional<double> steady_due, double wall_now, double steady_now,
                        double max_wait_seconds) {
  if (steady_due) return wall_now + (*steady_due - steady_now);
  return std::min(stored_wall, wall_now + max_wait_seconds);
}

const char* to_string(Verdict v) {
  switch (v) {
    case Verdict::kSucceeded: return "succeeded";
    case Verdict::kCancelled: return "cancelled";
    case Verdict::kReplan: return "re-plan";
    case Verdict::kRetry: return "retry";
    case Verdict::kFailed: return "failed";
  }
  return "?";
}

}  // namespace tailor::daemon
