#include "runner/torch/half_matmul.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "platform/hardware_detect.h"

namespace tailor::runner {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// 512 x 512 fp32 blocks: each operand block is converted max(m, n) / 512
// times at most, a fraction of a percent of the multiply's work, and the
// GEMM runs near its peak on them.
constexpr std::int64_t kBlock = 512;

struct Fp32Scratch {
  std::vector<float> a, b, c;
};

Fp32Scratch& fp32_scratch() {
  thread_local Fp32Scratch s;
  return s;
}

void grow_scratch(std::vector<float>& buffer, std::int64_t elements) {
  if (buffer.size() < static_cast<std::size_t>(elements)) buffer.resize(static_cast<std::size_t>(elements));
}

Tensor fp32_block(std::vector<float>& buffer, std::int64_t rows, std::int64_t cols) {
  return torch::from_blob(buffer.data(), {rows, cols}, torch::kFloat32);
}

// An operand's block in fp32, converted in the order its elements lie: a
// transposed block (a weight read as w^T, a gradient as g^T) is copied as
// its contiguous transpose and handed to the GEMM transposed. Copied
// through the transpose, LibTorch's conversion took a strided scalar loop
// (6% of a bf16 step of the demo's model on an AVX2 EPYC, `perf`).
Tensor fp32_operand(std::vector<float>& buffer, const Tensor& block) {
  const std::int64_t rows = block.size(0), cols = block.size(1);
  if (block.stride(0) == 1 && block.stride(1) != 1 && rows > 1) {
    Tensor t = fp32_block(buffer, cols, rows);
    t.copy_(block.t());
    return t.t();
  }
  Tensor t = fp32_block(buffer, rows, cols);
  t.copy_(block);
  return t;
}

// y = x w^T (+ bias). LibTorch's custom functions take no undefined
// inputs, hence one function with a bias and one without.
Tensor half_linear_forward(AutogradContext* ctx, const Tensor& x, const Tensor& w, const Tensor& bias) {
  const std::int64_t in = w.size(1), out = w.size(0);
  TORCH_CHECK(x.size(-1) == in, "linear: input width ", x.size(-1), " but the weight's is ", in);
  std::vector<std::int64_t> sizes = x.sizes().vec();
  sizes.back() = out;
  // The output itself, not a view of it: callers add adapters' deltas into
  // its slices in place, which autograd refuses on a function's views.
  Tensor y = torch::empty(sizes, x.options());
  Tensor rows_out = y.view({-1, out});
  matmul_through_fp32(rows_out, x.reshape({-1, in}), w.t(), /*accumulate=*/false, bias);
  ctx->save_for_backward({w.requires_grad() ? x : Tensor(), x.requires_grad() ? w : Tensor()});
  return y;
}

variable_list half_linear_backward(AutogradContext* ctx, const Tensor& grad, bool bias) {
  const variable_list saved = ctx->get_saved_variables();
  const Tensor &x = saved[0], &w = saved[1];
  const std::int64_t out = grad.size(-1);
  const Tensor g = grad.reshape({-1, out});
  variable_list grads(bias ? 3 : 2);
  if (ctx->needs_input_grad(0)) {
    Tensor gx = torch::empty({g.size(0), w.size(1)}, g.options());
    matmul_through_fp32(gx, g, w);
    std::vector<std::int64_t> sizes = grad.sizes().vec();
    sizes.back() = w.size(1);
    grads[0] = gx.view(sizes);
  }
  if (ctx->needs_input_grad(1)) {
    Tensor gw = torch::empty({out, x.size(-1)}, g.options());
    matmul_through_fp32(gw, g.t(), x.reshape({-1, x.size(-1)}));
    grads[1] = gw;
  }
  if (bias && ctx->needs_input_grad(2)) grads[2] = g.sum(0);
  return grads;
}

struct HalfLinear : torch::autograd::Function<HalfLinear> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& w) {
    return half_linear_forward(ctx, x, w, Tensor());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    return half_linear_backward(ctx, grad_out[0], /*bias=*/false);
  }
};

struct HalfLinearWithBias : torch::autograd::Function<HalfLinearWithBias> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& w, const Tensor& bias) {
    return half_linear_forward(ctx, x, w, bias);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    return half_linear_backward(ctx, grad_out[0], /*bias=*/true);
  }
};

// out[i] = a[i] @ b[i] for 3-D operands.
void batched_through_fp32(Tensor& out, const Tensor& a, const Tensor& b) {
  for (std::int64_t i = 0; i < out.size(0); ++i) {
    Tensor dst = out[i];
    matmul_through_fp32(dst, a[i], b[i]);
  }
}

// torch::matmul on (..., m, k) @ (..., k, n) folds the leading dimensions
// into one (a copy where the strides do not allow a view, as for
// attention's transposed heads) and keeps the folded operands for
// backward: so does this, so that the CPU's measured peak stays what a GPU
// running torch::matmul holds.
struct HalfBatchedMatmul : torch::autograd::Function<HalfBatchedMatmul> {
  static Tensor forward(AutogradContext* ctx, const Tensor& a, const Tensor& b) {
    const std::int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
    std::vector<std::int64_t> sizes = a.sizes().vec();
    sizes.back() = n;
    Tensor out = torch::empty(sizes, a.options());
    const Tensor a3 = a.reshape({-1, m, k}), b3 = b.reshape({-1, k, n});
    Tensor o3 = out.view({-1, m, n});
    batched_through_fp32(o3, a3, b3);
    ctx->save_for_backward({b.requires_grad() ? a3 : Tensor(), a.requires_grad() ? b3 : Tensor()});
    ctx->saved_data["a_sizes"] = a.sizes().vec();
    ctx->saved_data["b_sizes"] = b.sizes().vec();
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const variable_list saved = ctx->get_saved_variables();
    const Tensor &a3 = saved[0], &b3 = saved[1];
    const std::vector<std::int64_t> a_sizes = ctx->saved_data["a_sizes"].toIntVector(),
                                    b_sizes = ctx->saved_data["b_sizes"].toIntVector();
    const std::int64_t m = a_sizes.end()[-2], k = a_sizes.back(), n = b_sizes.back();
    const Tensor g3 = grad_out[0].reshape({-1, m, n});
    variable_list grads(2);
    if (ctx->needs_input_grad(0)) {
      Tensor ga = torch::empty({g3.size(0), m, k}, g3.options());
      batched_through_fp32(ga, g3, b3.transpose(1, 2));
      grads[0] = ga.view(a_sizes);
    }
    if (ctx->needs_input_grad(1)) {
      Tensor gb = torch::empty({g3.size(0), k, n}, g3.options());
      batched_through_fp32(gb, a3.transpose(1, 2), g3);
      grads[1] = gb.view(b_sizes);
    }
    return grads;
  }
};

// Whether a @ b goes through fp32: both of a's dtype and a routed.
bool through_fp32(const Tensor& a, const Tensor& b) {
  return half_matmul_through_fp32(a) && b.scalar_type() == a.scalar_type();
}

}  // namespace

bool half_matmul_through_fp32(const Tensor& t) {
  static const bool emulated = !platform::detect_native_bf16();
  return emulated && t.device().is_cpu() && t.scalar_type() == torch::kBFloat16;
}

void matmul_through_fp32(Tensor& out, const Tensor& a, const Tensor& b, bool accumulate, const Tensor& bias) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && out.dim() == 2, "matmul: 2-D operands expected");
  const std::int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  TORCH_CHECK(b.size(0) == k && out.size(0) == m && out.size(1) == n, "matmul: ", a.sizes(), " @ ", b.sizes(), " into ",
              out.sizes());
  if (m == 0 || n == 0) return;
  Fp32Scratch& s = fp32_scratch();
  const std::int64_t bm = std::min(m, kBlock), bn = std::min(n, kBlock), bk = std::clamp<std::int64_t>(k, 1, kBlock);
  grow_scratch(s.a, bm * bk);
  grow_scratch(s.b, bk * bn);
  grow_scratch(s.c, bm * bn);
  for (std::int64_t i0 = 0; i0 < m; i0 += kBlock) {
    const std::int64_t mi = std::min(kBlock, m - i0);
    for (std::int64_t j0 = 0; j0 < n; j0 += kBlock) {
      const std::int64_t nj = std::min(kBlock, n - j0);
      Tensor c = fp32_block(s.c, mi, nj);
      Tensor dst = out.narrow(0, i0, mi).narrow(1, j0, nj);
      // As addmm_ on bf16: the old values joined in fp32, one rounding.
      if (accumulate) c.copy_(dst);
      if (k == 0 && !accumulate) c.zero_();
      for (std::int64_t p0 = 0; p0 < k; p0 += kBlock) {
        const std::int64_t kp = std::min(kBlock, k - p0);
        const Tensor ab = fp32_operand(s.a, a.narrow(0, i0, mi).narrow(1, p0, kp));
        const Tensor bb = fp32_operand(s.b, b.narrow(0, p0, kp).narrow(1, j0, nj));
        if (p0 == 0 && !accumulate) {
          at::mm_out(c, ab, bb);
        } else {
          c.addmm_(ab, bb);
        }
      }
      if (bias.defined()) c.add_(bias.narrow(0, j0, nj));
      dst.copy_(c);
    }
  }
}

void matmul_into(Tensor& out, const Tensor& a, const Tensor& b, bool accumulate) {
  if (through_fp32(a, b) && out.scalar_type() == a.scalar_type()) {
    matmul_through_fp32(out, a, b, accumulate);
  } else if (accumulate) {
    out.addmm_(a, b);
  } else {
    at::mm_out(out, a, b);
  }
}

Tensor matmul_2d(const Tensor& a, const Tensor& b) {
  if (!through_fp32(a, b)) return torch::mm(a, b);
  Tensor out = torch::empty({a.size(0), b.size(1)}, a.options());
  matmul_through_fp32(out, a, b);
  return out;
}

Tensor linear_layer(const Tensor& x, const Tensor& w, const Tensor& bias) {
  const bool routed = through_fp32(x, w) && (!bias.defined() || bias.scalar_type() == x.scalar_type());
  return routed ? linear_through_fp32(x, w, bias) : torch::linear(x, w, bias);
}

Tensor linear_through_fp32(const Tensor& x, const Tensor& w, const Tensor& bias) {
  return bias.defined() ? HalfLinearWithBias::apply(x, w, bias) : HalfLinear::apply(x, w);
}

Tensor batched_matmul(const Tensor& a, const Tensor& b) {
  const bool routed = through_fp32(a, b) && a.dim() >= 2 && a.dim() == b.dim() &&
                      a.sizes().slice(0, a.dim() - 2) == b.sizes().slice(0, b.dim() - 2);
  return routed ? HalfBatchedMatmul::apply(a, b) : torch::matmul(a, b);
}

}  // namespace tailor::runner
