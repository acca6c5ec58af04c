// Causal self-attention for the model's blocks, in the two forms the
// planner models (strategies::Attention):
//   fused:        at::scaled_dot_product_attention, LibTorch's flash kernel
//                 on the CPU and flash or memory-efficient kernels on CUDA.
//                 Backward keeps q, k, v, the output and one fp32
//                 log-sum-exp per row, no (T x T) scores; grouped-query
//                 heads read their K/V head without a repeated copy.
//   materialised: softmax(q k^T / sqrt(D) + mask) v in ATen ops, keeping
//                 the (T x T) softmax per head; faster than the flash CPU
//                 kernel for short bf16 sequences (docs/benchmarks.md,
//                 "Fused attention on the CPU").
// Which one a run uses is strategies::attention_for(), shared with the
// planner so that the estimate and the run agree.
#pragma once

#include <torch/torch.h>

namespace tailor::runner {

// The mask argument of causal_attention(), built once per forward for all
// layers from the rows' packed-document ids (ModelInput::segment_ids,
// undefined = one document per row).
//   additive (B|1, 1, T, T) in `dtype`, 0 or -inf; for fused attention an
//   empty tensor when every row is one document (the kernels' is_causal
//   path, no mask at all). Additive rather than bool for the fused kernels
//   too: SDPA converts a bool mask to an additive one on every call, and
//   each layer's flash backward would then keep its own copy.
// window > 0: a sliding window (Mistral 7B v0.1): position i sees
// positions i - window < j <= i only, as transformers' sliding-window mask.
torch::Tensor attention_mask(const torch::Tensor& segment_ids, std::int64_t t, bool fused, torch::ScalarType dtype,
                             const torch::Device& device, std::int64_t window = 0);

// How scores are formed from q.k: scaled by `scale` (0: 1/sqrt(D)), then,
// when softcap > 0, capped as softcap * tanh(score / softcap) before the
// mask (Gemma 2). The fused kernels take no cap: capped attention is
// materialised.
struct AttentionScores {
  double scale = 0;
  double softcap = 0;
};

// q (B, H, T, D); k, v (B, KV, T, D) with H a multiple of KV; mask from
// attention_mask() with the same `fused`. Returns (B, H, T, D), a view of a
// (B, T, H, D) tensor where the kernel writes that layout, so that merging
// the heads costs no copy.
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& mask, bool fused, const AttentionScores& scores = {});

// Generation over a KV cache: q (B, H, T, D) for the last T of k and v's
// (B, KV, n, D) positions. `mask` is additive (B|1, 1, T, n); undefined,
// every query sees every key (one new position, nothing outside a window).
torch::Tensor cached_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& mask, bool fused, const AttentionScores& scores = {});

}  // namespace tailor::runner
