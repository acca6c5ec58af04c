// What tailord reserves for a job's plan (job_planning.h's
// estimated_job_bytes), probes included.
#include "daemon/planning/job_planning.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "dsl/spec_loader.h"
#include "strategies/planner.h"

namespace tailor::daemon {
namespace {

dsl::JobSpec tiny_cpu(std::vector<std::string> overrides) {
  dsl::LoadOptions opts;
  opts.overrides = std::move(overrides);
  const auto loaded = dsl::load_job_spec(std::string(TAILOR_SOURCE_DIR) + "/configs/examples/tiny-cpu.yaml", opts);
  EXPECT_TRUE(loaded.ok()) << loaded.diagnostics.to_string();
  return *loaded.spec;
}

// A probed job may run any of its candidates (each in turn, then the
// fastest): it reserves the largest; without a probe, the plan's own.
TEST(JobPlanningTest, AProbedJobReservesItsLargestCandidate) {
  strategies::Hardware hw;
  hw.host_memory = Bytes::gib(2);
  hw.cpu = strategies::cpu_device(hw.host_memory);
  const strategies::Plan plain = strategies::plan_job(tiny_cpu({}), hw);
  const strategies::Plan probed = strategies::plan_job(tiny_cpu({"strategy.probe=5"}), hw);
  ASSERT_TRUE(plain.fits && probed.fits);
  ASSERT_EQ(probed.probe_candidates.size(), 5u);
  std::int64_t largest = 0;
  for (const auto& c : probed.probe_candidates)
    largest = std::max(largest, c.memory.per_device.total().count());
  ASSERT_GT(largest, probed.chosen.memory.per_device.total().count())
      << "a candidate must be larger than the plan's own";
  EXPECT_EQ(estimated_job_bytes(plain, std::nullopt), plain.chosen.memory.per_device.total().count());
  EXPECT_EQ(estimated_job_bytes(probed, std::nullopt), largest);
  // A memory limit caps each.
  EXPECT_EQ(estimated_job_bytes(probed, 1000), 1000);
}

}  // namespace
}  // namespace tailor::daemon
