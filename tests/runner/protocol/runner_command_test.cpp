// tailor-runner's command line as the protocol builds and reads it: what
// tailord's executors and `tailor run` build, the runner reads back whole,
// and what it cannot read is refused by name.
#include <gtest/gtest.h>

#include "runner/protocol/runner_command.h"

namespace tailor::runner {
namespace {

TEST(RunnerCommandTest, WhatIsBuiltIsReadBackWhole) {
  RunnerCommand c;
  c.plan = "/data/jobs/j-1/plan.json";
  c.out = "/data/jobs/j-1";
  c.resume = true;
  c.memory_limit = "300MiB";
  c.device = "cuda:1";
  c.threads = "4";
  c.cache_dir = "/tmp/cache dir";
  c.quiet = true;
  const std::vector<std::string> args = runner_args(c);
  EXPECT_EQ(args, (std::vector<std::string>{"--plan", "/data/jobs/j-1/plan.json", "--out", "/data/jobs/j-1", "--resume",
                                            "--memory-limit", "300MiB", "--device", "cuda:1", "--threads", "4",
                                            "--cache-dir", "/tmp/cache dir", "--quiet"}));
  auto back = parse_runner_args(args);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->plan, c.plan);
  EXPECT_EQ(back->out, c.out);
  EXPECT_TRUE(back->resume);
  EXPECT_EQ(back->memory_limit, c.memory_limit);
  EXPECT_EQ(back->device, c.device);
  EXPECT_EQ(back->threads, c.threads);
  EXPECT_EQ(back->cache_dir, c.cache_dir);
  EXPECT_TRUE(back->quiet);
  EXPECT_FALSE(back->progress);
  EXPECT_FALSE(back->export_checkpoint.has_value());
  EXPECT_EQ(runner_args(*back), args);
}

// The launcher's own flags to its ranks when a plan of several ranks is
// probed: the candidate each rank measures, and events kept for training.
TEST(RunnerCommandTest, TheLaunchersProbeFlagsToItsRanksAreReadBack) {
  RunnerCommand c;
  c.plan = "p.json";
  c.out = "o";
  c.probe_candidate = "2";
  c.append_events = true;
  const std::vector<std::string> args = runner_args(c);
  EXPECT_EQ(args,
            (std::vector<std::string>{"--plan", "p.json", "--out", "o", "--probe-candidate", "2", "--append-events"}));
  auto back = parse_runner_args(args);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->probe_candidate, "2");
  EXPECT_TRUE(back->append_events);
  EXPECT_FALSE(parse_runner_args({"--plan", "p.json", "--probe-candidate"}).is_ok());
}

TEST(RunnerCommandTest, TheExportFormAndTheShortHelpAreRead) {
  auto e = parse_runner_args({"--plan", "p.json", "--out", "o", "--export=o/checkpoints/step-000010", "--merge"});
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  EXPECT_EQ(e->export_checkpoint, "o/checkpoints/step-000010");
  EXPECT_TRUE(e->merge);
  auto h = parse_runner_args({"-h"});
  ASSERT_TRUE(h.is_ok());
  EXPECT_TRUE(h->help);
}

TEST(RunnerCommandTest, UnknownFlagsMissingValuesAndStrayArgumentsAreRefusedByName) {
  auto unknown = parse_runner_args({"--plan", "p.json", "--reusme"});
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_NE(unknown.status().message().find("--reusme"), std::string::npos) << unknown.status().message();
  auto missing = parse_runner_args({"--plan"});
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("--plan"), std::string::npos) << missing.status().message();
  auto stray = parse_runner_args({"--plan", "p.json", "extra"});
  ASSERT_FALSE(stray.is_ok());
  EXPECT_NE(stray.status().message().find("'extra'"), std::string::npos) << stray.status().message();
}

}  // namespace
}  // namespace tailor::runner
