#include "runner/torch/attention.h"

#include <cmath>

namespace tailor::runner {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;

Tensor repeat_heads(const Tensor& t, std::int64_t groups) { return groups > 1 ? t.repeat_interleave(groups, 1) : t; }

// Scores, softmax statistics and gradients are computed in fp32 at least.
torch::ScalarType accumulation_type(const Tensor& t) { return torch::promote_types(t.scalar_type(), torch::kFloat32); }

// The scores of queries [q0, q0 + n) against keys [0, q0 + n).
Tensor block_scores(const Tensor& q, const Tensor& k, const Tensor& mask, std::int64_t q0, std::int64_t n,
                    double scale) {
  const std::int64_t keys = q0 + n;
  Tensor s = torch::matmul(q.narrow(2, q0, n), k.narrow(2, 0, keys).transpose(-2, -1)).to(accumulation_type(q));
  return s.mul_(scale).add_(mask.narrow(2, q0, n).narrow(3, 0, keys));
}

struct BlockwiseAttention : torch::autograd::Function<BlockwiseAttention> {
  static Tensor forward(AutogradContext* ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                        std::int64_t block) {
    const std::int64_t b = q.size(0), h = q.size(1), t = q.size(2), d = q.size(3), groups = h / k.size(1);
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    const Tensor kr = repeat_heads(k, groups), vr = repeat_heads(v, groups);  // transient
    Tensor out = torch::empty({b, t, h, d}, q.options()).transpose(1, 2);
    Tensor lse = torch::empty({b, h, t}, q.options().dtype(accumulation_type(q)));
    for (std::int64_t q0 = 0; q0 < t; q0 += block) {
      const std::int64_t n = std::min(block, t - q0);
      Tensor s = block_scores(q, kr, mask, q0, n, scale);
      Tensor l = torch::logsumexp(s, -1, /*keepdim=*/true);
      Tensor p = s.sub_(l).exp_();
      out.narrow(2, q0, n).copy_(torch::matmul(p.to(q.scalar_type()), vr.narrow(2, 0, q0 + n)));
      lse.narrow(2, q0, n).copy_(l.squeeze(-1));
    }
    ctx->save_for_backward({q, k, v, mask, out, lse});
    ctx->saved_data["block"] = block;
    return out;
  }

  static torch::autograd::variable_list backward(AutogradContext* ctx, torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &q = saved[0], &k = saved[1], &v = saved[2], &mask = saved[3], &out = saved[4], &lse = saved[5];
    const std::int64_t block = ctx->saved_data["block"].toInt();
    const std::int64_t b = q.size(0), h = q.size(1), t = q.size(2), d = q.size(3), kv = k.size(1), groups = h / kv;
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    const auto f32 = accumulation_type(q);
    const Tensor dout = grads[0].to(f32);
    const Tensor kr = repeat_heads(k, groups).to(f32), vr = repeat_heads(v, groups).to(f32), qf = q.to(f32);
    // D_i = sum_j dO_ij O_ij (FlashAttention's backward, algorithm 2, line 19).
    const Tensor delta = (dout * out.to(f32)).sum(-1, /*keepdim=*/true);
    Tensor dq = torch::empty({b, h, t, d}, q.options().dtype(f32));
    Tensor dk = torch::zeros({b, h, t, d}, q.options().dtype(f32)), dv = torch::zeros_like(dk);
    for (std::int64_t q0 = 0; q0 < t; q0 += block) {
      const std::int64_t n = std::min(block, t - q0), keys = q0 + n;
      Tensor p = block_scores(qf, kr, mask, q0, n, scale).sub_(lse.narrow(2, q0, n).unsqueeze(-1)).exp_();
      const Tensor dob = dout.narrow(2, q0, n);
      dv.narrow(2, 0, keys).add_(torch::matmul(p.transpose(-2, -1), dob));
      Tensor ds = torch::matmul(dob, vr.narrow(2, 0, keys).transpose(-2, -1)).sub_(delta.narrow(2, q0, n)).mul_(p);
      dq.narrow(2, q0, n).copy_(torch::matmul(ds, kr.narrow(2, 0, keys))).mul_(scale);
      dk.narrow(2, 0, keys).add_(torch::matmul(ds.transpose(-2, -1), qf.narrow(2, q0, n)).mul_(scale));
    }
    if (groups > 1) {
      dk = dk.view({b, kv, groups, t, d}).sum(2);
      dv = dv.view({b, kv, groups, t, d}).sum(2);
    }
    return {dq.to(q.scalar_type()), dk.to(k.scalar_type()), dv.to(v.scalar_type()), Tensor(), Tensor()};
  }
};

}  // namespace

Tensor blockwise_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, std::int64_t block) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "blockwise_attention: q, k, v must be (B, H, T, D)");
  TORCH_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "blockwise_attention: heads must be a multiple of kv heads");
  TORCH_CHECK(block > 0, "blockwise_attention: block must be positive");
  return BlockwiseAttention::apply(q, k, v, mask.expand({q.size(0), 1, q.size(2), q.size(2)}), block);
}

}  // namespace tailor::runner
