// linear_cross_entropy_sum against the materialised head and loss
// (torch::linear, then cross_entropy_sum): the same loss and the same
// gradients for the hidden states and the head, over several slices, with
// ignored rows, a frozen or trained head, Gemma 2's soft cap, on the fused
// CPU kernel and the ATen path; and the memory it saves at 8k tokens and a
// 128k vocabulary, read from the tracking allocator.
#include "runner/torch/linear_cross_entropy.h"

#include <gtest/gtest.h>

#include "runner/torch/cross_entropy.h"
#include "runner/torch/tracking_allocator.h"

namespace tailor::runner {
namespace {

using torch::Tensor;

struct Result {
  double loss;
  Tensor grad_hidden, grad_weight;  // fp64; grad_weight undefined for a frozen head
};

// Small slices, so that a small batch spans several.
constexpr std::int64_t kFusedSlice = 1 << 12;

Result run(bool fused, const Tensor& hidden_in, const Tensor& weight_in, const Tensor& targets, bool train_head,
           double cap = 0) {
  Tensor hidden = hidden_in.detach().clone().requires_grad_(true);
  Tensor weight = weight_in.detach().clone().requires_grad_(train_head);
  Tensor loss = fused ? linear_cross_entropy_sum(hidden, weight, targets, cap, kFusedSlice)
                      : cross_entropy_sum(torch::linear(hidden, weight), targets, kFusedSlice, cap);
  EXPECT_EQ(loss.scalar_type(), torch::kFloat32);
  (loss * 0.25).backward();
  Result r{loss.item<double>(), hidden.grad().to(torch::kFloat64), Tensor()};
  EXPECT_EQ(hidden.grad().scalar_type(), hidden.scalar_type());
  if (train_head) r.grad_weight = weight.grad().to(torch::kFloat64);
  return r;
}

struct Batch {
  Tensor hidden, weight, targets;
};

// (2, T, C) hidden states, a (V, C) head, a quarter of the targets ignored;
// rows enough for several slices.
Batch fused_batch(std::int64_t vocab, torch::ScalarType dtype, torch::Device device = torch::kCPU) {
  torch::manual_seed(5);
  const std::int64_t c = 24, t = 3 * (kFusedSlice / vocab) + 5;
  Batch b;
  b.hidden = torch::randn({2, t, c}, torch::kFloat64).to(device, dtype);
  b.weight = (torch::randn({vocab, c}, torch::kFloat64) * 0.5).to(device, dtype);
  b.targets = torch::randint(0, vocab, {2, t}, torch::kLong);
  b.targets.masked_fill_(torch::rand({2, t}) < 0.25, -100);
  b.targets = b.targets.to(device);
  return b;
}

double max_diff(const Tensor& a, const Tensor& b) { return (a - b).abs().max().item<double>(); }

void expect_equal(const Result& a, const Result& b, double tol, const std::string& what) {
  EXPECT_NEAR(a.loss / b.loss, 1.0, tol) << what;
  EXPECT_LT(max_diff(a.grad_hidden, b.grad_hidden), tol) << what;
  if (b.grad_weight.defined()) {
    EXPECT_LT(max_diff(a.grad_weight, b.grad_weight), tol) << what;
  }
}

TEST(LinearCrossEntropyTest, EqualsTheMaterialisedHeadAndLossInFp32AndFp64) {
  // fp32: the fused CPU kernel a slice at a time; fp64: the ATen path.
  for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
    Batch b = fused_batch(300, dtype);
    for (const bool train_head : {false, true}) {
      const std::string what = std::string(c10::toString(dtype)) + (train_head ? ", trained head" : ", frozen head");
      expect_equal(run(true, b.hidden, b.weight, b.targets, train_head),
                   run(false, b.hidden, b.weight, b.targets, train_head), 1e-5, what);
    }
  }
}

TEST(LinearCrossEntropyTest, IgnoredRowsGetNoGradientAndNoProjection) {
  Batch b = fused_batch(300, torch::kFloat32);
  const Result r = run(true, b.hidden, b.weight, b.targets, true);
  const Tensor ignored = (b.targets == -100).unsqueeze(-1).expand_as(r.grad_hidden);
  EXPECT_EQ(r.grad_hidden.masked_select(ignored).abs().max().item<double>(), 0.0);
  // Every row ignored: a zero loss, zero gradients, nothing projected.
  Tensor none = torch::full_like(b.targets, -100);
  const Result z = run(true, b.hidden, b.weight, none, true);
  EXPECT_EQ(z.loss, 0.0);
  EXPECT_EQ(z.grad_hidden.abs().max().item<double>(), 0.0);
  EXPECT_EQ(z.grad_weight.abs().max().item<double>(), 0.0);
}

TEST(LinearCrossEntropyTest, SoftCappedHeadsGiveTheLossAndGradientsOfTheCappedLogits) {
  for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
    Batch b = fused_batch(300, dtype);
    b.hidden.mul_(4);  // logits of about +-10 against a cap of 5: tanh bends them
    for (const bool train_head : {false, true}) {
      const Result capped = run(true, b.hidden, b.weight, b.targets, train_head, 5.0);
      expect_equal(capped, run(false, b.hidden, b.weight, b.targets, train_head, 5.0), 1e-5,
                   c10::toString(dtype));
      EXPECT_GT(std::abs(capped.loss / run(false, b.hidden, b.weight, b.targets, false).loss - 1.0), 1e-2)
          << "the cap must matter here";
    }
  }
}

TEST(LinearCrossEntropyTest, HalfPrecisionFollowsFp32) {
  // bf16 on the fused CPU kernel, fp16 on the ATen path with the gradient
  // computed in backward (fp16 never takes the early gradient).
  Batch b = fused_batch(300, torch::kFloat32);
  const Result exact = run(true, b.hidden, b.weight, b.targets, true);
  for (auto dtype : {torch::kBFloat16, torch::kFloat16}) {
    for (const bool train_head : {false, true}) {
      const Result half = run(true, b.hidden.to(dtype), b.weight.to(dtype), b.targets, train_head);
      EXPECT_NEAR(half.loss / exact.loss, 1.0, 1e-2) << dtype;
      EXPECT_LT(max_diff(half.grad_hidden, exact.grad_hidden), 5e-2) << dtype;
      if (train_head) {
        EXPECT_LT(max_diff(half.grad_weight, exact.grad_weight), 0.25) << dtype;
      }
    }
  }
}

TEST(LinearCrossEntropyTest, WithoutGradientsOnlyTheLossIsComputed) {
  Batch b = fused_batch(300, torch::kFloat32);
  const double with = run(true, b.hidden, b.weight, b.targets, false).loss;
  torch::NoGradGuard no_grad;
  const Tensor loss = linear_cross_entropy_sum(b.hidden, b.weight, b.targets, 0, kFusedSlice);
  EXPECT_FALSE(loss.requires_grad());
  EXPECT_EQ(loss.item<double>(), with);
}

TEST(LinearCrossEntropyTest, ATargetOutsideTheVocabularyIsAnError) {
  const Tensor h = torch::randn({2, 4}), w = torch::randn({8, 4});
  EXPECT_THROW(linear_cross_entropy_sum(h, w, torch::tensor({1, 8}, torch::kLong)), c10::Error);
  EXPECT_THROW(linear_cross_entropy_sum(h, w, torch::tensor({-1, 0}, torch::kLong)), c10::Error);
  EXPECT_THROW(linear_cross_entropy_sum(h, torch::randn({8, 5}), torch::tensor({1, 0}, torch::kLong)), c10::Error);
}

// At 2k tokens with a 128k vocabulary (Llama 3's) the materialised head
// keeps fp32 logits and their gradient, 2 GiB; the fused one a slice of
// them and the rows' hidden state (the slice does not grow with the
// tokens, so 8k tokens, 8 GiB against the same slice, prove no more). fp32 because this CPU's bf16 matmuls
// run at a tenth of its fp32 speed; a narrow hidden width keeps them
// cheap, and the logits' bytes do not depend on it.
TEST(LinearCrossEntropyTest, AtTwoThousandTokensAndA128kVocabularyThePeakIsFarLower) {
  TrackingAllocator& alloc = TrackingAllocator::install();
  torch::manual_seed(9);
  const std::int64_t t = 2048, v = 128256, c = 16;
  const Tensor weight = torch::randn({v, c}) * 0.1;
  const Tensor targets = torch::randint(0, v, {1, t}, torch::kLong);
  const Tensor states = torch::randn({1, t, c});
  std::int64_t peak[2] = {0, 0};
  double loss[2] = {0, 0};
  for (const bool fused : {true, false}) {
    Tensor hidden = states.clone().requires_grad_(true);
    const std::int64_t before = alloc.current_bytes();
    alloc.reset_peak();
    Tensor l = fused ? linear_cross_entropy_sum(hidden, weight, targets)
                     : cross_entropy_sum(torch::linear(hidden, weight), targets);
    l.backward();
    peak[fused] = alloc.peak_bytes() - before;
    loss[fused] = l.item<double>();
  }
  const double logits_bytes = 4.0 * t * v;
  EXPECT_GT(static_cast<double>(peak[0]), 2 * logits_bytes) << "the materialised head keeps logits and gradient";
  EXPECT_LT(static_cast<double>(peak[1]), 0.75 * static_cast<double>(peak[0]));
  // One 2^24-logit slice and its gradient (128 MiB), and the rows' states.
  EXPECT_LT(peak[1], std::int64_t{140} << 20) << peak[1];
  EXPECT_NEAR(loss[1] / loss[0], 1.0, 1e-5);
  std::printf("peak at %lld tokens, vocabulary %lld: materialised %.1f MiB, fused %.1f MiB\n",
              static_cast<long long>(t), static_cast<long long>(v), peak[0] / 1048576.0, peak[1] / 1048576.0);
}

TEST(LinearCrossEntropyTest, OnAGpuEqualsTheCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  const torch::Device gpu(torch::kCUDA, 0);
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    Batch b = fused_batch(32000, dtype);
    for (const bool train_head : {false, true}) {
      const Result cpu = run(true, b.hidden, b.weight, b.targets, train_head);
      const Result cuda = run(true, b.hidden.to(gpu), b.weight.to(gpu), b.targets.to(gpu), train_head);
      const double tol = dtype == torch::kFloat32 ? 1e-4 : 5e-2;
      EXPECT_NEAR(cuda.loss / cpu.loss, 1.0, dtype == torch::kFloat32 ? 1e-5 : 1e-2) << dtype;
      EXPECT_LT(max_diff(cuda.grad_hidden.cpu(), cpu.grad_hidden), tol) << dtype;
      if (train_head) {
        EXPECT_LT(max_diff(cuda.grad_weight.cpu(), cpu.grad_weight), tol * 10) << dtype;
      }
    }
  }
}

}  // namespace
}  // namespace tailor::runner
