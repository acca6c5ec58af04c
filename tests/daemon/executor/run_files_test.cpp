// Reading a run's files: complete lines, offsets, memory and eval loss.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include "daemon/executor/run_files.h"
#include "daemon/store/job_store.h"
#include "tests/testing/temp_dir.h"

namespace tailor::daemon {
namespace {

TEST(RunFilesTest, ReadsOnlyCompleteLinesAndResumesAtTheOffset) {
  tailor::testing::TempDir dir;
  const std::string path = dir.write("m.jsonl", "{\"step\":1}\n{\"step\":2}\n{\"st");
  std::int64_t off = 0;
  auto lines = read_new_lines(path, off);
  ASSERT_TRUE(lines.is_ok());
  ASSERT_EQ(lines->size(), 2u);
  EXPECT_EQ(off, 22);
  dir.write("m.jsonl", "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n");
  lines = read_new_lines(path, off);
  ASSERT_EQ(lines->size(), 1u);
  EXPECT_EQ(parse_metric_line((*lines)[0], 1)->step, 3);
}

TEST(RunFilesTest, MetricLineKeepsMemoryComponents) {
  const auto m = parse_metric_line(
      R"({"step":4,"loss":2.5,"tokens_per_second":100.5,"memory":{"weights":10,"activations":20,"peak_bytes":99}})", 2);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->attempt, 2);
  EXPECT_DOUBLE_EQ(*m->loss, 2.5);
  EXPECT_EQ(m->component_bytes.at("activations"), 20);
  EXPECT_EQ(*m->peak_bytes, 99);
  EXPECT_FALSE(parse_metric_line("not json", 1));
}

TEST(RunFilesTest, AnEvaluatedStepsLineCarriesTheEvalLoss) {
  const auto m = parse_metric_line(
      R"({"step":10,"loss":2.5,"eval_loss":2.75,"eval_perplexity":15.6,"eval_tokens":301,"eval_seconds":0.5})", 1);
  ASSERT_TRUE(m);
  EXPECT_DOUBLE_EQ(*m->loss, 2.5);
  EXPECT_DOUBLE_EQ(*m->eval_loss, 2.75);
  EXPECT_EQ(*m->eval_tokens, 301);
  EXPECT_DOUBLE_EQ(*m->eval_seconds, 0.5);
  EXPECT_FALSE(parse_metric_line(R"({"step":11,"loss":2.4})", 1)->eval_loss);
}

// `metrics` ingested into a new store and read back.
std::vector<StepMetric> stored(const std::vector<StepMetric>& metrics) {
  testing::TempDir dir;
  auto store = JobStore::open(dir.file("tailor.db")).value();
  NewJob job;
  job.name = "stored";
  job.spec_text = "name: stored\n";
  job.spec_json = "{}";
  job.plan_json = "{\"fits\":true}";
  const auto id = store->create(job)->job.id;
  IngestBatch batch;
  batch.metrics = metrics;
  EXPECT_TRUE(store->ingest(id, batch, JobUpdate{}).is_ok());
  auto rows = store->metrics(id);
  EXPECT_TRUE(rows.is_ok());
  return rows.is_ok() ? *rows : std::vector<StepMetric>{};
}

// `m` ingested into a new store and read back: each of `keys` as it was.
void expect_stored(const StepMetric& m, std::initializer_list<const char*> keys) {
  const std::vector<StepMetric> rows = stored({m});
  ASSERT_EQ(rows.size(), 1u);
  for (const char* key : keys) {
    ASSERT_TRUE(rows[0].preference.contains(key)) << key;
    EXPECT_DOUBLE_EQ(rows[0].preference.at(key), m.preference.at(key)) << key;
  }
}

// A step on a GPU the catalog knows carries its model FLOPs utilisation;
// through the store and back, and absent (NULL) where the runner had none.
TEST(RunFilesTest, MfuIsKeptWhereTheRunnerReportsIt) {
  const auto gpu = parse_metric_line(R"({"step":3,"loss":2.5,"tokens_per_second":9000,"mfu":0.412})", 1);
  ASSERT_TRUE(gpu && gpu->mfu);
  EXPECT_DOUBLE_EQ(*gpu->mfu, 0.412);
  const auto cpu = parse_metric_line(R"({"step":4,"loss":2.4,"tokens_per_second":900})", 1);
  ASSERT_TRUE(cpu);
  EXPECT_FALSE(cpu->mfu);

  const std::vector<StepMetric> rows = stored({*gpu, *cpu});
  ASSERT_EQ(rows.size(), 2u);
  ASSERT_TRUE(rows[0].mfu);
  EXPECT_DOUBLE_EQ(*rows[0].mfu, 0.412);
  EXPECT_FALSE(rows[1].mfu);
}

// A reward model's line (training.method reward) carries TRL's
// RewardTrainer's names, kept as preference metrics and stored in their
// own columns (store migration 10).
TEST(RunFilesTest, ARewardModelsScoresAreKeptAndStored) {
  const auto m =
      parse_metric_line(R"({"step":3,"loss":0.4,"accuracy":0.75,"margin":1.5,"min_reward":-2.25,"mean_reward":0.125,)"
                        R"("max_reward":2.5,"eval_loss":0.5,"eval_accuracy":0.875})",
                        1);
  ASSERT_TRUE(m);
  EXPECT_DOUBLE_EQ(m->preference.at("accuracy"), 0.75);
  EXPECT_DOUBLE_EQ(m->preference.at("min_reward"), -2.25);
  EXPECT_DOUBLE_EQ(m->preference.at("eval_accuracy"), 0.875);
  EXPECT_FALSE(m->preference.contains("rewards/margins"));
  expect_stored(*m, {"accuracy", "margin", "min_reward", "mean_reward", "max_reward", "eval_accuracy"});
}

// A KTO job's line carries DPO's rewards and TRL's KTOTrainer's `kl`,
// stored in their own columns (store migration 11).
TEST(RunFilesTest, AKtoJobsKlEstimateIsKeptAndStored) {
  const auto m = parse_metric_line(
      R"({"step":4,"loss":0.3,"rewards/chosen":0.5,"rewards/rejected":-0.25,"rewards/margins":0.75,"kl":0.125,)"
      R"("eval_loss":0.35,"eval_kl":0.0625})",
      1);
  ASSERT_TRUE(m);
  EXPECT_DOUBLE_EQ(m->preference.at("kl"), 0.125);
  expect_stored(*m, {"kl", "eval_kl", "rewards/margins"});
}

}  // namespace
}  // namespace tailor::daemon
