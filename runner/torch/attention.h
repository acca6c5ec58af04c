// Memory-efficient attention: the FlashAttention recipe (Dao et al. 2022,
// algorithms 1 and 2) in ATen ops, one block of queries at a time. Backward
// keeps only q, k, v, the output and one fp32 log-sum-exp per row, and
// recomputes each block's scores, so no (T x T) score matrix per head is
// kept across the step: what the planner assumes for GPU plans
// (Attention::kMemoryEfficient), which LibTorch 1.13 has no fused kernel
// for. Causal: a block of queries only reads keys up to its last row.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace tailor::runner {

// q (B, H, T, D); k, v (B, KV, T, D) with H a multiple of KV (grouped-query
// attention: each group of H / KV query heads reads one K/V head, without a
// repeated copy being kept); mask additive, broadcastable to (B, 1, T, T),
// with at least the diagonal allowed. Returns softmax(q k^T / sqrt(D) +
// mask) v as (B, H, T, D), a view of a (B, T, H, D) tensor so that merging
// the heads costs no copy.
torch::Tensor blockwise_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  const torch::Tensor& mask, std::int64_t block = 256);

}  // namespace tailor::runner
