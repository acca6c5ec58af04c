// NF4 (QLoRA) and block-wise 8-bit quantisation, and 8-bit AdamW against
// fp32 AdamW.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "runner/torch/adamw_8bit.h"
#include "runner/torch/kernels.h"
#include "runner/torch/nf4.h"
#include "runner/torch/optimizer.h"
#include "runner/torch/quant8.h"

namespace tailor::runner {
namespace {

torch::Tensor levels_tensor() {
  return torch::from_blob(const_cast<float*>(kNf4Levels.data()), {16}, torch::kFloat32).clone();
}

TEST(Nf4Test, LevelsAreThePublishedSixteenWithExactZeroAndEnds) {
  const torch::Tensor l = levels_tensor();
  EXPECT_EQ(l[0].item<float>(), -1.0f);
  EXPECT_EQ(l[7].item<float>(), 0.0f);
  EXPECT_EQ(l[15].item<float>(), 1.0f);
  EXPECT_TRUE((l.slice(0, 1) > l.slice(0, 0, -1)).all().item<bool>());
}

TEST(Nf4Test, KnownValuesMapToKnownCodes) {
  // Four blocks of 64: each holds the 16 levels times a scale, so every
  // value is exactly a level of its block's absmax.
  const torch::Tensor l = levels_tensor();
  torch::Tensor w = torch::cat({l.repeat(4) * 0.5, l.repeat(4) * 2.0, l.flip(0).repeat(4), l.repeat(4) * 0.01});
  auto q = quantize_nf4(w);
  ASSERT_TRUE(q.is_ok()) << q.status().message();
  const torch::Tensor codes = nf4_unpack_codes(*q).to(torch::kInt64);
  const torch::Tensor ids = torch::arange(16, torch::kInt64);
  const torch::Tensor expected = torch::cat({ids.repeat(4), ids.repeat(4), ids.flip(0).repeat(4), ids.repeat(4)});
  EXPECT_TRUE(torch::equal(codes, expected));
  // Between levels: the nearest one wins (midpoint of 0 and 0.0796 is 0.0398).
  torch::Tensor near = torch::zeros({64});
  near[0] = 1.0;
  near[1] = 0.03;
  near[2] = 0.05;
  near[3] = -0.66;
  auto qn = quantize_nf4(near);
  ASSERT_TRUE(qn.is_ok());
  const torch::Tensor c = nf4_unpack_codes(*qn);
  EXPECT_EQ(c[0].item<int>(), 15);
  EXPECT_EQ(c[1].item<int>(), 7);
  EXPECT_EQ(c[2].item<int>(), 8);
  EXPECT_EQ(c[3].item<int>(), 1);  // -0.6962 is nearer than -0.5251
}

TEST(Nf4Test, PackingIsTwoCodesPerByteHighNibbleFirst) {
  const torch::Tensor l = levels_tensor();
  torch::Tensor w = torch::zeros({2, 64});
  w[0][0] = l[3];
  w[0][1] = l[12];
  w[0][63] = 1.0;
  w[1][0] = -1.0;
  w[1][1] = l[9];
  auto q = quantize_nf4(w);
  ASSERT_TRUE(q.is_ok());
  EXPECT_EQ(q->packed.numel(), 64);
  EXPECT_EQ(q->packed.scalar_type(), torch::kUInt8);
  EXPECT_EQ(q->packed[0].item<int>(), 3 * 16 + 12);
  EXPECT_EQ(q->packed[32].item<int>(), 0 * 16 + 9);
  // Unpacking the packed bytes gives back exactly the codes of the values.
  const torch::Tensor codes = nf4_unpack_codes(*q).to(torch::kInt32).view({-1, 2});
  EXPECT_TRUE(torch::equal((codes.select(1, 0) * 16 + codes.select(1, 1)).to(torch::kUInt8), q->packed));
}

TEST(Nf4Test, RoundTripErrorIsWithinTheCodebookBound) {
  torch::manual_seed(1);
  const torch::Tensor w = torch::randn({96, 200}) * 0.02;  // 19200 values: last block full, 300 blocks
  auto q = quantize_nf4(w);
  ASSERT_TRUE(q.is_ok());
  const torch::Tensor back = dequantize_nf4(*q, torch::kFloat32);
  ASSERT_EQ(back.sizes(), w.sizes());
  // Per element: half the widest gap between neighbouring levels times the
  // block's true absmax, plus the error of the double-quantised absmax.
  const torch::Tensor l = levels_tensor();
  const double half_gap = ((l.slice(0, 1) - l.slice(0, 0, -1)).max() / 2).item<double>();
  const torch::Tensor blocks = w.reshape({-1, kNf4BlockSize});
  const torch::Tensor absmax = blocks.abs().amax(1);
  const torch::Tensor absmax_dq = nf4_absmax(*q);
  const torch::Tensor bound = absmax * half_gap + (absmax - absmax_dq).abs() + 1e-7;
  const torch::Tensor err = (back.reshape({-1, kNf4BlockSize}) - blocks).abs();
  EXPECT_TRUE((err <= bound.unsqueeze(1)).all().item<bool>()) << "max excess "
                                                               << (err - bound.unsqueeze(1)).max().item<double>();
  // Double quantisation keeps the scales within 1% here.
  EXPECT_LT(((absmax - absmax_dq).abs() / absmax).max().item<double>(), 0.01);
  // A partial last block round-trips too (shape and bound).
  auto q1 = quantize_nf4(w.reshape({-1}).slice(0, 0, 100));
  ASSERT_TRUE(q1.is_ok());
  EXPECT_EQ(dequantize_nf4(*q1, torch::kFloat32).numel(), 100);
}

TEST(Nf4Test, StorageIsAboutHalfAByteAParameter) {
  auto q = quantize_nf4(torch::randn({512, 512}));
  ASSERT_TRUE(q.is_ok());
  const double per_param = static_cast<double>(q->bytes()) / (512.0 * 512.0);
  EXPECT_LE(per_param, 0.55);
  EXPECT_GE(per_param, 0.5);
}

TEST(Nf4Test, RejectsBadInput) {
  EXPECT_FALSE(quantize_nf4(torch::zeros({2, 2, 2})).is_ok());
  EXPECT_FALSE(quantize_nf4(torch::zeros({4}, torch::kInt64)).is_ok());
  torch::Tensor bad = torch::zeros({64});
  bad[5] = std::nan("");
  auto r = quantize_nf4(bad);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("nan"), std::string::npos);
}

TEST(Nf4Test, LinearMatchesTheDequantisedReferenceAndGivesInputGradients) {
  torch::manual_seed(2);
  const torch::Tensor w = torch::randn({48, 64}) * 0.05;
  const torch::Tensor bias = torch::randn({48});
  auto q = quantize_nf4(w);
  ASSERT_TRUE(q.is_ok());
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    torch::Tensor x = torch::randn({2, 5, 64}).to(dtype).requires_grad_(true);
    torch::Tensor xr = x.detach().clone().requires_grad_(true);
    const torch::Tensor y = nf4_linear(x, *q, bias.to(dtype));
    const torch::Tensor yr = torch::linear(xr, dequantize_nf4(*q, dtype), bias.to(dtype));
    const double tol = dtype == torch::kFloat32 ? 1e-5 : 2e-2;
    EXPECT_TRUE(torch::allclose(y.to(torch::kFloat32), yr.to(torch::kFloat32), tol, tol));
    const torch::Tensor g = torch::randn(y.sizes()).to(dtype);
    y.backward(g);
    yr.backward(g);
    ASSERT_TRUE(x.grad().defined());
    EXPECT_TRUE(torch::allclose(x.grad().to(torch::kFloat32), xr.grad().to(torch::kFloat32), tol, tol));
  }
}

TEST(DynamicMapTest, SignedAndUnsignedMapsHave256SortedCodesWithZeroAndOne) {
  for (bool is_signed : {true, false}) {
    const torch::Tensor m = dynamic_map(is_signed);
    ASSERT_EQ(m.numel(), 256);
    EXPECT_TRUE((m.slice(0, 1) > m.slice(0, 0, -1)).all().item<bool>()) << "signed " << is_signed;
    EXPECT_EQ(m.max().item<float>(), 1.0f);
    EXPECT_EQ((m == 0).sum().item<int>(), 1);
    if (is_signed) {
      EXPECT_EQ((m < 0).sum().item<int>(), 127);
    } else {
      EXPECT_GE(m.min().item<float>(), 0.0f);
    }
    // Dynamic: the smallest non-zero magnitude is ~1e-6 of the largest
    // (seven decimal exponents), far below a linear map's 1/127.
    EXPECT_LT(m.abs().masked_fill(m == 0, 2.0f).min().item<float>(), 1e-6f);
  }
}

TEST(Blockwise8Test, CodeValuesRoundTripExactly) {
  for (bool is_signed : {true, false}) {
    const torch::Tensor m = dynamic_map(is_signed);
    // Two blocks of 256: each the whole map times a scale (absmax = scale).
    const torch::Tensor x = torch::cat({m * 3.0f, m * 0.25f});
    const Blockwise8 q = quantize_blockwise8(x, 256, is_signed);
    EXPECT_TRUE(torch::equal(q.codes.to(torch::kInt64), torch::arange(256).repeat(2)));
    EXPECT_TRUE(torch::equal(dequantize_blockwise8(q), x));
  }
}

TEST(Blockwise8Test, RandomValuesRoundTripWithinHalfAGapOfTheBlockScale) {
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({5000});  // a partial last block
  const Blockwise8 q = quantize_blockwise8(x, 2048, true);
  EXPECT_EQ(q.absmax.numel(), 3);
  EXPECT_EQ(q.bytes(), 5000 + 3 * 4);
  const torch::Tensor back = dequantize_blockwise8(q);
  const torch::Tensor m = dynamic_map(true);
  const double half_gap = ((m.slice(0, 1) - m.slice(0, 0, -1)).max() / 2).item<double>();
  const torch::Tensor absmax = torch::constant_pad_nd(x.abs(), {0, 3 * 2048 - 5000}, 0).view({3, 2048}).amax(1);
  const torch::Tensor bound =
      absmax.repeat_interleave(2048).slice(0, 0, 5000) * half_gap * (1 + 1e-6);
  EXPECT_TRUE(((back - x).abs() <= bound).all().item<bool>());
}

// Least squares on a 64x128 weight (8192 values, so its states are 8-bit)
// plus a 64-value bias (fp32 states): both optimizers from the same start.
std::vector<double> train_regression(dsl::Optimizer kind, std::int64_t steps, std::int64_t* state_bytes) {
  torch::manual_seed(7);
  const torch::Tensor x = torch::randn({256, 128});
  const torch::Tensor w_true = torch::randn({64, 128}) * 0.1;
  const torch::Tensor y = torch::linear(x, w_true) + 0.01 * torch::randn({256, 64});
  torch::Tensor w = torch::zeros({64, 128}).requires_grad_(true);
  torch::Tensor b = torch::zeros({64}).requires_grad_(true);
  TrainingOptimizer opt({w, b}, dsl::Precision::kFp32, kind, 0.01);
  std::vector<double> losses;
  for (std::int64_t s = 0; s < steps; ++s) {
    opt.zero_grad();
    torch::Tensor loss = (torch::linear(x, w, b) - y).pow(2).mean();
    loss.backward();
    losses.push_back(loss.item<double>());
    opt.step(1e-2, 1.0);
  }
  *state_bytes = opt.state_bytes();
  return losses;
}

TEST(Adamw8bitTest, TracksFp32AdamWOnASmallProblem) {
  std::int64_t bytes32 = 0, bytes8 = 0;
  const auto l32 = train_regression(dsl::Optimizer::kAdamw, 300, &bytes32);
  const auto l8 = train_regression(dsl::Optimizer::kAdamw8bit, 300, &bytes8);
  // Tolerance: each step's loss within 5% of fp32's (plus 1e-3 absolute, for
  // the noise floor the fit reaches); both must actually learn.
  for (std::size_t i = 0; i < l32.size(); ++i) {
    EXPECT_NEAR(l8[i], l32[i], 0.05 * l32[i] + 1e-3) << "step " << i;
  }
  EXPECT_LT(l32.back(), 0.05 * l32.front());
  EXPECT_LT(l8.back(), 0.05 * l8.front());
  // States: 8192 values in 8 bits (2 bytes + 4 blocks x 2 absmax) and the
  // bias in fp32 (below the 4096-element threshold).
  EXPECT_EQ(bytes8, 2 * 8192 + 2 * 4 * 4 + 2 * 64 * 4);
  EXPECT_EQ(bytes32, (8192 + 64) * 8);
}

TEST(Adamw8bitTest, StateTensorsRestoreTheSameTrajectory) {
  torch::manual_seed(9);
  const torch::Tensor g = torch::randn({80, 64});
  auto run = [&](TrainingOptimizer& opt, torch::Tensor& p, int steps) {
    for (int i = 0; i < steps; ++i) {
      p.mutable_grad() = g * (1.0 + i);
      opt.step(1e-2, 1.0);
    }
  };
  torch::Tensor p1 = torch::ones({80, 64}).requires_grad_(true);
  TrainingOptimizer a({p1}, dsl::Precision::kFp32, dsl::Optimizer::kAdamw8bit, 0.0);
  run(a, p1, 3);
  torch::Tensor p2 = p1.detach().clone().requires_grad_(true);
  TrainingOptimizer b({p2}, dsl::Precision::kFp32, dsl::Optimizer::kAdamw8bit, 0.0);
  std::vector<torch::Tensor> saved;
  for (const auto& t : a.state_tensors()) saved.push_back(t.defined() ? t.clone() : t);
  ASSERT_EQ(saved.size(), 5u);
  ASSERT_TRUE(b.load_state_tensors(saved, a.steps()));
  run(a, p1, 2);
  run(b, p2, 2);
  EXPECT_TRUE(torch::equal(p1, p2));
  // A mismatched layout is refused rather than misread.
  EXPECT_FALSE(b.load_state_tensors({saved[0], saved[1], saved[2]}, 1));
}

// The fused pass encodes through a lookup table and a step or two
// (kernels::bucket_index): the same code as torch.bucketize for every bound,
// the floats either side of each, every map value and values of every
// magnitude and sign.
TEST(Adamw8bitTest, TheEncodersTableCountsTheBoundsBelowAsBucketizeDoes) {
  for (const bool is_signed : {true, false}) {
    const torch::Tensor bounds = dynamic_map_bounds(is_signed);
    std::vector<float> padded(bounds.data_ptr<float>(), bounds.data_ptr<float>() + bounds.numel());
    padded.resize(padded.size() + kernels::kBucketSteps + 1, std::numeric_limits<float>::infinity());
    std::vector<std::uint8_t> index(kernels::kBucketIndexSize);
    // The densest span (the unsigned map's top octave) within the kernel's fixed steps.
    EXPECT_LE(kernels::bucket_index(padded.data(), index.data()), kernels::kBucketSteps);
    std::vector<float> xs = {0.0f, -0.0f, 1.0f, -1.0f, 2.0f, -2.0f, 1e-30f, -1e-30f};
    for (std::int64_t i = 0; i < bounds.numel(); ++i) {
      const float b = bounds[i].item<float>();
      xs.insert(xs.end(), {b, std::nextafter(b, 2.0f), std::nextafter(b, -2.0f)});
    }
    for (std::int64_t i = 0; i < 256; ++i)
      xs.push_back(dynamic_map(is_signed)[i].item<float>());
    torch::manual_seed(11);
    const torch::Tensor random = torch::randn({200000}) * torch::pow(10.0, torch::rand({200000}) * -9);
    xs.insert(xs.end(), random.data_ptr<float>(), random.data_ptr<float>() + random.numel());
    const torch::Tensor x = torch::tensor(xs);
    const torch::Tensor expected = torch::bucketize(x, bounds, /*out_int32=*/true);
    std::int64_t wrong = 0;
    for (std::size_t i = 0; i < xs.size(); ++i) {
      wrong += kernels::bounds_below(padded.data(), index.data(), xs[i]) != expected[i].item<int>();
    }
    EXPECT_EQ(wrong, 0) << (is_signed ? "signed" : "unsigned") << " map, " << xs.size() << " values";
  }
}

// The fused CPU pass (kernels::adamw_8bit) against the same update in ATen
// ops, step after step from the same start: a partial last block, a
// gradient scale, and each dtype pair the trainer hands it.
TEST(Adamw8bitTest, FusedPassMatchesTheComposedUpdate) {
  struct Case {
    torch::ScalarType target, grad;
  };
  for (const Case c : {Case{torch::kFloat32, torch::kFloat32}, Case{torch::kFloat32, torch::kBFloat16},
                       Case{torch::kBFloat16, torch::kBFloat16}}) {
    SCOPED_TRACE(std::string(c10::toString(c.target)) + " target, " + c10::toString(c.grad) + " gradient");
    torch::manual_seed(4);
    const std::int64_t n = 5 * kAdamw8bitBlockSize + 777;
    torch::Tensor fused = torch::randn({n}).to(c.target), composed = fused.clone();
    Adam8bitState sf = make_adam8bit_state(n), sc = make_adam8bit_state(n);
    for (int t = 1; t <= 6; ++t) {
      // Gradients of several scales per block, so that the maps' fine ends are used.
      const torch::Tensor g = (torch::randn({n}) * torch::rand({n}).pow(4)).to(c.grad);
      const AdamUpdate u{1e-2, 0.9, 0.999, 1e-8, 1 - std::pow(0.9, t), 1 - std::pow(0.999, t), t == 3 ? 0.5 : 1.0};
      EXPECT_TRUE(adam8bit_update(fused, g, sf, u));
      adam8bit_update_composed(composed, g, sc, u);
    }
    // fp32: the same operations in another order; bf16: one rounding instead of two.
    const double tol = c.target == torch::kFloat32 ? 1e-5 : 1e-2;
    EXPECT_TRUE(torch::allclose(fused.to(torch::kFloat32), composed.to(torch::kFloat32), tol, tol));
    // Where v decodes to 0 and m does not, the update is m / eps in both: a
    // rounding of m is multiplied by 1e8, so compare relative to the value.
    const torch::Tensor f32 = fused.to(torch::kFloat32), c32 = composed.to(torch::kFloat32);
    std::printf("%s target, %s gradient: max |fused - composed| / max(|composed|, 1) %.3g; codes differing",
                c10::toString(c.target), c10::toString(c.grad),
                ((f32 - c32).abs() / c32.abs().clamp_min(1)).max().item<double>());
    for (const auto& [f, r] : {std::pair{&sf.m, &sc.m}, std::pair{&sf.v, &sc.v}}) {
      EXPECT_TRUE(torch::allclose(f->absmax, r->absmax, 1e-4, 0));
      // A code differs only where a value sits within rounding of a midpoint, and then by one.
      const torch::Tensor d = (f->codes.to(torch::kInt32) - r->codes.to(torch::kInt32)).abs();
      EXPECT_LE(d.max().item<int>(), 1);
      EXPECT_LT(d.sum().item<double>(), 1e-3 * static_cast<double>(n));
      std::printf(" %lld", static_cast<long long>(d.gt(0).sum().item<std::int64_t>()));
    }
    std::printf(" of %lld\n", static_cast<long long>(n));
  }
}

}  // namespace
}  // namespace tailor::runner
