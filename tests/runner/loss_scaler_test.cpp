#include "runner/loss_scaler.h"

#include <gtest/gtest.h>

namespace tailor::runner {
namespace {

using Outcome = DynamicLossScaler::Outcome;

TEST(LossScalerTest, DisabledScalerNeverScalesOrSkips) {
  DynamicLossScaler s(false);
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_EQ(s.update(false), Outcome::kStep);
  EXPECT_EQ(s.scale(), 1.0);
}

TEST(LossScalerTest, OverflowSkipsTheStepAndHalvesTheScale) {
  DynamicLossScaler s(true);
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.update(false), Outcome::kSkip);
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_EQ(s.update(true), Outcome::kStep);
  EXPECT_EQ(s.good_steps(), 1);
  EXPECT_EQ(s.update(false), Outcome::kSkip);
  EXPECT_EQ(s.good_steps(), 0) << "an overflow restarts the count of good steps";
}

TEST(LossScalerTest, ScaleNeverDropsBelowOne) {
  DynamicLossScaler s(true, 2.0);
  s.update(false);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 1.0);
}

TEST(LossScalerTest, GrowsAfterTheGrowthIntervalOfGoodSteps) {
  DynamicLossScaler s(true, 1024.0);
  for (std::int64_t i = 1; i < DynamicLossScaler::kGrowthInterval; ++i) ASSERT_EQ(s.update(true), Outcome::kStep);
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_EQ(s.update(true), Outcome::kStep);
  EXPECT_EQ(s.scale(), 2048.0);
  EXPECT_EQ(s.good_steps(), 0);
}

TEST(LossScalerTest, ResumesFromACheckpointedState) {
  DynamicLossScaler s(true, 4096.0, DynamicLossScaler::kGrowthInterval - 1);
  s.update(true);
  EXPECT_EQ(s.scale(), 8192.0);
}

}  // namespace
}  // namespace tailor::runner
