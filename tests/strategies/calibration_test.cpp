// Plans calibrated by this machine's measurements (calibration.h), and the
// candidates a probe measures (strategy.probe).
#include "strategies/calibration.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <set>

#include "dsl/spec_loader.h"
#include "strategies/plan_document.h"
#include "strategies/planner.h"

namespace tailor::strategies {
namespace {

namespace fs = std::filesystem;

dsl::JobSpec example_spec(const std::string& example, std::vector<std::string> overrides = {}) {
  dsl::LoadOptions opts;
  opts.overrides = std::move(overrides);
  const auto loaded = dsl::load_job_spec((fs::path(TAILOR_SOURCE_DIR) / "configs/examples" / example).string(), opts);
  EXPECT_TRUE(loaded.ok()) << loaded.diagnostics.to_string();
  return *loaded.spec;
}

Hardware host_only(Bytes host) {
  Hardware hw;
  hw.host_memory = host;
  hw.cpu = cpu_device(host);
  return hw;
}

TEST(CalibrationTest, FactorsAreTheMediansNeverLoweringAPeakEstimate) {
  // Peaks measured 10%, 20% and 40% over their estimates; speeds half, as
  // predicted, and twice.
  const Calibration c = fit_calibration("k", {{100, 110, 10, 5}, {100, 120, 10, 10}, {100, 140, 10, 20}});
  EXPECT_EQ(c.runs, 3);
  EXPECT_DOUBLE_EQ(c.memory, 1.2);
  EXPECT_DOUBLE_EQ(c.speed, 1.0);
  // Over-estimates leave the estimate as it is (the safe side); a wild
  // ratio is bounded.
  EXPECT_DOUBLE_EQ(fit_calibration("k", {{100, 80, 10, 10}}).memory, 1.0);
  EXPECT_DOUBLE_EQ(fit_calibration("k", {{100, 900, 10, 1000}}).memory, kMaxMemoryFactor);
  EXPECT_DOUBLE_EQ(fit_calibration("k", {{100, 900, 10, 1000}}).speed, kMaxSpeedFactor);
  // Samples without a figure do not count for it; none at all: no runs.
  const Calibration speed_only = fit_calibration("k", {{0, 0, 10, 15}});
  EXPECT_EQ(speed_only.runs, 1);
  EXPECT_DOUBLE_EQ(speed_only.memory, 1.0);
  EXPECT_DOUBLE_EQ(speed_only.speed, 1.5);
  EXPECT_EQ(fit_calibration("k", {}).runs, 0);
}

TEST(CalibrationTest, ASpeedMeasuredOnABusyMachineCountsForItsPeakOnly) {
  // Two idle runs at 1.5x the predicted speed; one measured while other
  // processes held 60% of its cores, at 0.3x. Its peak still counts.
  CalibrationSample busy{100, 140, 10, 3};
  busy.contention = 0.6;
  CalibrationSample idle_a{100, 110, 10, 15}, idle_b{100, 120, 10, 15};
  idle_a.contention = 0.05;
  const Calibration c = fit_calibration("k", {idle_a, busy, idle_b});
  EXPECT_EQ(c.runs, 3);
  EXPECT_EQ(c.busy, 1);
  EXPECT_DOUBLE_EQ(c.speed, 1.5);
  EXPECT_DOUBLE_EQ(c.memory, 1.2);
  // At the bound it still counts; only busy speeds: the speed stays as estimated.
  busy.contention = kMaxSpeedContention;
  EXPECT_DOUBLE_EQ(fit_calibration("k", {busy}).speed, 0.3);
  busy.contention = 0.9;
  const Calibration only_busy = fit_calibration("k", {busy, busy});
  EXPECT_EQ(only_busy.runs, 2);
  EXPECT_EQ(only_busy.busy, 2);
  EXPECT_DOUBLE_EQ(only_busy.speed, 1.0);
  EXPECT_DOUBLE_EQ(only_busy.memory, 1.4);
}

TEST(CalibrationTest, OnlyAKeysNewestSamplesCount) {
  // Old runs at half the speed, then a faster runner: the window holds the new ones only.
  std::vector<CalibrationSample> samples(30, CalibrationSample{100, 100, 10, 5});
  for (std::size_t i = samples.size() - kCalibrationWindow; i < samples.size(); ++i)
    samples[i] = {100, 130, 10, 20};
  const Calibration c = fit_calibration("k", samples);
  EXPECT_EQ(c.runs, static_cast<int>(kCalibrationWindow));
  EXPECT_DOUBLE_EQ(c.speed, 2.0);
  EXPECT_DOUBLE_EQ(c.memory, 1.3);
  samples.push_back({100, 100, 10, 5});  // one old-style run more: still the newest 20's median
  EXPECT_DOUBLE_EQ(fit_calibration("k", samples).speed, 2.0);
}

TEST(CalibrationTest, ACalibratedPlanRaisesItsPeakEstimatesAndScalesItsSpeedsAndSaysSo) {
  const dsl::JobSpec spec = example_spec("tiny-cpu.yaml");
  const Hardware hw = host_only(Bytes::gib(2));
  const Plan plain = plan_job(spec, hw);
  ASSERT_TRUE(plain.fits);
  EXPECT_EQ(calibration_key(spec, hw).text(), "cpu / tailor / llama");
  // A detected processor keys its own figures: another CPU's do not apply.
  Hardware detected = hw;
  detected.cpu.model = "AMD EPYC 7B13, 2 threads";
  EXPECT_EQ(calibration_key(spec, detected).text(), "cpu: AMD EPYC 7B13, 2 threads / tailor / llama");
  PlanOptions o;
  o.calibration = fit_calibration(calibration_key(spec, hw).text(), {{100, 125, 100, 200}});
  const Plan calibrated = plan_job(spec, hw, o);
  ASSERT_TRUE(calibrated.fits);
  ASSERT_TRUE(calibrated.calibration.has_value());
  EXPECT_EQ(calibrated.calibration->runs, 1);
  // Each candidate as before, its peak a quarter higher, its speed doubled.
  const Candidate before = evaluate(spec, hw, calibrated.chosen.strategy, {});
  const Candidate after = evaluate(spec, hw, calibrated.chosen.strategy, o);
  EXPECT_NEAR(static_cast<double>(after.memory.per_device.total().count()),
              1.25 * static_cast<double>(before.memory.per_device.total().count()), 2.0);
  EXPECT_EQ(after.memory.calibrated, after.memory.per_device.total() - before.memory.per_device.total());
  EXPECT_DOUBLE_EQ(after.throughput.tokens_per_second, 2.0 * before.throughput.tokens_per_second);
  EXPECT_DOUBLE_EQ(after.throughput.step_seconds, 0.5 * before.throughput.step_seconds);
  // The plan document says where its figures come from.
  const auto doc = nlohmann::json::parse(plan_to_json(calibrated, spec));
  EXPECT_EQ(doc["calibration"]["runs"], 1);
  EXPECT_DOUBLE_EQ(doc["calibration"]["memory_factor"].get<double>(), 1.25);
  EXPECT_EQ(doc["calibration"]["calibrated_bytes"].get<std::int64_t>(), calibrated.chosen.memory.calibrated.count());
  EXPECT_EQ(doc["calibration_key"]["machine"], "cpu");
  EXPECT_FALSE(nlohmann::json::parse(plan_to_json(plain, spec)).contains("calibration"));
  // A calibration that raises every estimate past the budget makes the
  // plan not fit, as the measurements say.
  PlanOptions tight;
  tight.calibration = fit_calibration("k", {{100, 150, 0, 0}});
  const dsl::JobSpec small =
      example_spec("tiny-cpu.yaml",
                   {"resources.host_memory=" + std::to_string(plain.chosen.memory.per_device.total().count() * 6 / 5)});
  EXPECT_TRUE(plan_job(small, host_only(plain.chosen.memory.per_device.total() * 6 / 5)).fits);
  EXPECT_NE(
      plan_job(small, host_only(plain.chosen.memory.per_device.total() * 6 / 5), tight).chosen.strategy.describe(),
      plan_job(small, host_only(plain.chosen.memory.per_device.total() * 6 / 5)).chosen.strategy.describe());
}

TEST(ProbeCandidatesTest, AreThePoliciesChoicesInTurnTheChosenPlanFirst) {
  const dsl::JobSpec spec = example_spec("tiny-cpu.yaml", {"strategy.probe=4"});
  const Hardware hw = host_only(Bytes::gib(2));
  const Plan p = plan_job(spec, hw);
  ASSERT_TRUE(p.fits);
  ASSERT_EQ(p.probe_candidates.size(), 4u);
  EXPECT_TRUE(p.probe_limited.empty()) << p.probe_limited;
  EXPECT_EQ(p.probe_candidates.front().strategy.describe(), p.chosen.strategy.describe());
  std::set<std::string> distinct;
  for (const Candidate& c : p.probe_candidates) {
    EXPECT_TRUE(c.fits && c.executable()) << c.strategy.describe();
    distinct.insert(c.strategy.describe());
  }
  EXPECT_EQ(distinct.size(), 4u);
  // The sweep's order starts the same way.
  const std::vector<Candidate> all = plans_in_policy_order(spec, hw);
  ASSERT_GE(all.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i)
    EXPECT_EQ(all[i].strategy.describe(), p.probe_candidates[i].strategy.describe());
  // The document asks the runner for them.
  const auto doc = nlohmann::json::parse(plan_to_json(p, spec));
  EXPECT_EQ(doc["probe"]["requested"], 4);
  EXPECT_EQ(doc["probe"]["candidates"].size(), 4u);
  EXPECT_FALSE(
      nlohmann::json::parse(plan_to_json(plan_job(example_spec("tiny-cpu.yaml"), hw), spec)).contains("probe"));
}

TEST(ProbeCandidatesTest, FewerThanAskedSayWhyAndSeveralRanksProbePlansOfAsManyRanks) {
  // Everything pinned: one plan (and its attention) left.
  const dsl::JobSpec pinned = example_spec(
      "tiny-cpu.yaml", {"strategy.probe=5", "strategy.precision=fp32", "strategy.gradient_checkpointing=false",
                        "training.micro_batch_size=16", "strategy.optimizer=adamw"});
  const Plan p = plan_job(pinned, host_only(Bytes::gib(2)));
  ASSERT_TRUE(p.fits);
  EXPECT_LT(p.probe_candidates.size(), 5u);
  EXPECT_NE(p.probe_limited.find("no other plan of one process fits"), std::string::npos) << p.probe_limited;
  // Two CPU ranks: every candidate is a plan of two ranks (the ranks
  // probe it together), the chosen one first.
  const Plan ranks =
      plan_job(example_spec("tiny-cpu.yaml", {"strategy.probe=3", "resources.ranks=2"}), host_only(Bytes::gib(2)));
  ASSERT_TRUE(ranks.fits);
  ASSERT_EQ(ranks.chosen.strategy.num_gpus, 2);
  ASSERT_EQ(ranks.probe_candidates.size(), 3u) << ranks.probe_limited;
  EXPECT_EQ(ranks.probe_candidates.front().strategy.describe(), ranks.chosen.strategy.describe());
  for (const Candidate& c : ranks.probe_candidates)
    EXPECT_EQ(c.strategy.num_gpus, 2) << c.strategy.describe();
  // Pinned down to one plan of two ranks, it says which plans there were none of.
  const Plan one =
      plan_job(example_spec("tiny-cpu.yaml", {"strategy.probe=2", "resources.ranks=2", "strategy.precision=fp32",
                                              "strategy.gradient_checkpointing=false", "training.micro_batch_size=8",
                                              "strategy.optimizer=adamw", "strategy.zero_stage=0"}),
               host_only(Bytes::gib(2)));
  ASSERT_TRUE(one.fits);
  EXPECT_NE(one.probe_limited.find("no other plan of 2 ranks fits"), std::string::npos) << one.probe_limited;
}

}  // namespace
}  // namespace tailor::strategies
