#include "runner/torch/half_matmul.h"

#include <gtest/gtest.h>

#include <functional>

#include "platform/hardware_detect.h"
#include "runner/torch/tracking_allocator.h"

namespace tailor::runner {
namespace {

using torch::Tensor;

// The largest error of `got` against the exact fp32 `want`, in units of
// the largest |want|: one rounding to bf16 (8 significant bits) is within
// 2^-8 of it; a lost or repeated block is far outside.
double relative_error(const Tensor& got, const Tensor& want) {
  return (got.to(torch::kFloat32) - want).abs().max().item<double>() / want.abs().max().item<double>();
}

// 700 x 600 x 530: two blocks of 512 in every dimension, the second partial.
TEST(HalfMatmulTest, TheProductIsTheFp32ProductRoundedOnceAcrossBlocksStridesBiasAndAccumulation) {
  torch::manual_seed(1);
  const Tensor a = torch::randn({700, 600}).to(torch::kBFloat16);
  const Tensor bt = torch::randn({530, 600}).to(torch::kBFloat16);
  const Tensor b = bt.t();  // a transposed view, as linear's weight is read
  const Tensor exact = a.to(torch::kFloat32).mm(b.to(torch::kFloat32));

  Tensor out = torch::empty({700, 530}, torch::kBFloat16);
  matmul_through_fp32(out, a, b);
  EXPECT_LT(relative_error(out, exact), 1.0 / 256);
  // Rounded once: equal to the exact product's rounding but where the fp32
  // sums' order moves a value across a rounding boundary.
  EXPECT_LT((out != exact.to(torch::kBFloat16)).to(torch::kFloat32).mean().item<double>(), 1e-3);

  const Tensor bias = torch::randn({530}).to(torch::kBFloat16);
  Tensor with_bias = torch::empty({700, 530}, torch::kBFloat16);
  matmul_through_fp32(with_bias, a, b, /*accumulate=*/false, bias);
  EXPECT_LT(relative_error(with_bias, exact + bias.to(torch::kFloat32)), 1.0 / 256);

  const Tensor start = torch::randn({700, 530}).mul(30).to(torch::kBFloat16);
  Tensor accumulated = start.clone();
  matmul_through_fp32(accumulated, a, b, /*accumulate=*/true);
  EXPECT_LT(relative_error(accumulated, exact + start.to(torch::kFloat32)), 1.0 / 256);

  // Into a strided view (a slice of a wider tensor), leaving the rest.
  Tensor wide = torch::zeros({700, 600}, torch::kBFloat16);
  Tensor part = wide.narrow(1, 35, 530);
  matmul_through_fp32(part, a, b);
  EXPECT_TRUE(torch::equal(part, out));
  EXPECT_EQ(wide.narrow(1, 0, 35).abs().max().item<float>(), 0.0f);

  Tensor empty_inner = torch::full({3, 4}, 7.0, torch::kBFloat16);
  matmul_through_fp32(empty_inner, torch::empty({3, 0}, torch::kBFloat16), torch::empty({0, 4}, torch::kBFloat16));
  EXPECT_EQ(empty_inner.abs().max().item<float>(), 0.0f);
}

TEST(HalfMatmulTest, TheLinearLayerGivesLibTorchsOutputsAndGradients) {
  torch::manual_seed(2);
  const Tensor x0 = torch::randn({3, 37, 600}).to(torch::kBFloat16);
  const Tensor w0 = torch::randn({530, 600}).mul(0.05).to(torch::kBFloat16);
  const Tensor b0 = torch::randn({530}).to(torch::kBFloat16);
  const Tensor gy = torch::randn({3, 37, 530}).to(torch::kBFloat16);

  Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true), b = b0.clone().requires_grad_(true);
  const Tensor y = linear_through_fp32(x, w, b);
  y.backward(gy);
  // The same values in fp32 through LibTorch's linear: the exact figures.
  Tensor xr = x0.to(torch::kFloat32).requires_grad_(true), wr = w0.to(torch::kFloat32).requires_grad_(true),
         br = b0.to(torch::kFloat32).requires_grad_(true);
  const Tensor yr = torch::linear(xr, wr, br);
  yr.backward(gy.to(torch::kFloat32));

  EXPECT_EQ(y.sizes(), yr.sizes());
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  EXPECT_LT(relative_error(y, yr), 1.0 / 256);
  EXPECT_LT(relative_error(x.grad(), xr.grad()), 1.0 / 256);
  EXPECT_LT(relative_error(w.grad(), wr.grad()), 1.0 / 256);
  EXPECT_LT(relative_error(b.grad(), br.grad()), 1.0 / 256);

  // Without a bias, through the function without one.
  Tensor x2 = x0.clone().requires_grad_(true);
  linear_through_fp32(x2, w0).backward(gy);
  const Tensor xr2 = x0.to(torch::kFloat32).requires_grad_(true);
  torch::linear(xr2, w0.to(torch::kFloat32)).backward(gy.to(torch::kFloat32));
  EXPECT_LT(relative_error(x2.grad(), xr2.grad()), 1.0 / 256);
}

// Attention's products: (batch, heads, m, k) @ (batch, heads, k, n), the
// right operand a transposed view as the scores read the keys.
TEST(HalfMatmulTest, TheBatchedProductGivesLibTorchsOutputsAndGradients) {
  torch::manual_seed(5);
  const Tensor a0 = torch::randn({2, 3, 40, 16}).to(torch::kBFloat16);
  const Tensor k0 = torch::randn({2, 3, 40, 16}).to(torch::kBFloat16);
  const Tensor gy = torch::randn({2, 3, 40, 40}).to(torch::kBFloat16);
  Tensor a = a0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true);
  const Tensor y = batched_matmul(a, k.transpose(-2, -1));
  y.backward(gy);
  Tensor ar = a0.to(torch::kFloat32).requires_grad_(true), kr = k0.to(torch::kFloat32).requires_grad_(true);
  const Tensor yr = torch::matmul(ar, kr.transpose(-2, -1));
  yr.backward(gy.to(torch::kFloat32));
  EXPECT_EQ(y.sizes(), yr.sizes());
  EXPECT_LT(relative_error(y, yr), 1.0 / 256);
  EXPECT_LT(relative_error(a.grad(), ar.grad()), 1.0 / 256);
  EXPECT_LT(relative_error(k.grad(), kr.grad()), 1.0 / 256);
  // Its output is a tensor of its own: the scores are scaled in place.
  EXPECT_NO_THROW(batched_matmul(a, k.transpose(-2, -1)).mul_(0.5));
}

// What backward keeps, as LibTorch's linear keeps it: the input only for a
// trained weight (a frozen base under LoRA keeps none), the weight only for
// an input that needs its gradient.
TEST(HalfMatmulTest, AFrozenWeightKeepsNoInputAndAFrozenInputNoWeight) {
  torch::manual_seed(3);
  const Tensor leaf = torch::randn({8, 64}).to(torch::kBFloat16).requires_grad_(true);
  const Tensor frozen_w = torch::randn({32, 64}).to(torch::kBFloat16);
  const auto kept = [](const std::function<Tensor(Tensor)>& forward, Tensor operand) {
    const c10::weak_intrusive_ptr<c10::TensorImpl> watch(operand.getIntrusivePtr());
    const Tensor y = forward(std::move(operand));
    return !watch.expired();  // y's graph still holds it
  };
  EXPECT_FALSE(kept([&](Tensor x) { return linear_through_fp32(x, frozen_w); }, leaf * 2));
  const Tensor trained_w = torch::randn({32, 64}).to(torch::kBFloat16).requires_grad_(true);
  EXPECT_TRUE(kept([&](Tensor x) { return linear_through_fp32(x, trained_w); }, leaf * 2));
  const Tensor frozen_x = torch::randn({8, 64}).to(torch::kBFloat16);
  EXPECT_FALSE(kept([&](Tensor w) { return linear_through_fp32(frozen_x, w); }, trained_w * 2));
  EXPECT_TRUE(kept([&](Tensor w) { return linear_through_fp32(leaf, w); }, trained_w * 2));
}

// The fp32 blocks are the kernel's workspace, as a GEMM's packing buffers
// are: the allocator that stands in for GPU memory sees the output only.
TEST(HalfMatmulTest, TheWorkspaceIsNotCountedAsTensorMemory) {
  TrackingAllocator& alloc = TrackingAllocator::install();
  const Tensor a = torch::randn({600, 600}).to(torch::kBFloat16), b = torch::randn({600, 600}).to(torch::kBFloat16);
  Tensor out = torch::empty({600, 600}, torch::kBFloat16);
  matmul_through_fp32(out, a, b);  // the thread's scratch is made here
  alloc.reset_peak();
  const std::int64_t before = alloc.current_bytes();
  matmul_through_fp32(out, a, b);
  EXPECT_EQ(alloc.peak_bytes(), before);
}

TEST(HalfMatmulTest, Bf16GoesThroughFp32OnlyOnCpusWithoutItInHardware) {
  const bool native = platform::detect_native_bf16();
  EXPECT_EQ(half_matmul_through_fp32(torch::zeros({1}, torch::kBFloat16)), !native);
  EXPECT_FALSE(half_matmul_through_fp32(torch::zeros({1}, torch::kFloat32)));
  EXPECT_FALSE(half_matmul_through_fp32(torch::zeros({1}, torch::kHalf)));
  // Either way linear_layer is LibTorch's linear in value.
  torch::manual_seed(4);
  const Tensor x = torch::randn({5, 24}).to(torch::kBFloat16), w = torch::randn({7, 24}).to(torch::kBFloat16);
  EXPECT_LT(relative_error(linear_layer(x, w), torch::linear(x.to(torch::kFloat32), w.to(torch::kFloat32))), 1.0 / 256);
}

}  // namespace
}  // namespace tailor::runner
