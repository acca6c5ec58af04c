// What happens to a job when its runner attempt ends: a pure function of
// the exit (or the exit its events file records, for a runner that ended
// while tailord was down), the cancel flag, and the job's attempt counts.
// The supervisor applies the verdict (store transitions, re-planning,
// metrics); the table of cases is tests/daemon/scheduler/outcome_test.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tailor::daemon {

struct AttemptEnd {
  int exit_code = -1;             // the runner's exit status; -1 when killed or unknown
  int signal = 0;                 // the signal that killed it, or 0
  bool cancel_requested = false;  // a cancel was asked for before it ended
  bool oom_reported = false;      // the runner wrote an oom event with its budget
  std::int64_t failures = 0;      // failed attempts before this one
  std::int64_t retries = 0;       // failed attempts the job allows
  std::int64_t oom_restarts = 0;  // re-plans after out-of-memory before this one
};

struct OutcomePolicy {
  int max_oom_replans = 3;
  double backoff_seconds = 5;  // first retry delay; doubles per failure
  double max_backoff_seconds = 300;
};

enum class Verdict {
  kSucceeded,
  kCancelled,
  kReplan,  // out of memory: plan again from the oom report, resume from the checkpoint
  kRetry,   // queued again after backoff_seconds, resuming from the checkpoint
  kFailed,
};

// Why a job failed (kFailed only).
enum class FailureCause {
  kNone,
  kBadInput,          // the runner refused its input: never retried
  kOutOfMemory,       // no oom report to re-plan from, or the re-plans are used up
  kRetriesExhausted,  // failures past the job's retries
  kDiverged,          // the loss became non-finite: the same plan diverges again, so never retried
};

struct Outcome {
  Verdict verdict = Verdict::kFailed;
  FailureCause cause = FailureCause::kNone;
  std::string reason;           // why, for kFailed (without the exit's detail)
  std::int64_t failures = 0;    // the job's failed attempts after this one
  std::int64_t oom_restarts = 0;
  double backoff_seconds = 0;   // kRetry: the delay before the next attempt
};

Outcome decide_outcome(const AttemptEnd& end, const OutcomePolicy& policy);

// When a queued job may start again, on the wall clock at `wall_now`: the
// store keeps next_attempt_at on the wall clock (it outlives tailord), but
// a wall clock stepped back would hold a retry for as long as the step.
// Within this tailord the monotonic deadline (`steady_due`, on the clock
// that reads `steady_now`) decides; after a restart the stored time, but
// never further ahead than the longest backoff (`max_wait_seconds`).
double retry_not_before(double stored_wall, std::optional<double> steady_due, double wall_now, double steady_now,
                        double max_wait_seconds);

const char* to_string(Verdict v);

}  // namespace tailor::daemon
