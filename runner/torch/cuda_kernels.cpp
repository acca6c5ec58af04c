#include "runner/torch/cuda_kernels.h"

#include <atomic>
#include <cstdlib>

#include "runner/torch/nf4.h"

#if TAILOR_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace tailor::runner {
namespace {

using torch::Tensor;

// The selection as bits, so that kernels on any thread read it without a lock.
std::atomic<unsigned long> g_selected{verified_cuda_kernels().to_ulong()};

}  // namespace

Status select_cuda_kernels() {
  const char* v = std::getenv(kCudaKernelsEnv);
  auto parsed = parse_cuda_kernels(v != nullptr ? v : "");
  if (!parsed.is_ok()) return parsed.status();
  g_selected.store(parsed->to_ulong());
  return Status::ok();
}

KernelSet set_cuda_kernels(KernelSet s) { return KernelSet(g_selected.exchange(s.to_ulong())); }

#if TAILOR_CUDA

bool cuda_kernel_enabled(FusedKernel k) { return KernelSet(g_selected.load()).test(static_cast<std::size_t>(k)); }

std::string cuda_kernels_in_use() { return describe_kernels(KernelSet(g_selected.load())); }

namespace {

cuda::DType dtype_of(const Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat32: return cuda::DType::kFloat32;
    case torch::kBFloat16: return cuda::DType::kBFloat16;
    case torch::kFloat16: return cuda::DType::kFloat16;
    default: TORCH_CHECK(false, "CUDA kernels: unsupported dtype ", t.scalar_type());
  }
}

void* stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

void check(int code, const char* what) { TORCH_CHECK(code == 0, "CUDA kernel ", what, ": ", cuda::error_string(code)); }

void expect(const Tensor& t, const char* what) {
  TORCH_CHECK(t.is_cuda() && t.is_contiguous(), "CUDA kernel ", what, ": expected a contiguous CUDA tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat32 || t.scalar_type() == torch::kBFloat16, "CUDA kernel ", what,
              ": expected fp32 or bf16, got ", t.scalar_type());
}

std::int64_t rows_of(const Tensor& t) { return t.numel() / std::max<std::int64_t>(1, t.size(-1)); }

}  // namespace

std::pair<Tensor, Tensor> cuda_rms_norm(const Tensor& x, const Tensor& w, double eps) {
  expect(x, "rms_norm");
  TORCH_CHECK(w.scalar_type() == x.scalar_type() && w.is_contiguous() && w.numel() == x.size(-1),
              "CUDA kernel rms_norm: the weight does not match the input");
  const std::int64_t c = x.size(-1), rows = rows_of(x);
  Tensor y = torch::empty_like(x);
  Tensor rstd = torch::empty({rows}, x.options().dtype(torch::kFloat32));
  check(cuda::rms_norm_forward(dtype_of(x), x.data_ptr(), w.data_ptr(), rows, c, static_cast<float>(eps), y.data_ptr(),
                               rstd.data_ptr<float>(), stream()),
        "rms_norm");
  return {y, rstd};
}

std::pair<Tensor, Tensor> cuda_rms_norm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd,
                                                 const Tensor& dy) {
  expect(x, "rms_norm backward");
  TORCH_CHECK(dy.scalar_type() == x.scalar_type() && dy.is_contiguous(), "CUDA kernel rms_norm backward: dy");
  const std::int64_t c = x.size(-1), rows = rows_of(x);
  // Partial sums of the weight's gradient over fixed row ranges: enough
  // blocks to fill a GPU, each summing at most a few hundred rows.
  const std::int64_t chunks = std::clamp<std::int64_t>(rows / 64, 1, 256);
  Tensor dx = torch::empty_like(x);
  Tensor partial = torch::empty({chunks, c}, x.options().dtype(torch::kFloat32));
  check(cuda::rms_norm_backward(dtype_of(x), x.data_ptr(), w.data_ptr(), rstd.data_ptr<float>(), dy.data_ptr(), rows, c,
                                dx.data_ptr(), partial.data_ptr<float>(), chunks, stream()),
        "rms_norm backward");
  return {dx, partial.sum(0)};
}

Tensor cuda_rope(const Tensor& x, const Tensor& cos, const Tensor& sin, std::int64_t rotated, std::int64_t d,
                 bool inverse) {
  expect(x, "rope");
  TORCH_CHECK(cos.scalar_type() == torch::kFloat32 && sin.scalar_type() == torch::kFloat32 && cos.is_cuda() &&
                  sin.is_cuda() && cos.is_contiguous() && sin.is_contiguous(),
              "CUDA kernel rope: cos/sin must be contiguous fp32 CUDA tensors");
  Tensor y = torch::empty_like(x);
  check(cuda::rope(dtype_of(x), x.data_ptr(), rows_of(x), x.size(-1), rotated, d, cos.data_ptr<float>(),
                   sin.data_ptr<float>(), inverse, y.data_ptr(), stream()),
        "rope");
  return y;
}

Tensor cuda_glu(const Tensor& gate_up, cuda::Glu kind) {
  expect(gate_up, "glu");
  const std::int64_t i = gate_up.size(-1) / 2;
  auto sizes = gate_up.sizes().vec();
  sizes.back() = i;
  Tensor y = torch::empty(sizes, gate_up.options());
  check(cuda::glu_forward(dtype_of(gate_up), kind, gate_up.data_ptr(), rows_of(gate_up), i, y.data_ptr(), stream()),
        "glu");
  return y;
}

Tensor cuda_glu_backward(const Tensor& gate_up, const Tensor& dy, cuda::Glu kind) {
  expect(gate_up, "glu backward");
  TORCH_CHECK(dy.scalar_type() == gate_up.scalar_type() && dy.is_contiguous(), "CUDA kernel glu backward: dy");
  Tensor grad = torch::empty_like(gate_up);
  check(cuda::glu_backward(dtype_of(gate_up), kind, gate_up.data_ptr(), dy.data_ptr(), rows_of(gate_up),
                           gate_up.size(-1) / 2, grad.data_ptr(), stream()),
        "glu backward");
  return grad;
}

std::pair<Tensor, Tensor> cuda_cross_entropy_rows(const Tensor& logits, const Tensor& targets) {
  expect(logits, "cross_entropy");
  const std::int64_t rows = rows_of(logits);
  const Tensor t = targets.contiguous();
  TORCH_CHECK(t.scalar_type() == torch::kInt64 && t.is_cuda() && t.numel() == rows,
              "CUDA kernel cross_entropy: targets must be int64 CUDA, one per row");
  Tensor lse = torch::empty({rows}, logits.options().dtype(torch::kFloat32));
  Tensor loss = torch::empty({rows}, logits.options().dtype(torch::kFloat64));
  check(cuda::cross_entropy_forward(dtype_of(logits), logits.data_ptr(), rows, logits.size(-1),
                                    t.data_ptr<std::int64_t>(), -100, lse.data_ptr<float>(), loss.data_ptr<double>(),
                                    stream()),
        "cross_entropy");
  return {lse, loss};
}

Tensor cuda_cross_entropy_rows_grad(const Tensor& logits, const Tensor& targets, const Tensor& lse, float scale) {
  expect(logits, "cross_entropy backward");
  const Tensor t = targets.contiguous();
  TORCH_CHECK(t.scalar_type() == torch::kInt64 && t.is_cuda() && t.numel() == rows_of(logits) &&
                  lse.scalar_type() == torch::kFloat32 && lse.is_cuda() && lse.is_contiguous(),
              "CUDA kernel cross_entropy backward: targets or log-sum-exp");
  Tensor grad = torch::empty_like(logits);
  check(cuda::cross_entropy_backward(dtype_of(logits), logits.data_ptr(), rows_of(logits), logits.size(-1),
                                     t.data_ptr<std::int64_t>(), -100, lse.data_ptr<float>(), scale, grad.data_ptr(),
                                     stream()),
        "cross_entropy backward");
  return grad;
}

bool cuda_adamw(const Tensor& p, const Tensor& m, const Tensor& v, const Tensor& grad, const kernels::AdamWArgs& a,
                const Tensor& out) {
  auto is = [](const Tensor& t, torch::ScalarType s) {
    return t.defined() && t.is_cuda() && t.is_contiguous() && t.scalar_type() == s;
  };
  const std::int64_t n = p.numel();
  const bool sizes = m.numel() == n && v.numel() == n && grad.numel() == n && (!out.defined() || out.numel() == n);
  if (!sizes) return false;
  const bool fp32_states = is(p, torch::kFloat32) && is(m, torch::kFloat32) && is(v, torch::kFloat32);
  if (fp32_states && (is(grad, torch::kFloat32) || is(grad, torch::kBFloat16)) &&
      (!out.defined() || is(out, torch::kBFloat16))) {
    check(cuda::adamw_fp32_states(p.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), dtype_of(grad),
                                  grad.data_ptr(), n, a, out.defined() ? out.data_ptr() : nullptr, stream()),
          "adamw");
    return true;
  }
  if (is(p, torch::kBFloat16) && is(m, torch::kBFloat16) && is(v, torch::kBFloat16) && is(grad, torch::kBFloat16) &&
      !out.defined()) {
    check(cuda::adamw_bf16(p.data_ptr(), m.data_ptr(), v.data_ptr(), grad.data_ptr(), n, a, stream()), "adamw");
    return true;
  }
  return false;
}

Tensor cuda_nf4_dequantize(const Tensor& packed, const Tensor& absmax, const Tensor& absmax_codes,
                           const Tensor& code_map, float offset, std::int64_t b0, std::int64_t blocks, std::int64_t n,
                           torch::Dtype dtype) {
  TORCH_CHECK(packed.is_cuda() && packed.is_contiguous() && packed.scalar_type() == torch::kUInt8 &&
                  packed.numel() >= (b0 + blocks) * kNf4BlockSize / 2,
              "CUDA kernel nf4_dequantize: packed codes");
  TORCH_CHECK(absmax.is_cuda() && absmax.is_contiguous() && absmax.scalar_type() == torch::kFloat32,
              "CUDA kernel nf4_dequantize: absmax");
  TORCH_CHECK(n >= 0 && n <= blocks * kNf4BlockSize, "CUDA kernel nf4_dequantize: ", n, " values from ", blocks,
              " blocks");
  const bool double_quantized = absmax_codes.defined() && absmax_codes.numel() > 0;
  if (double_quantized) {
    TORCH_CHECK(absmax_codes.is_cuda() && absmax_codes.is_contiguous() && absmax_codes.scalar_type() == torch::kUInt8 &&
                    code_map.is_cuda() && code_map.scalar_type() == torch::kFloat32 && code_map.numel() == 256,
                "CUDA kernel nf4_dequantize: double-quantised scales");
  }
  cuda::Nf4Levels levels{};
  std::copy(kNf4Levels.begin(), kNf4Levels.end(), levels.value);
  Tensor out = torch::empty({n}, packed.options().dtype(dtype));
  check(cuda::nf4_dequantize(packed.data_ptr<std::uint8_t>(), absmax.data_ptr<float>(),
                             double_quantized ? absmax_codes.data_ptr<std::uint8_t>() : nullptr,
                             double_quantized ? code_map.data_ptr<float>() : nullptr, offset, b0, blocks, n, levels,
                             dtype_of(out), out.data_ptr(), stream()),
        "nf4_dequantize");
  return out;
}

#else  // a build without the CUDA path: nothing runs on CUDA tensors

bool cuda_kernel_enabled(FusedKernel) { return false; }
std::string cuda_kernels_in_use() { return "none"; }

namespace {
[[noreturn]] void unavailable() { TORCH_CHECK(false, "the runner was built without CUDA (TAILOR_CUDA=0)"); }
}  // namespace

std::pair<Tensor, Tensor> cuda_rms_norm(const Tensor&, const Tensor&, double) { unavailable(); }
std::pair<Tensor, Tensor> cuda_rms_norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  unavailable();
}
Tensor cuda_rope(const Tensor&, const Tensor&, const Tensor&, std::int64_t, std::int64_t, bool) { unavailable(); }
Tensor cuda_glu(const Tensor&, cuda::Glu) { unavailable(); }
Tensor cuda_glu_backward(const Tensor&, const Tensor&, cuda::Glu) { unavailable(); }
std::pair<Tensor, Tensor> cuda_cross_entropy_rows(const Tensor&, const Tensor&) { unavailable(); }
Tensor cuda_cross_entropy_rows_grad(const Tensor&, const Tensor&, const Tensor&, float) { unavailable(); }
bool cuda_adamw(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const kernels::AdamWArgs&, const Tensor&) {
  return false;
}
Tensor cuda_nf4_dequantize(const Tensor&, const Tensor&, const Tensor&, const Tensor&, float, std::int64_t,
                           std::int64_t, std::int64_t, torch::Dtype) {
  unavailable();
}

#endif

}  // namespace tailor::runner
