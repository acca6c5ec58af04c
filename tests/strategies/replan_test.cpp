// Re-planning after an out-of-memory: the smallest change that fits.
#include "strategies/replan.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "dsl/spec_loader.h"

namespace tailor::strategies {
namespace {

dsl::JobSpec load_example(const std::string& example) {
  const auto loaded =
      dsl::load_job_spec((std::filesystem::path(TAILOR_SOURCE_DIR) / "configs/examples" / example).string());
  EXPECT_TRUE(loaded.ok()) << loaded.diagnostics.to_string();
  return *loaded.spec;
}

DetectedHardware one_gpu(const std::string& flag) {
  return {*parse_gpus_flag(flag, dsl::Catalog::builtin()), Bytes::gib(64)};
}

Plan first_plan(const dsl::JobSpec& spec, const DetectedHardware& hw) {
  auto resolved = resolve_hardware(spec, std::nullopt, hw.gpus, hw.host_memory, dsl::Catalog::builtin());
  EXPECT_TRUE(resolved.is_ok());
  return plan_job(spec, *resolved);
}

dsl::JobSpec detected(dsl::JobSpec spec) {
  spec.resources = {};  // plan for the detected GPU
  return spec;
}

// When a smaller micro-batch fits, every other knob stays: the optimizer
// (whose states the checkpoint holds), the adapter, checkpointing.
TEST(ReplanTest, ASmallerMicroBatchKeepsEveryOtherKnob) {
  const dsl::JobSpec spec = detected(load_example("llama2-7b-qlora-24gb.yaml"));
  const DetectedHardware hw = one_gpu("1xA100-80GB");
  const Plan first = first_plan(spec, hw);
  ASSERT_TRUE(first.fits);
  const Strategy failed = first.chosen.strategy;
  ASSERT_GT(failed.micro_batch_size, 1) << failed.describe();
  // The runner ran out at 90% of what the plan estimated.
  const Bytes budget(first.chosen.memory.per_device.total().count() * 9 / 10);
  auto next = replan_after_oom(spec, {failed, budget, std::nullopt}, hw, {});
  ASSERT_TRUE(next.is_ok()) << next.status().to_string();
  const Strategy& s = next->plan.chosen.strategy;
  EXPECT_LT(s.micro_batch_size, failed.micro_batch_size);
  EXPECT_EQ(s.micro_batch_size * s.grad_accumulation, failed.micro_batch_size * failed.grad_accumulation);
  EXPECT_EQ(s.precision, failed.precision);
  EXPECT_EQ(s.optimizer, failed.optimizer);
  EXPECT_EQ(s.adapter, failed.adapter);
  EXPECT_EQ(s.checkpoint_every, failed.checkpoint_every);
  EXPECT_LE(next->plan.chosen.memory.per_device.total(), next->plan.budget_per_device);
  EXPECT_NE(next->story.find("kept every knob"), std::string::npos) << next->story;
}

// At micro-batch 1 something else must change; the optimizer is kept when
// a plan with it fits, and the precision always.
TEST(ReplanTest, AtMicroBatchOneAnotherKnobChangesButTheOptimizerStays) {
  dsl::JobSpec spec = detected(load_example("llama2-7b-qlora-24gb.yaml"));
  spec.training.micro_batch_size = 1;
  const DetectedHardware hw = one_gpu("1xA100-80GB");
  const Plan first = first_plan(spec, hw);
  ASSERT_TRUE(first.fits);
  const Strategy failed = first.chosen.strategy;
  spec.training.micro_batch_size.reset();
  const Bytes budget(first.chosen.memory.per_device.total().count() * 8 / 10);
  auto next = replan_after_oom(spec, {failed, budget, std::nullopt}, hw, {});
  ASSERT_TRUE(next.is_ok()) << next.status().to_string();
  const Strategy& s = next->plan.chosen.strategy;
  EXPECT_NE(s, failed);
  EXPECT_EQ(s.precision, failed.precision);
  EXPECT_EQ(s.optimizer, failed.optimizer) << next->story;
  EXPECT_LE(next->plan.chosen.memory.per_device.total(), next->plan.budget_per_device);
}

}  // namespace
}  // namespace tailor::strategies
