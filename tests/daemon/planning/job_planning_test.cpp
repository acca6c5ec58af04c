// What tailord reserves for a job's plan (job_planning.h's
// estimated_job_bytes), probes included.
#include "daemon/planning/job_planning.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <variant>

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

// strategy.probe of a plan of several ranks needs tailor-runner's own
// launcher: locally the plan probes candidates of as many ranks; on Slurm,
// where srun starts every rank, it trains its own choice and says why.
TEST(JobPlanningTest, OnSlurmAPlanOfSeveralRanksIsNotProbedAndSaysWhy) {
  PlanningContext ctx;
  ctx.spec_root = std::string(TAILOR_SOURCE_DIR) + "/configs";
  ctx.host_memory = Bytes::gib(4);
  ctx.slurm_partition = [](const std::string&) -> Result<slurm::Partition> {
    slurm::Partition p;
    p.name = "cpu";
    p.state = "UP";
    slurm::Node n;
    n.name = n.addr = "n1";
    n.state = "IDLE";
    n.cpus = 4;
    n.memory_mib = 4096;
    n.partitions = {"cpu"};
    p.nodes = {n};
    return p;
  };
  std::ifstream in(std::string(TAILOR_SOURCE_DIR) + "/configs/examples/tiny-cpu.yaml");
  std::stringstream text;
  text << in.rdbuf();
  const std::vector<std::string> overrides = {"strategy.probe=2", "resources.ranks=2",
                                              "data.train=" + ctx.spec_root + "/data/tiny-corpus.txt"};
  for (const dsl::ExecutorKind executor : {dsl::ExecutorKind::kLocal, dsl::ExecutorKind::kSlurm}) {
    ctx.executor = executor;
    auto planned = load_and_plan(text.str(), "tiny-cpu.yaml", ctx, overrides);
    ASSERT_TRUE(std::holds_alternative<PlannedJob>(planned))
        << std::get<PlanningError>(planned).status.message()
        << std::get<PlanningError>(planned).diagnostics.to_string();
    const PlannedJob& job = std::get<PlannedJob>(planned);
    EXPECT_EQ(job.executor, executor);
    ASSERT_EQ(job.plan.chosen.strategy.num_gpus, 2);
    if (executor == dsl::ExecutorKind::kLocal) {
      EXPECT_EQ(job.plan.probe_candidates.size(), 2u) << job.plan.probe_limited;
    } else {
      EXPECT_TRUE(job.plan.probe_candidates.empty());
      EXPECT_NE(job.plan.probe_limited.find("not probed: on Slurm, srun starts the 2 ranks"), std::string::npos)
          << job.plan.probe_limited;
      EXPECT_NE(job.plan_json.find("not probed: on Slurm"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace tailor::daemon
