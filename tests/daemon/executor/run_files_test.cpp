// Reading a run's files: complete lines, offsets, memory and eval loss.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "daemon/executor/run_files.h"
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

}  // namespace
}  // namespace tailor::daemon
