#include "dsl/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

namespace tailor::dsl {
namespace {

// head_dim 8 and theta 10000 give inverse frequencies 1, 0.1, 0.01, 0.001:
// wavelengths 2 pi / inv of about 6.3, 63, 628 and 6283 positions.
ModelArch eight_wide() {
  ModelArch a;
  a.hidden = 32;
  a.heads = 4;
  a.rope_theta = 10000.0;
  return a;
}

TEST(RopeTest, UnscaledFrequenciesAreThetaToTheMinusTwoIOverD) {
  const std::vector<double> inv = rope_inverse_frequencies(eight_wide());
  ASSERT_EQ(inv.size(), 4u);
  EXPECT_DOUBLE_EQ(inv[0], 1.0);
  EXPECT_NEAR(inv[1], 0.1, 1e-15);
  EXPECT_NEAR(inv[2], 0.01, 1e-16);
  EXPECT_NEAR(inv[3], 0.001, 1e-17);
}

TEST(RopeTest, LinearScalingDividesEveryFrequency) {
  ModelArch a = eight_wide();
  a.rope_scaling = {.type = RopeScalingType::kLinear, .factor = 4.0};
  const std::vector<double> plain = rope_inverse_frequencies(eight_wide());
  const std::vector<double> inv = rope_inverse_frequencies(a);
  for (std::size_t i = 0; i < inv.size(); ++i) EXPECT_DOUBLE_EQ(inv[i], plain[i] / 4.0) << i;
}

// With a pretraining context of 1024, low 1 and high 4: wavelengths under
// 256 are kept, over 1024 divided by 8, and the 628-position one (between)
// interpolated with smooth = (1024 / 628.3 - 1) / (4 - 1) = 0.2099.
TEST(RopeTest, Llama3KeepsHighFrequenciesStretchesLowOnesAndRampsBetween) {
  ModelArch a = eight_wide();
  a.rope_scaling = {.type = RopeScalingType::kLlama3,
                    .factor = 8.0,
                    .low_freq_factor = 1.0,
                    .high_freq_factor = 4.0,
                    .original_max_seq_len = 1024};
  const std::vector<double> inv = rope_inverse_frequencies(a);
  ASSERT_EQ(inv.size(), 4u);
  EXPECT_DOUBLE_EQ(inv[0], 1.0);
  EXPECT_NEAR(inv[1], 0.1, 1e-15);
  EXPECT_NEAR(inv[2], 0.2099 * 0.01 + (1 - 0.2099) * 0.01 / 8, 1e-6);
  EXPECT_NEAR(inv[3], 0.001 / 8, 1e-18);
}

// The ramp meets both ends: just inside the kept band the frequency is
// (almost) unchanged, just inside the stretched band (almost) divided.
TEST(RopeTest, Llama3RampIsContinuousAtBothEnds) {
  ModelArch a = eight_wide();
  const double inv = 0.01;
  const double wavelength = 2 * std::numbers::pi / inv;
  a.rope_scaling = {.type = RopeScalingType::kLlama3, .factor = 8.0, .low_freq_factor = 1.0, .high_freq_factor = 4.0};
  a.rope_scaling.original_max_seq_len = static_cast<std::int64_t>(std::floor(wavelength * 4));  // high band edge
  EXPECT_NEAR(rope_inverse_frequencies(a)[2], inv, inv * 1e-3);
  a.rope_scaling.original_max_seq_len = static_cast<std::int64_t>(std::ceil(wavelength));  // low band edge
  EXPECT_NEAR(rope_inverse_frequencies(a)[2], inv / 8, inv * 1e-3);
}

TEST(RopeTest, ProblemsNameTheNumberThatIsWrong) {
  EXPECT_EQ(rope_scaling_problem({}), "");
  EXPECT_EQ(rope_scaling_problem({.type = RopeScalingType::kLinear, .factor = 0.5}), "factor must be at least 1");
  RopeScaling r{.type = RopeScalingType::kLlama3, .factor = 8.0};
  EXPECT_NE(rope_scaling_problem(r).find("original_max_seq_len"), std::string::npos);
  r.original_max_seq_len = 8192;
  EXPECT_EQ(rope_scaling_problem(r), "");
  r.high_freq_factor = 1.0;
  EXPECT_EQ(rope_scaling_problem(r), "high_freq_factor must exceed low_freq_factor");
}

TEST(RopeTest, TypeNamesRoundTrip) {
  for (RopeScalingType t : {RopeScalingType::kNone, RopeScalingType::kLinear, RopeScalingType::kLlama3}) {
    RopeScalingType back = RopeScalingType::kNone;
    ASSERT_TRUE(rope_scaling_type_from(to_string(t), back));
    EXPECT_EQ(back, t);
  }
  RopeScalingType out;
  EXPECT_FALSE(rope_scaling_type_from("yarn", out));
}

}  // namespace
}  // namespace tailor::dsl
