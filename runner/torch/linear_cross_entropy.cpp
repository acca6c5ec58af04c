#include "runner/torch/linear_cross_entropy.h"

#include <algorithm>
#include <optional>

#include "runner/torch/cross_entropy.h"
#include "runner/torch/fused_ops.h"
#include "runner/torch/half_matmul.h"
#include "strategies/memory_model.h"

namespace tailor::runner {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// One slice's summed loss (fp64 scalar) and, when `scale` is given, the
// gradient of scale * loss w.r.t. its logits in the compute dtype. Every
// row has a target.
struct SliceLoss {
  Tensor loss, grad;
};

SliceLoss slice_loss(const Tensor& h, const Tensor& w, const Tensor& t, double cap, std::optional<double> scale) {
  Tensor z = matmul_2d(h, w.t());
  if (cap <= 0 && fused_supported(z, FusedKernel::kCrossEntropy)) {
    CrossEntropyRows r = fused_cross_entropy_rows(z, t);
    SliceLoss out{r.loss.sum(), Tensor()};
    if (scale) out.grad = fused_cross_entropy_rows_grad(z, t, r.lse, static_cast<float>(*scale));
    return out;
  }
  const Tensor index = t.unsqueeze(1);
  const auto minus_one = [&](const Tensor& like) { return torch::full({like.size(0), 1}, -1.0, like.options()); };
  if (cap <= 0) {
    // One fp32 pass reads the logits in their dtype; backward's softmax is
    // exp of the same tensor, in place.
    Tensor logp = torch::log_softmax(z, 1, torch::kFloat32);
    z = Tensor();
    SliceLoss out{logp.gather(1, index).sum(torch::kFloat64).neg(), Tensor()};
    if (scale) out.grad = logp.exp_().scatter_add_(1, index, minus_one(logp)).mul_(*scale).to(h.scalar_type());
    return out;
  }
  // y = cap * tanh(z / cap); dy/dz = 1 - tanh^2.
  Tensor th = z.to(torch::kFloat32, /*non_blocking=*/false, /*copy=*/true).div_(cap).tanh_();
  z = Tensor();
  Tensor y = th * cap;
  const Tensor lse = torch::logsumexp(y, 1, /*keepdim=*/true);
  SliceLoss out{(lse.squeeze(1) - y.gather(1, index).squeeze(1)).sum(torch::kFloat64), Tensor()};
  if (scale) {
    y.sub_(lse).exp_().scatter_add_(1, index, minus_one(y));
    out.grad = y.mul_(th.square_().neg_().add_(1.0)).mul_(*scale).to(h.scalar_type());
  }
  return out;
}

// The gradient w.r.t. the whole hidden input: the trained rows' gradients
// in their places, zero elsewhere.
Tensor scatter_rows(const Tensor& grad_rows, const Tensor& rows, std::int64_t all_rows, at::IntArrayRef sizes) {
  Tensor g = torch::zeros({all_rows, grad_rows.size(1)}, grad_rows.options());
  g.index_copy_(0, rows, grad_rows);
  return g.view(sizes);
}

struct LinearCrossEntropy : torch::autograd::Function<LinearCrossEntropy> {
  static Tensor forward(AutogradContext* ctx, const Tensor& hidden, const Tensor& weight, const Tensor& targets_in,
                        double cap, std::int64_t slice_elements, bool need_h, bool need_w) {
    const std::int64_t c = hidden.size(-1), v = weight.size(0);
    TORCH_CHECK(weight.size(1) == c, "cross-entropy: hidden width ", c, " but the head's is ", weight.size(1));
    const Tensor h = hidden.reshape({-1, c});
    const Tensor targets = targets_in.reshape({-1}).to(h.device(), torch::kInt64);
    const std::int64_t all_rows = h.size(0);
    TORCH_CHECK(targets.numel() == all_rows, "cross-entropy: ", all_rows, " rows of hidden states but ",
                targets.numel(), " targets");
    if (all_rows > 0) {
      const bool bad = (((targets < 0) & (targets != -100)) | (targets >= v)).any().item<bool>();
      TORCH_CHECK(!bad, "cross-entropy: a target id is outside the vocabulary of ", v);
    }
    const Tensor rows = (targets != -100).nonzero().squeeze(1);
    const Tensor hs = h.index_select(0, rows), ts = targets.index_select(0, rows);
    const std::int64_t n = hs.size(0), step = cross_entropy_slice_rows(slice_elements, v);
    const bool early = need_h && !need_w && hidden.scalar_type() != torch::kHalf;
    Tensor grad_hs = early ? torch::empty_like(hs) : Tensor();
    Tensor loss = torch::zeros({}, h.options().dtype(torch::kFloat64));
    for (std::int64_t r0 = 0; r0 < n; r0 += step) {
      const std::int64_t r1 = std::min(n, r0 + step);
      SliceLoss s = slice_loss(hs.slice(0, r0, r1), weight, ts.slice(0, r0, r1), cap,
                               early ? std::optional<double>(1.0) : std::nullopt);
      loss += s.loss;
      if (early) {
        Tensor dst = grad_hs.slice(0, r0, r1);
        matmul_into(dst, s.grad, weight);
      }
    }
    if (early) {
      ctx->save_for_backward({grad_hs, rows});
    } else if (need_h || need_w) {
      ctx->save_for_backward({hs, weight, ts, rows});
    }
    ctx->saved_data["sizes"] = hidden.sizes().vec();
    ctx->saved_data["all_rows"] = all_rows;
    ctx->saved_data["early"] = early;
    ctx->saved_data["step"] = step;
    ctx->saved_data["cap"] = cap;
    ctx->saved_data["need_h"] = need_h;
    ctx->saved_data["need_w"] = need_w;
    return loss.to(torch::kFloat32);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto sizes = ctx->saved_data["sizes"].toIntVector();
    const std::int64_t all_rows = ctx->saved_data["all_rows"].toInt();
    variable_list saved = ctx->get_saved_variables();
    variable_list out(7);
    if (ctx->saved_data["early"].toBool()) {
      Tensor grad_hs = std::move(saved[0]);
      grad_hs.mul_(grad_out[0].to(grad_hs.scalar_type()));
      out[0] = scatter_rows(grad_hs, saved[1], all_rows, sizes);
      return out;
    }
    const Tensor &hs = saved[0], &weight = saved[1], &ts = saved[2], &rows = saved[3];
    const bool need_h = ctx->saved_data["need_h"].toBool(), need_w = ctx->saved_data["need_w"].toBool();
    const std::int64_t n = hs.size(0), step = ctx->saved_data["step"].toInt();
    const double cap = ctx->saved_data["cap"].toDouble(), scale = grad_out[0].item<double>();
    Tensor grad_hs = need_h ? torch::empty_like(hs) : Tensor();
    Tensor grad_w = need_w ? torch::zeros_like(weight) : Tensor();
    for (std::int64_t r0 = 0; r0 < n; r0 += step) {
      const std::int64_t r1 = std::min(n, r0 + step);
      const Tensor h = hs.slice(0, r0, r1);
      SliceLoss s = slice_loss(h, weight, ts.slice(0, r0, r1), cap, scale);
      if (need_h) {
        Tensor dst = grad_hs.slice(0, r0, r1);
        matmul_into(dst, s.grad, weight);
      }
      if (need_w) matmul_into(grad_w, s.grad.t(), h, /*accumulate=*/true);
    }
    if (need_h) out[0] = scatter_rows(grad_hs, rows, all_rows, sizes);
    out[1] = grad_w;
    return out;
  }
};

}  // namespace

Tensor linear_cross_entropy_sum(const Tensor& hidden, const Tensor& weight, const Tensor& targets, double softcap,
                                std::int64_t slice_elements) {
  const bool grad = torch::GradMode::is_enabled();
  return LinearCrossEntropy::apply(hidden, weight, targets, softcap,
                                   slice_elements > 0 ? slice_elements : strategies::kCrossEntropySliceElements,
                                   grad && hidden.requires_grad(), grad && weight.requires_grad());
}

}  // namespace tailor::runner
