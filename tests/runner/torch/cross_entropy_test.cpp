// cross_entropy_sum against LibTorch's own cross-entropy: the fused CPU
// kernel and the sliced ATen path (fp64/fp16 on the CPU, any dtype on a GPU)
// give the same loss and gradient, over several slices and with ignored
// targets.
#include "runner/torch/cross_entropy.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tailor::runner {
namespace {

using torch::Tensor;

struct LossAndGrad {
  double loss;
  Tensor grad;
};

// Small slices, so that a small batch spans several.
constexpr std::int64_t kSlice = 1 << 16;

LossAndGrad ours(const Tensor& logits_in, const Tensor& targets, double softcap = 0) {
  Tensor logits = logits_in.detach().clone().requires_grad_(true);
  Tensor loss = cross_entropy_sum(logits, targets, kSlice, softcap);
  EXPECT_EQ(loss.scalar_type(), torch::kFloat32);
  (loss * 0.5).backward();
  EXPECT_EQ(logits.grad().scalar_type(), logits.scalar_type());
  return {loss.item<double>(), logits.grad().to(torch::kFloat64)};
}

LossAndGrad reference(const Tensor& logits_in, const Tensor& targets, double softcap = 0) {
  Tensor logits = logits_in.detach().to(torch::kFloat64).requires_grad_(true);
  const Tensor z = softcap > 0 ? torch::tanh(logits / softcap) * softcap : logits;
  Tensor loss = torch::nn::functional::cross_entropy(
      z.reshape({-1, z.size(-1)}), targets.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum).ignore_index(-100));
  (loss * 0.5).backward();
  return {loss.item<double>(), logits.grad()};
}

// Rows enough for three slices, a quarter of them ignored.
std::pair<Tensor, Tensor> batch(std::int64_t vocab, torch::ScalarType dtype, torch::Device device) {
  torch::manual_seed(3);
  const std::int64_t rows = 2 * (kSlice / vocab) + 7;
  Tensor logits = (torch::randn({2, rows / 2 + 1, vocab}, torch::kFloat64) * 3).to(device, dtype);
  Tensor targets = torch::randint(0, vocab, {2, rows / 2 + 1}, torch::kLong);
  targets.masked_fill_(torch::rand({2, rows / 2 + 1}) < 0.25, -100);
  return {logits, targets.to(device)};
}

TEST(CrossEntropyTest, TheSlicedPathEqualsLibTorchsCrossEntropy) {
  for (auto dtype : {torch::kFloat64, torch::kFloat16}) {
    auto [logits, targets] = batch(5000, dtype, torch::kCPU);
    const LossAndGrad a = ours(logits, targets), b = reference(logits, targets);
    // The loss is computed in fp32 whatever the logits' dtype.
    EXPECT_NEAR(a.loss / b.loss, 1.0, dtype == torch::kFloat64 ? 1e-6 : 1e-3) << dtype;
    EXPECT_LT((a.grad - b.grad).abs().max().item<double>(), dtype == torch::kFloat64 ? 1e-5 : 2e-3) << dtype;
    // Ignored rows get no gradient.
    const Tensor ignored = (targets == -100).unsqueeze(-1).expand_as(a.grad);
    EXPECT_EQ(a.grad.masked_select(ignored).abs().max().item<double>(), 0.0);
  }
}

TEST(CrossEntropyTest, TheFusedCpuKernelEqualsLibTorchsCrossEntropy) {
  auto [logits, targets] = batch(5000, torch::kFloat32, torch::kCPU);
  const LossAndGrad a = ours(logits, targets), b = reference(logits, targets);
  EXPECT_NEAR(a.loss / b.loss, 1.0, 1e-5);
  EXPECT_LT((a.grad - b.grad).abs().max().item<double>(), 1e-6);
}

TEST(CrossEntropyTest, SoftCappedLogitsGiveTheLossAndGradientOfTheCappedLogits) {
  // Gemma 2's final cap, 30, on logits of about +-10: tanh bends them.
  for (auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat64}) {
    auto [logits, targets] = batch(5000, dtype, torch::kCPU);
    logits.mul_(3);
    const Tensor before = logits.clone();
    const LossAndGrad a = ours(logits, targets, 30.0), b = reference(logits, targets, 30.0);
    const LossAndGrad uncapped = reference(logits, targets);
    const bool half = dtype == torch::kBFloat16;
    EXPECT_NEAR(a.loss / b.loss, 1.0, half ? 1e-3 : 1e-6) << dtype;
    EXPECT_GT(std::abs(uncapped.loss / b.loss - 1.0), 1e-2) << "the cap must matter here";
    EXPECT_LT((a.grad - b.grad).abs().max().item<double>(), half ? 1e-2 : 1e-6) << dtype;
    EXPECT_TRUE(torch::equal(logits, before)) << "the logits are left as they were";
  }
}

TEST(CrossEntropyTest, ATargetOutsideTheVocabularyIsAnError) {
  const Tensor logits = torch::randn({2, 8}, torch::kFloat64);
  EXPECT_THROW(cross_entropy_sum(logits, torch::tensor({1, 8}, torch::kLong)), c10::Error);
  EXPECT_THROW(cross_entropy_sum(logits, torch::tensor({-1, 0}, torch::kLong)), c10::Error);
}

TEST(CrossEntropyTest, OnAGpuTheSlicedPathEqualsTheCpuKernel) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  for (auto dtype : {torch::kBFloat16, torch::kFloat32}) {
    auto [logits, targets] = batch(32000, dtype, torch::Device(torch::kCUDA, 0));
    const LossAndGrad gpu = ours(logits, targets);
    const LossAndGrad cpu = ours(logits.cpu(), targets.cpu());
    EXPECT_NEAR(gpu.loss / cpu.loss, 1.0, 1e-5) << dtype;
    EXPECT_LT((gpu.grad.cpu() - cpu.grad).abs().max().item<double>(), dtype == torch::kFloat32 ? 1e-5 : 1e-2) << dtype;
  }
}

}  // namespace
}  // namespace tailor::runner
