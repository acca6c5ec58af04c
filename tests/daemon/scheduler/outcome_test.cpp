// The supervisor's decision when a runner attempt ends, as a table:
// (exit, cancel, oom report, attempt counts) -> verdict.
#include <gtest/gtest.h>

#include "daemon/scheduler/outcome.h"

namespace tailor::daemon {
namespace {

struct OutcomeCase {
  const char* name;
  AttemptEnd end;
  Verdict verdict;
  std::int64_t failures;      // after
  std::int64_t oom_restarts;  // after
  double backoff;
  const char* reason;         // a part of it; "" = none expected
  FailureCause cause = FailureCause::kNone;
};

constexpr int kSigkill = 9;

TEST(OutcomeTest, EveryEndOfAnAttemptHasItsVerdict) {
  // exit, signal, cancel, oom_reported, failures, retries, oom_restarts
  const OutcomeCase cases[] = {
      {"done", {0, 0, false, false, 0, 2, 0}, Verdict::kSucceeded, 0, 0, 0, ""},
      {"done after a retry", {0, 0, false, false, 1, 2, 1}, Verdict::kSucceeded, 1, 1, 0, ""},
      {"cancelled by request", {4, 0, true, false, 0, 2, 0}, Verdict::kCancelled, 0, 0, 0, ""},
      {"killed while a cancel was pending", {-1, kSigkill, true, false, 0, 2, 0}, Verdict::kCancelled, 0, 0, 0, ""},
      {"cancel wins over a clean exit", {0, 0, true, false, 0, 2, 0}, Verdict::kCancelled, 0, 0, 0, ""},
      {"bad input is never retried",
       {2, 0, false, false, 0, 2, 0},
       Verdict::kFailed,
       0,
       0,
       0,
       "bad input",
       FailureCause::kBadInput},
      {"bad input with retries left",
       {2, 0, false, false, 0, 100, 0},
       Verdict::kFailed,
       0,
       0,
       0,
       "bad input",
       FailureCause::kBadInput},
      {"divergence is never retried",
       {5, 0, false, false, 0, 2, 0},
       Verdict::kFailed,
       0,
       0,
       0,
       "training diverged",
       FailureCause::kDiverged},
      {"oom with a report re-plans", {3, 0, false, true, 0, 2, 0}, Verdict::kReplan, 0, 1, 0, ""},
      {"third oom still re-plans", {3, 0, false, true, 0, 2, 2}, Verdict::kReplan, 0, 3, 0, ""},
      {"fourth oom gives up",
       {3, 0, false, true, 0, 2, 3},
       Verdict::kFailed,
       0,
       4,
       0,
       "gave up after 3 re-plans",
       FailureCause::kOutOfMemory},
      {"oom without a report",
       {3, 0, false, false, 0, 2, 0},
       Verdict::kFailed,
       0,
       1,
       0,
       "without an oom event",
       FailureCause::kOutOfMemory},
      {"failure retries", {1, 0, false, false, 0, 2, 0}, Verdict::kRetry, 1, 0, 5, ""},
      {"second failure backs off twice as long", {1, 0, false, false, 1, 2, 0}, Verdict::kRetry, 2, 0, 10, ""},
      {"failures past the retries fail",
       {1, 0, false, false, 2, 2, 0},
       Verdict::kFailed,
       3,
       0,
       0,
       "gave up after 2",
       FailureCause::kRetriesExhausted},
      {"no retries allowed",
       {1, 0, false, false, 0, 0, 0},
       Verdict::kFailed,
       1,
       0,
       0,
       "gave up after 0",
       FailureCause::kRetriesExhausted},
      {"killed by a signal retries", {-1, kSigkill, false, false, 0, 2, 0}, Verdict::kRetry, 1, 0, 5, ""},
      {"a crash status retries", {134, 0, false, false, 0, 2, 0}, Verdict::kRetry, 1, 0, 5, ""},
      {"runner could not exec", {127, 0, false, false, 0, 2, 0}, Verdict::kRetry, 1, 0, 5, ""},
      {"backoff is capped", {1, 0, false, false, 9, 100, 0}, Verdict::kRetry, 10, 0, 300, ""},
  };
  const OutcomePolicy policy;  // 3 re-plans, 5 s doubling to 300 s
  for (const OutcomeCase& c : cases) {
    const Outcome o = decide_outcome(c.end, policy);
    EXPECT_EQ(o.verdict, c.verdict) << c.name << ": got " << to_string(o.verdict);
    EXPECT_EQ(o.failures, c.failures) << c.name;
    EXPECT_EQ(o.oom_restarts, c.oom_restarts) << c.name;
    EXPECT_DOUBLE_EQ(o.backoff_seconds, c.backoff) << c.name;
    EXPECT_NE(o.reason.find(c.reason), std::string::npos) << c.name << ": " << o.reason;
    EXPECT_EQ(o.cause, c.cause) << c.name;
  }
}

// A retry's wait when the wall clock steps back 600 s during a 5 s
// backoff (set at wall 1000, steady 100): within tailord the monotonic
// deadline decides; after a restart the stored time is capped by the
// longest backoff.
TEST(OutcomeTest, AWallClockSteppedBackDoesNotHoldARetry) {
  // No step: the stored time.
  EXPECT_DOUBLE_EQ(retry_not_before(1005, 105.0, 1002, 102, 300), 1005);
  // Stepped back: due 2 s after wall 405 at steady 103, due now at steady 105.
  EXPECT_DOUBLE_EQ(retry_not_before(1005, 105.0, 405, 103, 300), 407);
  EXPECT_DOUBLE_EQ(retry_not_before(1005, 105.0, 405, 105, 300), 405);
  // After a restart (no monotonic deadline): at most the longest backoff away.
  EXPECT_DOUBLE_EQ(retry_not_before(1005, std::nullopt, 405, 0, 300), 705);
  EXPECT_DOUBLE_EQ(retry_not_before(1005, std::nullopt, 1001, 0, 300), 1005);
}

}  // namespace
}  // namespace tailor::daemon
