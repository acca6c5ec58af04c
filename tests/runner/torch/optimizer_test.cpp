// Converting a checkpoint's optimizer state between AdamW and 8-bit AdamW:
// what a resumed optimizer of the other kind loads is what the first kept.
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

}  // namespace
}  // namespace tailor::runner
