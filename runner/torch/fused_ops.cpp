#include "runner/torch/fused_ops.h"

#include <ATen/Parallel.h>

#include <algorithm>

#include "runner/torch/cuda_kernels.h"
#include "runner/torch/kernels.h"

namespace tailor::runner {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using kernels::bf16;

bool is_bf16(const Tensor& t) { return t.scalar_type() == torch::kBFloat16; }
template <class T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}
std::int64_t rows_of(const Tensor& t) { return t.numel() / std::max<std::int64_t>(1, t.size(-1)); }
// Rows per task: about 32 KiB of values, so small tensors stay on one thread.
std::int64_t grain(std::int64_t row_len) { return std::max<std::int64_t>(1, 8192 / std::max<std::int64_t>(1, row_len)); }

struct CrossEntropy : torch::autograd::Function<CrossEntropy> {
  static Tensor forward(AutogradContext* ctx, const Tensor& logits_in, const Tensor& targets_in) {
    const Tensor logits = logits_in.contiguous();
    const Tensor targets = targets_in.reshape({-1}).to(torch::kInt64).contiguous();
    const std::int64_t v = logits.size(-1), rows = rows_of(logits);
    TORCH_CHECK(targets.numel() == rows, "cross-entropy: ", rows, " rows of logits but ", targets.numel(), " targets");
    if (rows > 0) {
      const bool bad = ((targets < 0) & (targets != -100)).any().item<bool>() || (targets >= v).any().item<bool>();
      TORCH_CHECK(!bad, "cross-entropy: a target id is outside the vocabulary of ", v);
    }
    CrossEntropyRows r = fused_cross_entropy_rows(logits, targets);
    ctx->save_for_backward({logits, targets, r.lse});
    return r.loss.sum().to(torch::kFloat32);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    return {fused_cross_entropy_rows_grad(saved[0], saved[1], saved[2], grad_out[0].item<float>()), Tensor()};
  }
};

// SwiGLU on either device, GeGLU on CUDA only (kernels.h has none).
struct GatedUnit : torch::autograd::Function<GatedUnit> {
  static Tensor forward(AutogradContext* ctx, const Tensor& gate_up_in, std::int64_t kind) {
    const Tensor gate_up = gate_up_in.contiguous();
    ctx->save_for_backward({gate_up});
    ctx->saved_data["kind"] = kind;
    if (gate_up.is_cuda()) return cuda_glu(gate_up, static_cast<cuda::Glu>(kind));
    TORCH_CHECK(kind == static_cast<std::int64_t>(cuda::Glu::kSwiglu), "fused GeGLU runs on CUDA tensors only");
    const std::int64_t i = gate_up.size(-1) / 2, rows = rows_of(gate_up);
    auto sizes = gate_up.sizes().vec();
    sizes.back() = i;
    Tensor y = torch::empty(sizes, gate_up.options());
    at::parallel_for(0, rows, grain(2 * i), [&](std::int64_t r0, std::int64_t r1) {
      if (is_bf16(gate_up)) {
        kernels::swiglu_forward(ptr<bf16>(gate_up), r0, r1, i, ptr<bf16>(y));
      } else {
        kernels::swiglu_forward(ptr<float>(gate_up), r0, r1, i, ptr<float>(y));
      }
    });
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const Tensor gate_up = ctx->get_saved_variables()[0];
    const Tensor dy = grad_out[0].contiguous();
    if (gate_up.is_cuda()) {
      return {cuda_glu_backward(gate_up, dy, static_cast<cuda::Glu>(ctx->saved_data["kind"].toInt())), Tensor()};
    }
    const std::int64_t i = gate_up.size(-1) / 2, rows = rows_of(gate_up);
    Tensor grad = torch::empty_like(gate_up);
    at::parallel_for(0, rows, grain(2 * i), [&](std::int64_t r0, std::int64_t r1) {
      if (is_bf16(gate_up)) {
        kernels::swiglu_backward(ptr<bf16>(gate_up), ptr<bf16>(dy), r0, r1, i, ptr<bf16>(grad));
      } else {
        kernels::swiglu_backward(ptr<float>(gate_up), ptr<float>(dy), r0, r1, i, ptr<float>(grad));
      }
    });
    return {grad, Tensor()};
  }
};

struct RmsNorm : torch::autograd::Function<RmsNorm> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x_in, const Tensor& w_in, double eps) {
    const Tensor x = x_in.contiguous(), w = w_in.contiguous();
    TORCH_CHECK(w.scalar_type() == x.scalar_type(), "rms_norm: weight and input dtypes differ");
    if (x.is_cuda()) {
      auto [y, rstd] = cuda_rms_norm(x, w, eps);
      ctx->save_for_backward({x, w, rstd});
      return y;
    }
    const std::int64_t c = x.size(-1), rows = rows_of(x);
    Tensor y = torch::empty_like(x);
    Tensor rstd = torch::empty({rows}, torch::kFloat32);
    const auto e = static_cast<float>(eps);
    at::parallel_for(0, rows, grain(c), [&](std::int64_t r0, std::int64_t r1) {
      if (is_bf16(x)) {
        kernels::rms_norm_forward(ptr<bf16>(x), ptr<bf16>(w), r0, r1, c, e, ptr<bf16>(y), ptr<float>(rstd));
      } else {
        kernels::rms_norm_forward(ptr<float>(x), ptr<float>(w), r0, r1, c, e, ptr<float>(y), ptr<float>(rstd));
      }
    });
    ctx->save_for_backward({x, w, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &w = saved[1], &rstd = saved[2];
    const Tensor dy = grad_out[0].contiguous();
    if (x.is_cuda()) {
      auto [dx, dw] = cuda_rms_norm_backward(x, w, rstd, dy);
      return {dx, dw.to(w.scalar_type()), Tensor()};
    }
    const std::int64_t c = x.size(-1), rows = rows_of(x);
    Tensor dx = torch::empty_like(x);
    // The weight's gradient sums over rows: a fixed number of chunks, each
    // with its own fp32 partial sum, so the result does not depend on the
    // thread count.
    const std::int64_t chunks = std::clamp<std::int64_t>(rows / 64, 1, 32);
    Tensor partial = torch::zeros({chunks, c}, torch::kFloat32);
    at::parallel_for(0, chunks, 1, [&](std::int64_t k0, std::int64_t k1) {
      for (std::int64_t k = k0; k < k1; ++k) {
        const std::int64_t r0 = rows * k / chunks, r1 = rows * (k + 1) / chunks;
        float* dw = ptr<float>(partial) + k * c;
        if (is_bf16(x)) {
          kernels::rms_norm_backward(ptr<bf16>(x), ptr<bf16>(w), ptr<float>(rstd), ptr<bf16>(dy), r0, r1, c,
                                     ptr<bf16>(dx), dw);
        } else {
          kernels::rms_norm_backward(ptr<float>(x), ptr<float>(w), ptr<float>(rstd), ptr<float>(dy), r0, r1, c,
                                     ptr<float>(dx), dw);
        }
      }
    });
    return {dx, partial.sum(0).to(w.scalar_type()), Tensor()};
  }
};

struct Rope : torch::autograd::Function<Rope> {
  static Tensor apply_rows(const Tensor& x, const Tensor& cos, const Tensor& sin, std::int64_t rotated, std::int64_t d,
                           bool inverse) {
    if (x.is_cuda()) return cuda_rope(x, cos, sin, rotated, d, inverse);
    const std::int64_t width = x.size(-1), rows = rows_of(x);
    Tensor y = torch::empty_like(x);
    at::parallel_for(0, rows, grain(width), [&](std::int64_t r0, std::int64_t r1) {
      if (is_bf16(x)) {
        kernels::rope(ptr<bf16>(x), r0, r1, width, rotated, d, ptr<float>(cos), ptr<float>(sin), inverse,
                      ptr<bf16>(y));
      } else {
        kernels::rope(ptr<float>(x), r0, r1, width, rotated, d, ptr<float>(cos), ptr<float>(sin), inverse,
                      ptr<float>(y));
      }
    });
    return y;
  }

  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& cos_in, const Tensor& sin_in,
                        std::int64_t rotated, std::int64_t d) {
    const Tensor cos = cos_in.to(torch::kFloat32).contiguous(), sin = sin_in.to(torch::kFloat32).contiguous();
    TORCH_CHECK(cos.numel() * 2 == rows_of(x) * d, "rope: cos/sin do not match the input's tokens");
    TORCH_CHECK(rotated * d <= x.size(-1) && d % 2 == 0, "rope: heads do not fit the row");
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["rotated"] = rotated;
    ctx->saved_data["d"] = d;
    return apply_rows(x.contiguous(), cos, sin, rotated, d, /*inverse=*/false);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    // A rotation's gradient is the inverse rotation of the output gradient.
    return {apply_rows(grad_out[0].contiguous(), saved[0], saved[1], ctx->saved_data["rotated"].toInt(),
                       ctx->saved_data["d"].toInt(), /*inverse=*/true),
            Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

}  // namespace

bool fused_supported(const Tensor& t, FusedKernel k) {
  if (t.scalar_type() != torch::kFloat32 && t.scalar_type() != torch::kBFloat16) return false;
  if (t.device().is_cpu())
    return k == FusedKernel::kCrossEntropy || k == FusedKernel::kSwiglu || k == FusedKernel::kRmsNorm ||
           k == FusedKernel::kRope;
  return t.is_cuda() && cuda_kernel_enabled(k);
}

CrossEntropyRows fused_cross_entropy_rows(const Tensor& logits, const Tensor& targets) {
  if (logits.is_cuda()) {
    auto [lse, loss] = cuda_cross_entropy_rows(logits, targets);
    return {lse, loss};
  }
  const std::int64_t v = logits.size(-1), rows = rows_of(logits);
  CrossEntropyRows out{torch::empty({rows}, torch::kFloat32), torch::empty({rows}, torch::kFloat64)};
  const auto* t = ptr<std::int64_t>(targets);
  at::parallel_for(0, rows, grain(v), [&](std::int64_t r0, std::int64_t r1) {
    if (is_bf16(logits)) {
      kernels::cross_entropy_forward(ptr<bf16>(logits), r0, r1, v, t, -100, ptr<float>(out.lse), ptr<double>(out.loss));
    } else {
      kernels::cross_entropy_forward(ptr<float>(logits), r0, r1, v, t, -100, ptr<float>(out.lse),
                                     ptr<double>(out.loss));
    }
  });
  return out;
}

Tensor fused_cross_entropy_rows_grad(const Tensor& logits, const Tensor& targets, const Tensor& lse, float scale) {
  if (logits.is_cuda()) return cuda_cross_entropy_rows_grad(logits, targets, lse, scale);
  const std::int64_t v = logits.size(-1), rows = rows_of(logits);
  Tensor grad = torch::empty_like(logits);
  const auto* t = ptr<std::int64_t>(targets);
  at::parallel_for(0, rows, grain(v), [&](std::int64_t r0, std::int64_t r1) {
    if (is_bf16(logits)) {
      kernels::cross_entropy_backward(ptr<bf16>(logits), r0, r1, v, t, -100, ptr<float>(lse), scale, ptr<bf16>(grad));
    } else {
      kernels::cross_entropy_backward(ptr<float>(logits), r0, r1, v, t, -100, ptr<float>(lse), scale,
                                      ptr<float>(grad));
    }
  });
  return grad;
}

Tensor fused_cross_entropy_sum(const Tensor& logits, const Tensor& targets) {
  return CrossEntropy::apply(logits, targets);
}
Tensor fused_swiglu(const Tensor& gate_up) {
  return GatedUnit::apply(gate_up, static_cast<std::int64_t>(cuda::Glu::kSwiglu));
}
Tensor fused_geglu(const Tensor& gate_up) {
  return GatedUnit::apply(gate_up, static_cast<std::int64_t>(cuda::Glu::kGegluTanh));
}
Tensor fused_rms_norm(const Tensor& x, const Tensor& w, double eps) { return RmsNorm::apply(x, w, eps); }
Tensor fused_rope(const Tensor& x, const Tensor& cos, const Tensor& sin, std::int64_t rotated_heads, std::int64_t d) {
  return Rope::apply(x, cos, sin, rotated_heads, d);
}

}  // namespace tailor::runner
