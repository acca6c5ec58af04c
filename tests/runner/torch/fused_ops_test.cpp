#include "runner/torch/fused_ops.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "runner/torch/cuda_kernels.h"
#include "runner/torch/kernels.h"
#include "runner/torch/nf4.h"
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
  const Tensor g = got.cpu().to(torch::kFloat64), w = want.cpu().to(torch::kFloat64);
  ASSERT_EQ(g.sizes(), w.sizes()) << what;
  const double err = (g - w).abs().max().item<double>();
  const double bound = t.atol + t.rtol * w.abs().max().item<double>();
  EXPECT_LE(err, bound) << what << ": max error " << err;
}

// Leaf copies in `dtype` that collect gradients.
Tensor leaf(const Tensor& t, torch::ScalarType dtype, torch::Device device = torch::kCPU) {
  return t.to(device, dtype).detach().requires_grad_(true);
}

// The selection of CUDA kernels for one test, restored after it.
class KernelsSelected {
 public:
  explicit KernelsSelected(KernelSet s) : before_(set_cuda_kernels(s)) {}
  ~KernelsSelected() { set_cuda_kernels(before_); }

 private:
  KernelSet before_;
};

// Each op on the CPU kernels (kernels.h) and on the CUDA kernels
// (cuda_kernels.h), fp32 and bf16; the CUDA cases skip without a GPU. The
// ops themselves run whichever kernel the tensors' device has; the
// selection decides only whether the model calls them (fused_supported).
struct DeviceCase {
  torch::DeviceType device;
  torch::ScalarType dtype;
};

class FusedOpsTest : public ::testing::TestWithParam<DeviceCase> {
 protected:
  void SetUp() override {
    if (GetParam().device == torch::kCUDA && !torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  }
  torch::ScalarType dtype() const { return GetParam().dtype; }
  torch::Device dev() const { return torch::Device(GetParam().device); }
};

TEST_P(FusedOpsTest, CrossEntropyMatchesLogSoftmaxNll) {
  torch::manual_seed(0);
  const auto dtype = this->dtype();
  const std::int64_t rows = 37, v = 1101;  // sizes that are not multiples of any vector or block width
  const Tensor base = torch::randn({rows, v}, torch::kFloat64) * 3;
  Tensor targets = torch::randint(0, v, {rows}, torch::kLong);
  targets.index_put_({torch::indexing::Slice(0, 5)}, -100);

  Tensor x = leaf(base, dtype, dev());
  Tensor loss = fused_cross_entropy_sum(x, targets.to(dev()));
  (loss * 0.5).backward();

  Tensor ref_x = leaf(base.to(dtype), torch::kFloat64);  // same rounded inputs
  Tensor ref = torch::nll_loss(torch::log_softmax(ref_x, -1), targets, {}, at::Reduction::Sum, -100);
  (ref * 0.5).backward();
  expect_close(loss, ref, kFp32, "loss");
  expect_close(x.grad(), ref_x.grad(), tol(dtype), "d logits");
  EXPECT_EQ(x.grad().scalar_type(), dtype);
  EXPECT_EQ(x.grad().device(), dev());
  EXPECT_TRUE(torch::all(x.grad().index({torch::indexing::Slice(0, 5)}) == 0).item<bool>()) << "ignored rows";
}

TEST_P(FusedOpsTest, CrossEntropyRejectsTargetsOutsideTheVocabulary) {
  const Tensor x = torch::zeros({2, 8}, torch::TensorOptions(dtype()).device(dev()));
  EXPECT_THROW(fused_cross_entropy_sum(x, torch::tensor({1, 8}, torch::kLong).to(dev())), c10::Error);
  EXPECT_THROW(fused_cross_entropy_sum(x, torch::tensor({-1, 0}, torch::kLong).to(dev())), c10::Error);
}

TEST_P(FusedOpsTest, SwiGluMatchesSiluTimesUp) {
  torch::manual_seed(1);
  const auto dtype = this->dtype();
  const Tensor base = torch::randn({3, 5, 2 * 19}, torch::kFloat64) * 4;
  const Tensor dy = torch::randn({3, 5, 19}, torch::kFloat64);
  Tensor x = leaf(base, dtype, dev());
  Tensor y = fused_swiglu(x);
  y.backward(dy.to(dev(), dtype));

  Tensor ref_x = leaf(base.to(dtype), torch::kFloat64);
  auto parts = ref_x.chunk(2, -1);
  Tensor ref = torch::silu(parts[0]) * parts[1];
  ref.backward(dy.to(dtype).to(torch::kFloat64));
  expect_close(y, ref, tol(dtype), "y");
  expect_close(x.grad(), ref_x.grad(), tol(dtype), "d gate_up");
}

// GeGLU with GELU's tanh form, as Gemma: a CUDA kernel only.
TEST_P(FusedOpsTest, GegluMatchesTanhGeluTimesUp) {
  torch::manual_seed(6);
  const auto dtype = this->dtype();
  const Tensor base = torch::randn({3, 5, 2 * 300}, torch::kFloat64) * 3;
  const Tensor dy = torch::randn({3, 5, 300}, torch::kFloat64);
  Tensor x = leaf(base, dtype, dev());
  if (!x.is_cuda()) {
    EXPECT_FALSE(fused_supported(x, FusedKernel::kGeglu));
    EXPECT_THROW(fused_geglu(x), c10::Error);
    return;
  }
  Tensor y = fused_geglu(x);
  y.backward(dy.to(dev(), dtype));

  Tensor ref_x = leaf(base.to(dtype), torch::kFloat64);
  auto parts = ref_x.chunk(2, -1);
  Tensor ref = torch::gelu(parts[0], "tanh") * parts[1];
  ref.backward(dy.to(dtype).to(torch::kFloat64));
  expect_close(y, ref, tol(dtype), "y");
  expect_close(x.grad(), ref_x.grad(), tol(dtype), "d gate_up");
}

TEST_P(FusedOpsTest, RmsNormMatchesItsDefinition) {
  torch::manual_seed(2);
  const auto dtype = this->dtype();
  // 300 columns: more than one CUDA block's 256 threads per row.
  const Tensor base = torch::randn({4, 33, 300}, torch::kFloat64) * 2;
  const Tensor wbase = torch::rand({300}, torch::kFloat64) + 0.5;
  const Tensor dy = torch::randn({4, 33, 300}, torch::kFloat64);
  Tensor x = leaf(base, dtype, dev()), w = leaf(wbase, dtype, dev());
  Tensor y = fused_rms_norm(x, w, 1e-5);
  y.backward(dy.to(dev(), dtype));

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
  const auto dtype = this->dtype();
  const std::int64_t b = 2, t = 7, d = 8, rotated = 3, width = 5 * d;  // 3 rotated heads, 2 passed through
  const Tensor base = torch::randn({b, t, width}, torch::kFloat64);
  const Tensor angles = torch::rand({b, t, d / 2}, torch::kFloat64) * 6;
  const Tensor cos = angles.cos().to(torch::kFloat32), sin = angles.sin().to(torch::kFloat32);
  const Tensor dy = torch::randn({b, t, width}, torch::kFloat64);
  Tensor x = leaf(base, dtype, dev());
  Tensor y = fused_rope(x, cos.to(dev()), sin.to(dev()), rotated, d);
  y.backward(dy.to(dev(), dtype));

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

// On the CPU whatever the thread count; on CUDA from run to run (no atomics:
// the weight's gradient sums fixed row ranges).
TEST_P(FusedOpsTest, ResultsDoNotDependOnTheThreadCount) {
  const auto dtype = this->dtype();
  auto run = [&](int threads) {
    at::set_num_threads(threads);
    torch::manual_seed(4);
    Tensor x = leaf(torch::randn({512, 64}), dtype, dev()), w = leaf(torch::rand({64}) + 0.5, dtype, dev());
    Tensor logits = leaf(torch::randn({512, 300}), dtype, dev());
    Tensor loss = fused_cross_entropy_sum(logits, torch::randint(0, 300, {512}, torch::kLong).to(dev())) +
                  fused_rms_norm(x, w, 1e-5).to(torch::kFloat32).pow(2).sum();
    loss.backward();
    return std::vector<Tensor>{loss.detach(), x.grad(), w.grad(), logits.grad()};
  };
  const int before = at::get_num_threads();
  const auto one = run(1), two = run(2);
  at::set_num_threads(before);
  for (std::size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(torch::equal(one[i], two[i])) << "tensor " << i;
}

INSTANTIATE_TEST_SUITE_P(DevicesAndDtypes, FusedOpsTest,
                         ::testing::Values(DeviceCase{torch::kCPU, torch::kFloat32},
                                           DeviceCase{torch::kCPU, torch::kBFloat16},
                                           DeviceCase{torch::kCUDA, torch::kFloat32},
                                           DeviceCase{torch::kCUDA, torch::kBFloat16}),
                         [](const auto& case_info) {
                           return std::string(case_info.param.device == torch::kCUDA ? "Cuda" : "Cpu") +
                                  c10::toString(case_info.param.dtype);
                         });

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

// The CUDA AdamW pass against kernels.h's on the same values: the same
// formula in fp32, so a few fp32 ulps apart (fused multiply-adds round
// differently); pure bf16 within one bf16 ulp.
TEST(FusedAdamWTest, OnCudaMatchesTheCpuKernel) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  torch::manual_seed(7);
  const std::int64_t n = 100003;  // several CUDA blocks and a ragged end
  kernels::AdamWArgs a{0.9f, 0.95f, 1e-8f, 1e-3f, 1e-2f, 0.3f, 0.5f};
  const Tensor p = torch::randn({n}), m = torch::randn({n}) * 0.1, v = torch::rand({n}) * 0.01;
  for (const auto grad_type : {torch::kFloat32, torch::kBFloat16}) {
    const Tensor g = torch::randn({n}).to(grad_type);
    Tensor cp = p.clone(), cm = m.clone(), cv = v.clone(), cout = torch::empty({n}, torch::kBFloat16);
    if (grad_type == torch::kFloat32) {
      kernels::adamw(cp.data_ptr<float>(), cm.data_ptr<float>(), cv.data_ptr<float>(), g.data_ptr<float>(), n, a,
                     static_cast<kernels::bf16*>(cout.data_ptr()));
    } else {
      kernels::adamw(cp.data_ptr<float>(), cm.data_ptr<float>(), cv.data_ptr<float>(),
                     static_cast<const kernels::bf16*>(g.data_ptr()), n, a,
                     static_cast<kernels::bf16*>(cout.data_ptr()));
    }
    Tensor gp = p.cuda(), gm = m.cuda(), gv = v.cuda(), gout = torch::empty({n}, torch::kBFloat16).cuda();
    ASSERT_TRUE(cuda_adamw(gp, gm, gv, g.cuda(), a, gout));
    const std::string what = std::string("grad ") + c10::toString(grad_type);
    expect_close(gp, cp, {1e-6, 1e-7}, what + ": p");
    expect_close(gm, cm, {1e-6, 1e-7}, what + ": m");
    expect_close(gv, cv, {1e-6, 1e-9}, what + ": v");
    expect_close(gout, cout, {1.0 / 128, 0}, what + ": the bf16 parameter");
  }
  // Pure bf16.
  const Tensor bp = p.to(torch::kBFloat16), bm = m.to(torch::kBFloat16), bv = v.to(torch::kBFloat16);
  const Tensor bg = torch::randn({n}).to(torch::kBFloat16);
  Tensor cp = bp.clone(), cm = bm.clone(), cv = bv.clone();
  auto raw = [](const Tensor& t) { return static_cast<kernels::bf16*>(t.data_ptr()); };
  kernels::adamw(raw(cp), raw(cm), raw(cv), raw(bg), n, a);
  Tensor gp = bp.cuda(), gm = bm.cuda(), gv = bv.cuda();
  ASSERT_TRUE(cuda_adamw(gp, gm, gv, bg.cuda(), a, Tensor()));
  expect_close(gp, cp, {1.0 / 128, 1e-6}, "pure bf16 p");
  // A layout it does not take: nothing queued, the optimizer's ATen ops run.
  EXPECT_FALSE(cuda_adamw(gp.to(torch::kFloat16), gm, gv, bg.cuda(), a, Tensor()));
}

// The optimizer with the CUDA kernel selected takes the same steps as with
// ATen's ops, for each precision convention.
TEST(FusedAdamWTest, OptimizerStepsOnCudaAgreeWithAndWithoutTheKernel) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  for (const auto precision : {dsl::Precision::kFp32, dsl::Precision::kBf16, dsl::Precision::kPureBf16}) {
    const auto dtype = precision == dsl::Precision::kFp32 ? torch::kFloat32 : torch::kBFloat16;
    auto run = [&](KernelSet kernels) {
      KernelsSelected selected(kernels);
      torch::manual_seed(8);
      Tensor p = torch::randn({300, 70}).to(torch::kCUDA, dtype);
      TrainingOptimizer opt({p}, precision, dsl::Optimizer::kAdamw, 0.1);
      for (int t = 1; t <= 3; ++t) {
        p.mutable_grad() = torch::randn({300, 70}).to(torch::kCUDA, dtype);
        opt.step(1e-2, 0.5);
      }
      return p.detach().cpu();
    };
    KernelSet adamw;
    adamw.set(static_cast<std::size_t>(FusedKernel::kAdamw));
    expect_close(run(adamw), run(KernelSet()), dtype == torch::kBFloat16 ? kBf16 : Tolerance{1e-5, 1e-6},
                 dsl::to_string(precision));
  }
}

// The CUDA dequantisation gives the ATen path's values bit for bit: the
// same fp32 products, rounded once.
TEST(Nf4CudaKernelTest, DequantisesAsTheAtenOpsDo) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  torch::manual_seed(9);
  KernelSet nf4;
  nf4.set(static_cast<std::size_t>(FusedKernel::kNf4Dequantize));
  // 300 x 64: over 256 blocks, so the double-quantised scales span two
  // second-level blocks; 1000 values: a padded last block.
  for (const auto& shape : {std::vector<std::int64_t>{300, 64}, std::vector<std::int64_t>{1000}}) {
    const Tensor w = torch::randn(shape).cuda();
    for (const auto scales : {Nf4Scales::kFp32, Nf4Scales::kDoubleQuantized}) {
      auto q = quantize_nf4(w, scales);
      ASSERT_TRUE(q.is_ok()) << q.status().to_string();
      for (const auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat16}) {
        Tensor want, got;
        {
          KernelsSelected none{KernelSet()};
          want = dequantize_nf4(*q, dtype);
        }
        {
          KernelsSelected selected(nf4);
          got = dequantize_nf4(*q, dtype);
        }
        EXPECT_TRUE(torch::equal(got, want)) << c10::toString(dtype);
        if (shape.size() == 2) {
          KernelsSelected selected(nf4);
          const Tensor rows = dequantize_nf4_rows(*q, 64, 128, dtype);
          EXPECT_TRUE(torch::equal(rows, want.narrow(0, 64, 128))) << "rows, " << c10::toString(dtype);
        }
      }
    }
  }
}

TEST(KernelSelectionTest, ReadsNamesAndKeywords) {
  const KernelSet all = KernelSet().set();
  EXPECT_EQ(*parse_cuda_kernels(""), verified_cuda_kernels());
  EXPECT_EQ(*parse_cuda_kernels("verified"), verified_cuda_kernels());
  EXPECT_EQ(*parse_cuda_kernels("none"), KernelSet());
  EXPECT_EQ(*parse_cuda_kernels("all"), all);
  auto two = parse_cuda_kernels(" swiglu , rms_norm");
  ASSERT_TRUE(two.is_ok());
  EXPECT_EQ(describe_kernels(*two), "rms_norm,swiglu");
  EXPECT_EQ(describe_kernels(KernelSet()), "none");
  EXPECT_EQ(describe_kernels(all), "rms_norm,rope,swiglu,geglu,cross_entropy,adamw,nf4_dequantize");
  for (std::size_t i = 0; i < kFusedKernelCount; ++i) {
    auto one = parse_cuda_kernels(fused_kernel_name(static_cast<FusedKernel>(i)));
    ASSERT_TRUE(one.is_ok());
    EXPECT_EQ(one->count(), 1u);
    EXPECT_TRUE(one->test(i));
  }
}

TEST(KernelSelectionTest, AnUnknownNameIsRefusedWithTheChoices) {
  auto bad = parse_cuda_kernels("rms_norm,rmsnorm");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("TAILOR_CUDA_KERNELS: unknown kernel \"rmsnorm\""), std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("nf4_dequantize"), std::string::npos) << "lists the choices";
}

// The variable as a run reads it: a bad value is an error and leaves the
// selection as it was; unset, the verified kernels run (where CUDA is built).
TEST(KernelSelectionTest, TheEnvironmentSelectsTheKernels) {
  KernelsSelected restore{KernelSet()};
  const char* before = std::getenv(kCudaKernelsEnv);
  const std::optional<std::string> saved = before ? std::optional<std::string>(before) : std::nullopt;
  ::setenv(kCudaKernelsEnv, "swiglu,nope", 1);
  EXPECT_FALSE(select_cuda_kernels().is_ok());
  EXPECT_FALSE(cuda_kernel_enabled(FusedKernel::kSwiglu));
  ::setenv(kCudaKernelsEnv, "swiglu", 1);
  ASSERT_TRUE(select_cuda_kernels().is_ok());
  EXPECT_EQ(cuda_kernel_enabled(FusedKernel::kSwiglu), TAILOR_CUDA != 0);
  EXPECT_EQ(cuda_kernels_in_use(), TAILOR_CUDA ? "swiglu" : "none");
  ::unsetenv(kCudaKernelsEnv);
  ASSERT_TRUE(select_cuda_kernels().is_ok());
  for (std::size_t i = 0; i < kFusedKernelCount; ++i) {
    EXPECT_EQ(cuda_kernel_enabled(static_cast<FusedKernel>(i)), TAILOR_CUDA != 0 && verified_cuda_kernels().test(i))
        << fused_kernel_name(static_cast<FusedKernel>(i));
  }
  if (saved) ::setenv(kCudaKernelsEnv, saved->c_str(), 1);
}

// Where the model calls a fused op: on the CPU wherever kernels.h has one,
// on CUDA only where the kernel is selected; never for fp16.
TEST(KernelSelectionTest, FusedSupportedFollowsTheDeviceAndTheSelection) {
  const Tensor cpu = torch::zeros({2, 4});
  for (const auto k : {FusedKernel::kRmsNorm, FusedKernel::kRope, FusedKernel::kSwiglu, FusedKernel::kCrossEntropy}) {
    EXPECT_TRUE(fused_supported(cpu, k)) << fused_kernel_name(k);
    EXPECT_TRUE(fused_supported(cpu.to(torch::kBFloat16), k)) << fused_kernel_name(k);
    EXPECT_FALSE(fused_supported(cpu.to(torch::kFloat16), k)) << fused_kernel_name(k);
  }
  EXPECT_FALSE(fused_supported(cpu, FusedKernel::kGeglu));
  if (!torch::cuda::is_available()) return;
  KernelSet swiglu;
  swiglu.set(static_cast<std::size_t>(FusedKernel::kSwiglu));
  KernelsSelected selected(swiglu);
  EXPECT_TRUE(fused_supported(cpu.cuda(), FusedKernel::kSwiglu));
  EXPECT_FALSE(fused_supported(cpu.cuda(), FusedKernel::kRmsNorm));
  EXPECT_FALSE(fused_supported(cpu.cuda().to(torch::kFloat16), FusedKernel::kSwiglu));
}

}  // namespace
}  // namespace tailor::runner
