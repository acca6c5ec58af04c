// Converting a checkpoint's optimizer state between AdamW and 8-bit AdamW:
// what a resumed optimizer of the other kind loads is what the first kept.
// Lion's update against the paper's algorithm written out element by
// element, its one state, and its checkpoint.
#include "runner/torch/optimizer.h"

#include <gtest/gtest.h>

namespace tailor::runner {
namespace {

// A large matrix (8-bit moments) and a small vector (fp32 moments under
// both), each stepped twice with random gradients.
std::vector<torch::Tensor> stepped(TrainingOptimizer& opt, std::vector<torch::Tensor>& params) {
  for (int step = 0; step < 2; ++step) {
    for (torch::Tensor& p : params) p.mutable_grad() = torch::randn(p.sizes());
    opt.step(1e-3, 1.0);
  }
  return opt.state_tensors();
}

std::vector<torch::Tensor> fresh_params() {
  torch::manual_seed(3);
  return {torch::randn({64, 128}).requires_grad_(true), torch::randn({16}).requires_grad_(true)};
}

TEST(OptimizerTest, AdamwStatesConvertToEightBitAsItWouldKeepThem) {
  std::vector<torch::Tensor> params = fresh_params();
  TrainingOptimizer adamw(params, dsl::Precision::kFp32, dsl::Optimizer::kAdamw, 0.0);
  const std::vector<torch::Tensor> states = stepped(adamw, params);
  auto converted = convert_adamw_states(states, params, dsl::Optimizer::kAdamw8bit, dsl::Precision::kFp32);
  ASSERT_TRUE(converted.has_value());
  ASSERT_EQ(converted->size(), 10u);
  std::vector<torch::Tensor> fresh = fresh_params();
  TrainingOptimizer eight(fresh, dsl::Precision::kFp32, dsl::Optimizer::kAdamw8bit, 0.0);
  ASSERT_TRUE(eight.load_state_tensors(*converted, 2));
  // The matrix's moments, read back, within one code of the map per block.
  const std::vector<torch::Tensor> back = *convert_adamw_states(eight.state_tensors(), params,
                                                                dsl::Optimizer::kAdamw, dsl::Precision::kFp32);
  for (std::size_t k : {1u, 2u}) {
    const torch::Tensor err = (back[k] - states[k]).abs().max();
    EXPECT_LT(err.item<double>(), 0.05 * states[k].abs().max().item<double>()) << "moment " << k;
    EXPECT_GT(err.item<double>(), 0.0) << "quantised, not copied";
  }
  // The vector's fp32 moments carry over exactly.
  EXPECT_TRUE(torch::equal(back[4], states[4]));
  EXPECT_TRUE(torch::equal(back[5], states[5]));
}

TEST(OptimizerTest, EightBitStatesConvertToAdamwExactly) {
  std::vector<torch::Tensor> params = fresh_params();
  TrainingOptimizer eight(params, dsl::Precision::kFp32, dsl::Optimizer::kAdamw8bit, 0.0);
  const std::vector<torch::Tensor> states = stepped(eight, params);
  auto converted = convert_adamw_states(states, params, dsl::Optimizer::kAdamw, dsl::Precision::kFp32);
  ASSERT_TRUE(converted.has_value());
  ASSERT_EQ(converted->size(), 6u);
  std::vector<torch::Tensor> fresh = fresh_params();
  TrainingOptimizer adamw(fresh, dsl::Precision::kFp32, dsl::Optimizer::kAdamw, 0.0);
  ASSERT_TRUE(adamw.load_state_tensors(*converted, 2));
  // The matrix's moments are the values the 8-bit optimizer stood for.
  const std::vector<torch::Tensor> loaded = adamw.state_tensors();
  for (std::size_t k : {1u, 2u}) {
    const Blockwise8 q{states[k], states[k + 2], kAdamw8bitBlockSize, /*is_signed=*/k == 1};
    EXPECT_TRUE(torch::equal(loaded[k], dequantize_blockwise8(q).view(params[0].sizes()))) << "moment " << k;
  }
  // The vector's fp32 moments carry over as they were.
  EXPECT_TRUE(torch::equal(loaded[4], states[6]));
  EXPECT_TRUE(torch::equal(loaded[5], states[7]));
}

TEST(OptimizerTest, StatesOfAnotherKindOrShapeAreNotConverted) {
  std::vector<torch::Tensor> params = fresh_params();
  TrainingOptimizer sgd(params, dsl::Precision::kFp32, dsl::Optimizer::kSgd, 0.0);
  const auto states = stepped(sgd, params);
  EXPECT_FALSE(convert_adamw_states(states, params, dsl::Optimizer::kAdamw8bit, dsl::Precision::kFp32));
  TrainingOptimizer adamw(params, dsl::Precision::kFp32, dsl::Optimizer::kAdamw, 0.0);
  const auto adamw_states = adamw.state_tensors();
  EXPECT_FALSE(convert_adamw_states(adamw_states, params, dsl::Optimizer::kAdamw, dsl::Precision::kFp32));
  EXPECT_FALSE(convert_adamw_states(adamw_states, {params[0]}, dsl::Optimizer::kAdamw8bit, dsl::Precision::kFp32));
}

// Chen et al. 2023, algorithm 2, one element at a time: the reference the
// runner's tensor form must equal.
void lion_reference(std::vector<float>& theta, std::vector<float>& m, const std::vector<float>& g, double lr,
                    double wd) {
  for (std::size_t i = 0; i < theta.size(); ++i) {
    const double c = kLionBeta1 * m[i] + (1 - kLionBeta1) * g[i];
    const double sign = c > 0 ? 1.0 : c < 0 ? -1.0 : 0.0;
    theta[i] = static_cast<float>(theta[i] - lr * (sign + wd * theta[i]));
    m[i] = static_cast<float>(kLionBeta2 * m[i] + (1 - kLionBeta2) * g[i]);
  }
}

std::vector<float> values(const torch::Tensor& t) {
  const torch::Tensor c = t.detach().to(torch::kFloat32).contiguous().view(-1);
  return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

TEST(OptimizerTest, LionStepsAsThePapersAlgorithmWithOneStateAndResumesFromItsCheckpoint) {
  torch::manual_seed(5);
  std::vector<torch::Tensor> params = {torch::randn({32, 48}).requires_grad_(true)};
  constexpr double kLr = 3e-4, kWd = 0.1;
  TrainingOptimizer lion(params, dsl::Precision::kFp32, dsl::Optimizer::kLion, kWd);
  std::vector<float> theta = values(params[0]), m(theta.size(), 0.0f);
  for (int step = 0; step < 3; ++step) {
    params[0].mutable_grad() = torch::randn(params[0].sizes());
    lion_reference(theta, m, values(params[0].grad()), kLr, kWd);
    lion.step(kLr, 1.0);
  }
  const std::vector<float> got = values(params[0]);
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], theta[i], 1e-6) << i;
  // One momentum: half of AdamW's states.
  EXPECT_EQ(lion.state_bytes(), params[0].numel() * 4);
  const std::vector<torch::Tensor> states = lion.state_tensors();
  ASSERT_EQ(states.size(), 3u);
  EXPECT_FALSE(states[2].defined());
  const std::vector<float> kept = values(states[1]);
  for (std::size_t i = 0; i < kept.size(); ++i) ASSERT_NEAR(kept[i], m[i], 1e-6) << i;
  // Resumed from those states, the next step is the one the first would take.
  std::vector<torch::Tensor> copy = {params[0].detach().clone().requires_grad_(true)};
  TrainingOptimizer resumed(copy, dsl::Precision::kFp32, dsl::Optimizer::kLion, kWd);
  ASSERT_TRUE(resumed.load_state_tensors(states, 3));
  const torch::Tensor g = torch::randn(params[0].sizes());
  params[0].mutable_grad() = g.clone();
  copy[0].mutable_grad() = g.clone();
  lion.step(kLr, 1.0);
  resumed.step(kLr, 1.0);
  EXPECT_TRUE(torch::equal(params[0], copy[0]));
}

TEST(OptimizerTest, LionUnderMixedPrecisionUpdatesTheMasterCopy) {
  torch::manual_seed(6);
  std::vector<torch::Tensor> params = {torch::randn({16, 16}).to(torch::kBFloat16).requires_grad_(true)};
  TrainingOptimizer lion(params, dsl::Precision::kBf16, dsl::Optimizer::kLion, 0.0);
  std::vector<float> theta = values(params[0]), m(theta.size(), 0.0f);
  for (int step = 0; step < 2; ++step) {
    params[0].mutable_grad() = torch::randn(params[0].sizes()).to(torch::kBFloat16);
    lion_reference(theta, m, values(params[0].grad()), 1e-2, 0.0);
    lion.step(1e-2, 1.0);
  }
  // The fp32 master holds the reference; the bf16 parameter is its rounding.
  const std::vector<torch::Tensor> states = lion.state_tensors();
  const std::vector<float> master = values(states[0]);
  for (std::size_t i = 0; i < master.size(); ++i) ASSERT_NEAR(master[i], theta[i], 1e-6) << i;
  EXPECT_TRUE(torch::equal(params[0], states[0].to(torch::kBFloat16)));
  EXPECT_EQ(lion.master_bytes(), params[0].numel() * 4);
}

}  // namespace
}  // namespace tailor::runner
