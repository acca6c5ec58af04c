// The scheduler's decisions: priority, sharing, backoff.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "daemon/scheduler/scheduler.h"

namespace tailor::daemon {
namespace {

TEST(SchedulerTest, PriorityOrderWithoutBackfillPastABlockedJob) {
  Capacity cap;
  cap.host_total_bytes = 100;
  cap.host_free_bytes = 100;
  const std::vector<QueuedJob> jobs = {{"a", 0, 60, {}}, {"b", 0, 50, {}}, {"c", 0, 10, {}}};
  const auto p = schedule(jobs, cap, 0);
  ASSERT_EQ(p.size(), 1u);  // b does not fit beside a, and c must not overtake b
  EXPECT_EQ(p[0].id, "a");
}

TEST(SchedulerTest, SmallJobsShareTheMachine) {
  Capacity cap;
  cap.host_total_bytes = 100;
  cap.host_free_bytes = 100;
  const auto p = schedule({{"a", 0, 30, {}}, {"b", 0, 30, {}}, {"c", 0, 30, {}}, {"d", 0, 30, {}}}, cap, 0);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[2].id, "c");
}

TEST(SchedulerTest, BackoffDoesNotBlockAndImpossibleJobsAreNamed) {
  Capacity cap;
  cap.host_total_bytes = 100;
  cap.host_free_bytes = 100;
  cap.gpu_total = 2;
  cap.free_gpus = {0, 1};
  const auto p = schedule({{"later", 0, 10, 50.0}, {"huge", 0, 500, {}}, {"g3", 3, 0, {}}, {"g2", 2, 0, {}}}, cap, 10);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].action, Placement::Action::kNeverFits);
  EXPECT_EQ(p[1].action, Placement::Action::kNeverFits);
  EXPECT_EQ(p[2].id, "g2");
  EXPECT_EQ(p[2].gpus, (std::vector<int>{0, 1}));
}

}  // namespace
}  // namespace tailor::daemon
