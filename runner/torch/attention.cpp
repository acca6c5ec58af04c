#include "runner/torch/attention.h"

#include <cmath>
#include <limits>

#include "runner/torch/half_matmul.h"

namespace tailor::runner {

using torch::Tensor;

Tensor attention_mask(const Tensor& segment_ids, std::int64_t t, bool fused, torch::ScalarType dtype,
                      const torch::Device& device, std::int64_t window) {
  const auto on = torch::TensorOptions().device(device);
  const bool windowed = window > 0 && window < t;  // a window as long as the sequence changes nothing
  if (fused && !segment_ids.defined() && !windowed) return torch::empty({0}, on);
  Tensor allowed = torch::ones({t, t}, on.dtype(torch::kBool)).tril();
  if (windowed) allowed = allowed.triu(-(window - 1));  // j > i - window
  if (segment_ids.defined()) {
    // Causal within one document; every position sees itself, so padding
    // rows (segment -1) keep a finite softmax.
    Tensor same = segment_ids.unsqueeze(2) == segment_ids.unsqueeze(1);  // (B, T, T)
    allowed = (allowed.unsqueeze(0) & same) | torch::eye(t, on.dtype(torch::kBool)).unsqueeze(0);
  } else {
    allowed = allowed.unsqueeze(0);
  }
  allowed = allowed.unsqueeze(1);  // (B|1, 1, T, T)
  return torch::zeros(allowed.sizes(), on.dtype(dtype))
      .masked_fill_(allowed.logical_not(), -std::numeric_limits<float>::infinity());
}

namespace {

// Scaled dot-product attention: `mask` additive when given; causal (the
// kernels' own top-left causal mask, q and k of one length) when asked.
Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const std::optional<Tensor>& mask, bool causal,
              bool fused, const AttentionScores& sc) {
  const std::int64_t heads = q.size(1), kv_heads = k.size(1), d = q.size(3);
  TORCH_CHECK(!(fused && sc.softcap > 0), "attention: soft-capped scores need materialised attention");
  const double scale = sc.scale > 0 ? sc.scale : 1.0 / std::sqrt(static_cast<double>(d));
  const std::optional<double> sdpa_scale = sc.scale > 0 ? std::optional<double>(sc.scale) : std::nullopt;
  if (fused) {
    if (heads != kv_heads && q.is_cuda() && q.scalar_type() == torch::kFloat32) {
      // On a GPU in fp32 only SDPA's math kernel takes grouped heads, and it
      // keeps the s x s scores (measured on an H100: twice the activations);
      // the memory-efficient kernel takes K and V repeated to every head.
      return at::scaled_dot_product_attention(q, k.repeat_interleave(heads / kv_heads, 1),
                                              v.repeat_interleave(heads / kv_heads, 1), mask, 0.0, causal,
                                              sdpa_scale);
    }
    return at::scaled_dot_product_attention(q, k, v, mask, /*dropout_p=*/0.0, /*is_causal=*/causal,
                                            /*scale=*/sdpa_scale, /*enable_gqa=*/heads != kv_heads);
  }
  Tensor kr = k, vr = v;
  if (kv_heads != heads) {
    kr = k.repeat_interleave(heads / kv_heads, 1);
    vr = v.repeat_interleave(heads / kv_heads, 1);
  }
  // In place: the scores are a fresh tensor that nothing saves for backward.
  Tensor scores = batched_matmul(q, kr.transpose(-2, -1)).mul_(scale);
  // tanh keeps its output for backward: the cap's product is a new tensor.
  if (sc.softcap > 0) scores = torch::tanh(scores.div_(sc.softcap)) * sc.softcap;
  if (mask) scores.add_(*mask);
  return batched_matmul(torch::softmax(scores, -1), vr);
}

}  // namespace

Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool fused,
                        const AttentionScores& sc) {
  // Materialised attention always has a mask (attention_mask()); the fused
  // kernels' empty one means their causal path.
  if (fused && mask.numel() == 0) return attend(q, k, v, std::nullopt, /*causal=*/true, fused, sc);
  return attend(q, k, v, mask, /*causal=*/false, fused, sc);
}

Tensor cached_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool fused,
                        const AttentionScores& sc) {
  return attend(q, k, v, mask.defined() ? std::optional<Tensor>(mask) : std::nullopt, /*causal=*/false, fused, sc);
}

}  // namespace tailor::runner
