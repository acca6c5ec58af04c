#include "runner/torch/fused_ops.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include "runner/torch/optimizer.h"

namespace tailor::runner {
namespace {

using torch::Tensor;

// Each fused op against the same math composed from ATen ops in fp64: values
// and gradients. fp32 agrees to rounding; bf16 to bf16's 8 bits.
struct Tolerance {
  double rtol, atol;
};
constexpr Tolerance kFp32{1e-5, 1e-5};
constexpr Tolerance kBf16{2e-2, 2e-2};

Tolerance tol(torch::ScalarType t) { return t == torch::kBFloat16 ? kBf16 : kFp32; }

void expect_close(const Tensor& got, const Tensor& want, Tolerance t, const std::string& what) {
  const Tensor g = got.to(torch::kFloat64), w = want.to(torch::kFloat64);
  ASSERT_EQ(g.sizes(), w.sizes()) << what;
  const double err = (g - w).abs().max().item<double>();
  const double bound = t.atol + t.rtol * w.abs().max().item<double>();
  EXPECT_LE(err, bound) << what << ": max error " << err;
}

// Leaf copies in `dtype` that collect gradients.
Tensor leaf(const Tensor& t, torch::ScalarType dtype) { return t.to(dtype).detach().requires_grad_(true); }

class FusedOpsTest : public ::testing::TestWithParam<torch::ScalarType> {};

TEST_P(FusedOpsTest, CrossEntropyMatchesLogSoftmaxNll) {
  torch::manual_seed(0);
  const auto dtype = GetParam();
  const std::int64_t rows = 37, v = 101;  // sizes that are not multiples of any vector width
  const Tensor base = torch::randn({rows, v}, torch::kFloat64) * 3;
  Tensor targets = torch::randint(0, v, {rows}, torch::kLong);
  targets.index_put_({torch::indexing::Slice(0, 5)}, -100);

  Tensor x = leaf(base, dtype);
  Tensor loss = fused_cross_entropy_sum(x, targets);
  (loss * 0.5).backward();

  Tensor ref_x = leaf(base.to(dtype), torch::kFloat64);  // same rounded inputs
  Tensor ref = torch::nll_loss(torch::log_softmax(ref_x, -1), targets, {}, at::Reduction::Sum, -100);
  (ref * 0.5).backward();
  expect_close(loss, ref, kFp32, "loss");
  expect_close(x.grad(), ref_x.grad(), tol(dtype), "d logits");
  EXPECT_EQ(x.grad().scalar_type(), dtype);
  EXPECT_TRUE(torch::all(x.grad().index({torch::indexing::Slice(0, 5)}) == 0).item<bool>()) << "ignored rows";
}

TEST_P(FusedOpsTest, CrossEntropyRejectsTargetsOutsideTheVocabulary) {
  const Tensor x = torch::zeros({2, 8}, GetParam());
  EXPECT_THROW(fused_cross_entropy_sum(x, torch::tensor({1, 8}, torch::kLong)), c10::Error);
  EXPECT_THROW(fused_cross_entropy_sum(x, torch::tensor({-1, 0}, torch::kLong)), c10::Error);
}

TEST_P(FusedOpsTest, SwiGluMatchesSiluTimesUp) {
  torch::manual_seed(1);
  const auto dtype = GetParam();
  const Tensor base = torch::randn({3, 5, 2 * 19}, torch::kFloat64) * 4;
  const Tensor dy = torch::randn({3, 5, 19}, torch::kFloat64);
  Tensor x = leaf(base, dtype);
  Tensor y = fused_swiglu(x);
  y.backward(dy.to(dtype));

  Tensor ref_x = leaf(base.to(dtype), torch::kFloat64);
  auto parts = ref_x.chunk(2, -1);
  Tensor ref = torch::silu(parts[0]) * parts[1];
  ref.backward(dy.to(dtype).to(torch::kFloat64));
  expect_close(y, ref, tol(dtype), "y");
  expect_close(x.grad(), ref_x.grad(), tol(dtype), "d gate_up");
}

TEST_P(FusedOpsTest, RmsNormMatchesItsDefinition) {
  torch::manual_seed(2);
  const auto dtype = GetParam();
  const Tensor base = torch::randn({4, 33, 24}, torch::kFloat64) * 2;
  const Tensor wbase = torch::rand({24}, torch::kFloat64) + 0.5;
  const Tensor dy = torch::randn({4, 33, 24}, torch::kFloat64);
  Tensor x = leaf(base, dtype), w = leaf(wbase, dtype);
  Tensor y = fused_rms_norm(x, w, 1e-5);
  y.backward(dy.to(dtype));

  Tensor rx = leaf(base.to(dtype), torch::kFloat64), rw = leaf(wbase.to(dtype), torch::kFloat64);
  Tensor ref = rx * torch::rsqrt(rx.pow(2).mean(-1, true) + 1e-5) * rw;
  ref.backward(dy.to(dtype).to(torch::kFloat64));
  expect_close(y, ref, tol(dtype), "y");
  expect_close(x.grad(), rx.grad(), tol(dtype), "dx");
  // dw sums 132 rows: bf16 inputs, fp32 accumulation.
  expect_close(w.grad(), rw.grad(), dtype == torch::kBFloat16 ? Tolerance{2e-2, 5e-2} : kFp32, "dw");
}

TEST_P(FusedOpsTest, RopeRotatesTheLeadingHeadsAndPassesTheRest) {
  torch::manual_seed(3);
  const auto dtype = GetParam();
  const std::int64_t b = 2, t = 7, d = 8, rotated = 3, width = 5 * d;  // 3 rotated heads, 2 passed through
  const Tensor base = torch::randn({b, t, width}, torch::kFloat64);
  const Tensor angles = torch::rand({b, t, d / 2}, torch::kFloat64) * 6;
  const Tensor cos = angles.cos().to(torch::kFloat32), sin = angles.sin().to(torch::kFloat32);
  const Tensor dy = torch::randn({b, t, width}, torch::kFloat64);
  Tensor x = leaf(base, dtype);
  Tensor y = fused_rope(x, cos, sin, rotated, d);
  y.backward(dy.to(dtype));

  // Hugging Face's form: x * cos + rotate_half(x) * sin, cos/sin repeated.
  Tensor rx = leaf(base.to(dtype), torch::kFloat64);
  using torch::indexing::Slice;
  const Tensor heads = rx.index({Slice(), Slice(), Slice(0, rotated * d)}).view({b, t, rotated, d});
  auto halves = heads.chunk(2, -1);
  const Tensor c = torch::cat({cos, cos}, -1).to(torch::kFloat64).unsqueeze(2);
  const Tensor s = torch::cat({sin, sin}, -1).to(torch::kFloat64).unsqueeze(2);
  const Tensor rot = heads * c + torch::cat({-halves[1], halves[0]}, -1) * s;
  Tensor ref = torch::cat({rot.reshape({b, t, rotated * d}), rx.index({Slice(), Slice(), Slice(rotated * d, torch::indexing::None)})}, -1);
  ref.backward(dy.to(dtype).to(torch::kFloat64));
  expect_close(y, ref, tol(dtype), "y");
  expect_close(x.grad(), rx.grad(), tol(dtype), "dx");
  EXPECT_TRUE(torch::equal(y.index({Slice(), Slice(), Slice(rotated * d, torch::indexing::None)}),
                           x.index({Slice(), Slice(), Slice(rotated * d, torch::indexing::None)})))
      << "heads beyond `rotated` are copied bit for bit";
}

TEST_P(FusedOpsTest, ResultsDoNotDependOnTheThreadCount) {
  const auto dtype = GetParam();
  auto run = [&](int threads) {
    at::set_num_threads(threads);
    torch::manual_seed(4);
    Tensor x = leaf(torch::randn({512, 64}), dtype), w = leaf(torch::rand({64}) + 0.5, dtype);
    Tensor logits = leaf(torch::randn({512, 300}), dtype);
    Tensor loss = fused_cross_entropy_sum(logits, torch::randint(0, 300, {512}, torch::kLong)) +
                  fused_rms_norm(x, w, 1e-5).to(torch::kFloat32).pow(2).sum();
    loss.backward();
    return std::vector<Tensor>{loss.detach(), x.grad(), w.grad(), logits.grad()};
  };
  const int before = at::get_num_threads();
  const auto one = run(1), two = run(2);
  at::set_num_threads(before);
  for (std::size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(torch::equal(one[i], two[i])) << "tensor " << i;
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FusedOpsTest, ::testing::Values(torch::kFloat32, torch::kBFloat16),
                         [](const auto& param_info) { return std::string(c10::toString(param_info.param)); });

// The fused AdamW pass against the same update in fp64 ATen ops, for each
// precision convention, over several steps.
TEST(FusedAdamWTest, MatchesTheUpdateWrittenWithAtenOps) {
  for (const auto precision : {dsl::Precision::kFp32, dsl::Precision::kBf16, dsl::Precision::kPureBf16}) {
    torch::manual_seed(5);
    const bool pure = precision == dsl::Precision::kPureBf16;
    const auto dtype = precision == dsl::Precision::kFp32 ? torch::kFloat32 : torch::kBFloat16;
    Tensor p = torch::randn({300, 70}).to(dtype);  // more than one 64Ki-element block
    TrainingOptimizer opt({p}, precision, dsl::Optimizer::kAdamw, 0.1);
    Tensor master = p.to(torch::kFloat64), m = torch::zeros_like(master), v = torch::zeros_like(master);
    // Pure bf16 rounds the states and the parameter to bf16 after each update.
    auto round = [&](const Tensor& t) { return pure ? t.to(torch::kBFloat16).to(torch::kFloat64) : t; };
    const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, scale = 0.5;
    for (int t = 1; t <= 3; ++t) {
      p.mutable_grad() = torch::randn({300, 70}).to(dtype);
      const Tensor g = p.grad().to(torch::kFloat64) * scale;
      opt.step(lr, scale);
      // The update uses the new moments before they are rounded for storage.
      m = m * b1 + g * (1 - b1);
      v = v * b2 + g * g * (1 - b2);
      master = round(master * (1 - lr * 0.1) -
                     m / (v.sqrt() / std::sqrt(1 - std::pow(b2, t)) + eps) * (lr / (1 - std::pow(b1, t))));
      m = round(m);
      v = round(v);
      // Mixed precision: the fp32 master copy (the bf16 parameter is its rounding).
      const Tensor got = (precision == dsl::Precision::kBf16 ? opt.state_tensors()[0] : p).to(torch::kFloat64);
      // fp32 math against fp64: a few fp32 ulps; pure bf16: one bf16 ulp.
      const double rel = pure ? 1.0 / 128 : 1e-6;
      const double err = ((got - master).abs() / (master.abs() * rel + 1e-6)).max().item<double>();
      EXPECT_LE(err, 1.0) << dsl::to_string(precision) << " step " << t;
      if (pure) master = got;  // a tie may round either way; go on from the optimizer's value
    }
    const double norm = p.grad().to(torch::kFloat64).norm().item<double>();
    EXPECT_NEAR(opt.grad_norm(), norm, 1e-6 * norm);
  }
}

}  // namespace
}  // namespace tailor::runner
