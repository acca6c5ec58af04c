// The probe's protocol: choosing among measurements, the plan written again
// with them, and the calibration samples a probe and a run leave.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "dsl/spec_loader.h"
#include "runner/protocol/calibration_runs.h"
#include "runner/protocol/plan_reader.h"
#include "runner/protocol/probe.h"
#include "strategies/plan_document.h"
#include "strategies/planner.h"

namespace tailor::runner {
namespace {

ProbeCandidate measured(double tps, ProbeMeasurement::Outcome o = ProbeMeasurement::Outcome::kFits,
                        double fidelity = 1.0) {
  ProbeCandidate c;
  c.fidelity_factor = fidelity;
  ProbeMeasurement m;
  m.outcome = o;
  m.tokens_per_second = tps;
  c.measured = m;
  return c;
}

TEST(ProbeProtocolTest, ChoosesTheFastestThatFitsWithTiesToThePlannersOrder) {
  using O = ProbeMeasurement::Outcome;
  // The fastest wins; out of memory and failures never do.
  EXPECT_EQ(
      choose_probed({measured(100), measured(150), measured(400, O::kOutOfMemory), measured(300, O::kFailed)}, 0.02),
      1);
  // Within the tie band the earlier candidate (the planner's order) stays.
  EXPECT_EQ(choose_probed({measured(100), measured(101.5)}, 0.02), 0);
  EXPECT_EQ(choose_probed({measured(100), measured(103)}, 0.02), 1);
  // A departure from exact training must buy its fidelity margin.
  EXPECT_EQ(choose_probed({measured(100), measured(105, O::kFits, 1 / 1.1)}, 0.02), 0);
  EXPECT_EQ(choose_probed({measured(100), measured(120, O::kFits, 1 / 1.1)}, 0.02), 1);
  // Nothing fitted.
  EXPECT_EQ(choose_probed({measured(100, O::kOutOfMemory)}, 0.02), -1);
  EXPECT_EQ(choose_probed({}, 0.02), -1);
}

ProbeMeasurement rank_measured(ProbeMeasurement::Outcome o, double tps, double step, std::int64_t peak,
                               std::string message = {}) {
  ProbeMeasurement m;
  m.outcome = o;
  m.tokens_per_second = tps;
  m.step_seconds = step;
  m.peak_bytes = peak;
  m.budget_bytes = 1000;
  m.message = std::move(message);
  return m;
}

// A plan of several ranks is measured by its ranks together: the job's
// speed, step and peak are the worst rank's (each counts the global batch), and a rank out
// of memory (the others stopped, leaving nothing) is a measured "does not
// fit" naming it. A rank's file is read back as written.
TEST(ProbeProtocolTest, TheRanksMeasurementsOfACandidateCombineIntoTheJobs) {
  using O = ProbeMeasurement::Outcome;
  const ProbeMeasurement fits =
      combine_rank_measurements({rank_measured(O::kFits, 100, 0.5, 700), rank_measured(O::kFits, 90, 0.6, 800)}, "");
  EXPECT_EQ(fits.outcome, O::kFits);
  EXPECT_DOUBLE_EQ(fits.tokens_per_second, 90);
  EXPECT_DOUBLE_EQ(fits.step_seconds, 0.6);
  EXPECT_EQ(fits.peak_bytes, 800);
  EXPECT_EQ(fits.budget_bytes, 1000);
  const ProbeMeasurement oom =
      combine_rank_measurements({std::nullopt, rank_measured(O::kFailed, 0, 0, 300, "peer left"),
                                 rank_measured(O::kOutOfMemory, 0, 0, 990, "budget of 1000 B exceeded")},
                                "exit 3");
  EXPECT_EQ(oom.outcome, O::kOutOfMemory);
  EXPECT_EQ(oom.message, "rank 2: budget of 1000 B exceeded");
  EXPECT_EQ(oom.peak_bytes, 990);
  EXPECT_EQ(oom.tokens_per_second, 0);
  const ProbeMeasurement failed = combine_rank_measurements(
      {rank_measured(O::kFits, 100, 0.5, 700), rank_measured(O::kFailed, 0, 0, 0, "boom")}, "");
  EXPECT_EQ(failed.outcome, O::kFailed);
  EXPECT_EQ(failed.message, "rank 1: boom");
  const ProbeMeasurement silent = combine_rank_measurements({std::nullopt, std::nullopt}, "killed by signal 9");
  EXPECT_EQ(silent.outcome, O::kFailed);
  EXPECT_EQ(silent.message, "killed by signal 9");

  ProbeMeasurement m = rank_measured(O::kOutOfMemory, 12.5, 0.25, 4096, "rank 1 ran out");
  m.reserved_bytes = 8192;
  m.seconds = 3.5;
  const auto back = parse_measurement(measurement_json_text(m), "rank file");
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->outcome, m.outcome);
  EXPECT_EQ(back->tokens_per_second, m.tokens_per_second);
  EXPECT_EQ(back->step_seconds, m.step_seconds);
  EXPECT_EQ(back->peak_bytes, m.peak_bytes);
  EXPECT_EQ(back->reserved_bytes, m.reserved_bytes);
  EXPECT_EQ(back->budget_bytes, m.budget_bytes);
  EXPECT_EQ(back->seconds, m.seconds);
  EXPECT_EQ(back->message, m.message);
  EXPECT_EQ(back->contention, -1) << "not measured stays unknown";
  m.contention = 0.375;
  EXPECT_EQ(parse_measurement(measurement_json_text(m), "rank file")->contention, 0.375);
  // The busiest rank says how busy the machine was.
  ProbeMeasurement a = rank_measured(O::kFits, 100, 0.5, 700), b = rank_measured(O::kFits, 90, 0.6, 800);
  a.contention = 0.1;
  b.contention = 0.4;
  EXPECT_DOUBLE_EQ(combine_rank_measurements({a, b}, "").contention, 0.4);
  const auto bad = parse_measurement(R"({"outcome": "fits"})", "probe/candidate-0.rank-1.json");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("probe/candidate-0.rank-1.json"), std::string::npos);
  EXPECT_EQ(probe_rank_file("/jobs/j-1", 2, 1), "/jobs/j-1/probe/candidate-2.rank-1.json");
}

// A tiny CPU job's plan asking for a probe of 2.
std::string probe_plan_json(std::int64_t probe) {
  dsl::LoadOptions opts;
  opts.overrides = {"strategy.probe=" + std::to_string(probe)};
  const auto loaded = dsl::load_job_spec(std::string(TAILOR_SOURCE_DIR) + "/configs/examples/tiny-cpu.yaml", opts);
  EXPECT_TRUE(loaded.ok()) << loaded.diagnostics.to_string();
  strategies::Hardware hw;
  hw.host_memory = Bytes::gib(2);
  hw.cpu = strategies::cpu_device(hw.host_memory);
  const strategies::Plan plan = strategies::plan_job(*loaded.spec, hw);
  EXPECT_EQ(plan.probe_candidates.size(), static_cast<std::size_t>(probe));
  return strategies::plan_to_json(plan, *loaded.spec);
}

TEST(ProbeProtocolTest, TheProbedPlanTrainsTheChosenCandidateAndKeepsEveryMeasurement) {
  const std::string text = probe_plan_json(2);
  auto table = parse_probe(text, "plan");
  ASSERT_TRUE(table.is_ok() && *table) << (table.is_ok() ? "no probe" : table.status().message());
  ProbeTable t = **table;
  EXPECT_FALSE(t.measured());
  ASSERT_EQ(t.candidates.size(), 2u);
  EXPECT_NE(t.candidates[0].summary, t.candidates[1].summary);
  t.candidates[0].measured = measured(100, ProbeMeasurement::Outcome::kOutOfMemory).measured;
  t.candidates[0].measured->message = "out of memory (probe: steps)";
  t.candidates[1].measured = measured(200).measured;
  t.candidates[1].measured->peak_bytes = 12345;
  t.chosen = choose_probed(t.candidates, t.tie_band);
  ASSERT_EQ(t.chosen, 1);
  t.seconds = 3.5;
  auto probed = probed_plan_json(text, t);
  ASSERT_TRUE(probed.is_ok()) << probed.status().message();
  // The document trains candidate 2, with its own estimate in the plan's places.
  auto cfg = parse_plan(*probed, "probed");
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().message();
  EXPECT_EQ(cfg->strategy.describe(), t.candidates[1].summary);
  const auto doc = nlohmann::json::parse(*probed);
  EXPECT_EQ(doc["summary"], t.candidates[1].summary);
  EXPECT_EQ(doc["memory"]["per_gpu"]["total"].get<std::int64_t>(), t.candidates[1].predicted_peak);
  EXPECT_EQ(doc["probe"]["chosen"], 1);
  // Read back: every measurement, and the same candidates.
  auto again = parse_probe(*probed, "probed");
  ASSERT_TRUE(again.is_ok() && *again);
  EXPECT_TRUE((*again)->measured());
  EXPECT_TRUE(same_candidates(**again, t));
  EXPECT_EQ((*again)->candidates[0].measured->outcome, ProbeMeasurement::Outcome::kOutOfMemory);
  EXPECT_EQ((*again)->candidates[0].measured->message, "out of memory (probe: steps)");
  EXPECT_EQ((*again)->candidates[1].measured->peak_bytes, 12345);
  EXPECT_DOUBLE_EQ((*again)->seconds, 3.5);
  const std::string table_text = format_probe_table(**again, false);
  EXPECT_NE(table_text.find("2*"), std::string::npos) << table_text;
  EXPECT_NE(table_text.find("out_of_memory"), std::string::npos) << table_text;
  // Measurements that do not match the document are refused.
  ProbeTable fewer = t;
  fewer.candidates.pop_back();
  EXPECT_FALSE(probed_plan_json(text, fewer).is_ok());
  EXPECT_FALSE(probed_plan_json(probe_plan_json(0).substr(0), t).is_ok());
}

TEST(ProbeProtocolTest, ProbesAndRunsLeaveCalibrationSamplesWithoutThePlansCalibration) {
  const std::string text = probe_plan_json(2);
  ProbeTable t = **parse_probe(text, "plan");
  t.candidates[0].measured = measured(300).measured;
  t.candidates[0].measured->peak_bytes = 2 * t.candidates[0].predicted_peak;
  t.candidates[1].measured = measured(0, ProbeMeasurement::Outcome::kOutOfMemory).measured;
  t.chosen = 0;
  // A plan calibrated by x1.25 memory and x2 speed: the samples hold the
  // estimates before it, so that a calibration never feeds on itself.
  auto doc = nlohmann::json::parse(*probed_plan_json(text, t));
  doc["calibration"] = {{"key", "cpu / tailor / llama"}, {"runs", 3}, {"memory_factor", 1.25}, {"speed_factor", 2.0}};
  const std::vector<CalibrationRun> probes = probe_calibration(doc.dump());
  ASSERT_EQ(probes.size(), 1u);  // the one that fitted
  EXPECT_EQ(probes[0].source, "probe");
  EXPECT_EQ(probes[0].key.machine, "cpu");
  EXPECT_EQ(probes[0].key.runtime, "tailor");
  EXPECT_EQ(probes[0].key.family, "llama");
  EXPECT_DOUBLE_EQ(probes[0].sample.predicted_peak, static_cast<double>(t.candidates[0].predicted_peak) / 1.25);
  EXPECT_DOUBLE_EQ(probes[0].sample.measured_peak, 2.0 * static_cast<double>(t.candidates[0].predicted_peak));
  EXPECT_DOUBLE_EQ(probes[0].sample.predicted_tokens_per_second, t.candidates[0].predicted_tokens_per_second / 2.0);
  EXPECT_DOUBLE_EQ(probes[0].sample.measured_tokens_per_second, 300);
  EXPECT_DOUBLE_EQ(probes[0].sample.contention, 0) << "unknown counts as idle";
  {
    ProbeTable busy = t;
    busy.candidates[0].measured->contention = 0.7;
    auto busy_doc = nlohmann::json::parse(*probed_plan_json(text, busy));
    EXPECT_DOUBLE_EQ(probe_calibration(busy_doc.dump())[0].sample.contention, 0.7);
    // The table says the speeds will not calibrate.
    busy.seconds = 2;
    EXPECT_NE(format_probe_table(busy, false).find("other processes held up to 70% of the cores"), std::string::npos)
        << format_probe_table(busy, false);
    EXPECT_EQ(format_probe_table(t, false).find("other processes held"), std::string::npos);
  }
  // A run: the highest peak and the median speed of rank 0's steps after the first.
  const std::vector<std::string> metrics = {
      R"({"step":1,"rank":0,"tokens_per_second":10,"memory":{"peak_bytes":900}})",
      R"({"step":1,"rank":1,"tokens_per_second":99,"memory":{"peak_bytes":99999}})",
      R"({"step":2,"rank":0,"tokens_per_second":400,"memory":{"peak_bytes":1000},"contention":0.5})",
      R"({"step":3,"rank":0,"tokens_per_second":500,"memory":{"peak_bytes":800},"contention":0.0})",
      R"({"step":4,"rank":0,"tokens_per_second":450,"memory":{"peak_bytes":950},"contention":0.25})",
      "not json"};
  const auto run = run_calibration(text, metrics);
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->source, "job");
  EXPECT_DOUBLE_EQ(run->sample.measured_peak, 1000);
  EXPECT_DOUBLE_EQ(run->sample.measured_tokens_per_second, 450);
  EXPECT_DOUBLE_EQ(run->sample.contention, 0.25) << "the median step's";
  EXPECT_DOUBLE_EQ(run->sample.predicted_peak, nlohmann::json::parse(text)["memory"]["per_gpu"]["total"].get<double>());
  EXPECT_FALSE(run_calibration(text, {metrics[0]}).has_value()) << "one step says nothing of the speed";
}

}  // namespace
}  // namespace tailor::runner
