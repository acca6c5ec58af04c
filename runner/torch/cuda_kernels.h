// The runner's own CUDA kernels (cuda/kernels.h) as operations on LibTorch
// tensors, and which of them run. fused_ops.cpp, optimizer.cpp and nf4.cpp
// call these on CUDA tensors where cuda_kernel_enabled() says so; elsewhere
// they use ATen's operations. Every operation takes contiguous CUDA tensors
// (fp32 or bf16 unless said otherwise), queues its kernels on the current
// stream and throws c10::Error on a failed launch or, in a build without
// CUDA, on any call.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <utility>

#include "core/status.h"
#include "runner/torch/cuda/kernels.h"
#include "runner/torch/kernel_selection.h"

namespace tailor::runner {

// Reads TAILOR_CUDA_KERNELS into the selection: InvalidArgument on a bad
// value (the selection then stays the verified kernels). A run calls it
// once before its first step; later calls read the variable again.
Status select_cuda_kernels();

// Whether `k` runs on CUDA tensors: this build has the CUDA path and `k` is
// selected (the verified kernels until select_cuda_kernels() or a test says
// otherwise). Thread-safe.
bool cuda_kernel_enabled(FusedKernel k);

// The selection in force ("none" in a build without CUDA), for the start event.
std::string cuda_kernels_in_use();

// Replaces the selection, for tests; returns the previous one.
KernelSet set_cuda_kernels(KernelSet s);

// y and the fp32 inverse RMS per row (rows).
std::pair<torch::Tensor, torch::Tensor> cuda_rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps);
// dx, and dw in fp32 (c).
std::pair<torch::Tensor, torch::Tensor> cuda_rms_norm_backward(const torch::Tensor& x, const torch::Tensor& w,
                                                               const torch::Tensor& rstd, const torch::Tensor& dy);
// x (..., width) rotated as kernels::rope; cos/sin fp32 (rows, d/2).
torch::Tensor cuda_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        std::int64_t rotated, std::int64_t d, bool inverse);
// act(gate) * up of gate_up (..., 2I) -> (..., I), and its gradient (..., 2I).
torch::Tensor cuda_glu(const torch::Tensor& gate_up, cuda::Glu kind);
torch::Tensor cuda_glu_backward(const torch::Tensor& gate_up, const torch::Tensor& dy, cuda::Glu kind);
// Per row of logits (rows, V) and int64 targets (rows): the fp32
// log-sum-exp and fp64 loss, then the gradient of scale * the summed loss.
std::pair<torch::Tensor, torch::Tensor> cuda_cross_entropy_rows(const torch::Tensor& logits,
                                                                const torch::Tensor& targets);
torch::Tensor cuda_cross_entropy_rows_grad(const torch::Tensor& logits, const torch::Tensor& targets,
                                           const torch::Tensor& lse, float scale);
// One AdamW step in place. fp32 p, m, v with an fp32 or bf16 grad (and, when
// defined, the bf16 parameter `out` the updated p is written to), or all
// four bf16 with `out` undefined. False, with nothing queued, for any other
// layout.
bool cuda_adamw(const torch::Tensor& p, const torch::Tensor& m, const torch::Tensor& v, const torch::Tensor& grad,
                const kernels::AdamWArgs& a, const torch::Tensor& out);
// NF4 blocks [b0, b0 + blocks) as n values of `dtype` (fp32, bf16 or
// fp16): packed uint8, absmax fp32 per block (codes undefined) or per 256
// blocks with uint8 codes per block into the fp32 code map (256).
torch::Tensor cuda_nf4_dequantize(const torch::Tensor& packed, const torch::Tensor& absmax,
                                  const torch::Tensor& absmax_codes, const torch::Tensor& code_map, float offset,
                                  std::int64_t b0, std::int64_t blocks, std::int64_t n, torch::Dtype dtype);

}  // namespace tailor::runner
