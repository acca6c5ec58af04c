// Autograd operations over the fused kernels: cross-entropy, SwiGLU, GeGLU,
// RMSNorm and RoPE, each one node that keeps only what its backward needs.
// On CPU tensors they run kernels.h's loops, on CUDA tensors the project's
// CUDA kernels (cuda_kernels.h); fused_supported() says where. The model
// falls back to composed ATen ops elsewhere (fp16, a CUDA kernel not
// selected), so both paths give the same results to rounding.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "runner/torch/kernel_selection.h"

namespace tailor::runner {

// True when kernel `k` handles tensors like `t`: fp32 or bf16, on the CPU
// where kernels.h has `k` (not GeGLU), on CUDA where cuda_kernel_enabled(k).
bool fused_supported(const torch::Tensor& t, FusedKernel k);

// Sum over rows of -log softmax(logits)[target], targets == -100 ignored; an
// fp32 scalar. logits (..., V) contiguous, targets (...) int64 in [0, V) or
// -100. Keeps the logits and one fp32 log-sum-exp per row for backward, whose
// gradient is written straight in the logits' dtype.
torch::Tensor fused_cross_entropy_sum(const torch::Tensor& logits, const torch::Tensor& targets);

// The same kernel's pieces without autograd, on contiguous logits (rows, V)
// and int64 targets (rows): each row's fp32 log-sum-exp and fp64 loss (0 on
// ignored rows), then the gradient of scale * the summed loss in the
// logits' dtype. linear_cross_entropy.h runs them a slice of rows at a time.
struct CrossEntropyRows {
  torch::Tensor lse, loss;
};
CrossEntropyRows fused_cross_entropy_rows(const torch::Tensor& logits, const torch::Tensor& targets);
torch::Tensor fused_cross_entropy_rows_grad(const torch::Tensor& logits, const torch::Tensor& targets,
                                            const torch::Tensor& lse, float scale);

// silu(gate) * up for gate_up = [gate, up] along the last dimension
// (..., 2I) -> (..., I). Keeps only gate_up.
torch::Tensor fused_swiglu(const torch::Tensor& gate_up);
// gelu_tanh(gate) * up, the same way; CUDA tensors only.
torch::Tensor fused_geglu(const torch::Tensor& gate_up);

// x * rsqrt(mean(x^2) + eps) * w over the last dimension. Keeps x, w and the
// fp32 inverse RMS per row.
torch::Tensor fused_rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps);

// RoPE on the first `rotated_heads` heads (head size d) of each token's row
// of x (B, T, W); the rest of the row is passed through. cos/sin (B, T, d/2)
// fp32, one value per frequency. Keeps nothing but cos/sin.
torch::Tensor fused_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                         std::int64_t rotated_heads, std::int64_t d);

}  // namespace tailor::runner
