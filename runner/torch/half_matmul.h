// The runner's matrix products, with bf16 on CPUs that lack it in hardware
// computed through fp32.
//
// Why: without AVX-512 (oneDNN's bf16 path) LibTorch 2.11 multiplies CPU
// bf16 matrices in its scalar fallback, 30-40x slower than its fp32 GEMM
// (an AVX2 EPYC, 2 threads: 2.2 against 80 GFLOP/s on 512x256x688); a
// bf16 step there spent three quarters of its time in it. Here each
// product is taken a block at a time: the blocks converted to fp32 in a
// per-thread scratch, multiplied by the fp32 GEMM, and rounded once to
// bf16, as the fallback rounds its fp32 sums. Results differ from
// LibTorch's only in the fp32 summation order (about 1 element in 10^4 by
// one bf16 step). The scratch (at most 3 MiB a thread) is the kernel's
// workspace, like the GEMM's own packing buffers: it is not allocated
// through LibTorch's allocator, so the tracking allocator that stands in
// for GPU memory does not count it. Everything else, and every product in
// another dtype or on a GPU, goes to LibTorch as before.
#pragma once

#include <torch/torch.h>

namespace tailor::runner {

// Whether products of `t`'s dtype on its device go through fp32 here: a
// CPU bf16 tensor on a CPU without bf16 in hardware
// (platform::detect_native_bf16(), the planner's check too).
bool half_matmul_through_fp32(const torch::Tensor& t);

// out = a @ b (+ out when `accumulate`) for 2-D a (m, k), b (k, n) and out
// (m, n) of a's dtype, any strides; through fp32 when
// half_matmul_through_fp32(a), else at::mm_out / addmm_.
void matmul_into(torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& b, bool accumulate = false);

// a @ b for 2-D a and b, as a new tensor.
torch::Tensor matmul_2d(const torch::Tensor& a, const torch::Tensor& b);

// torch::linear (y = x w^T + bias, x of any rank), with autograd; through
// fp32 when half_matmul_through_fp32(x) and w (and bias) share x's dtype,
// keeping what LibTorch's linear keeps: x only when w needs a gradient, w
// only when x does. (Not named linear: argument lookup would find
// at::linear beside it.)
torch::Tensor linear_layer(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bias = {});

// torch::matmul for a (..., m, k) and b (..., k, n) of the same leading
// sizes (attention's scores and their product with the values), with
// autograd; through fp32 as linear_layer is.
torch::Tensor batched_matmul(const torch::Tensor& a, const torch::Tensor& b);

// The blocked fp32 product and the linear layer through it, whatever the
// CPU: for the tests and bench/fused_ops_bench, which compare them with
// LibTorch's on any machine. `bias` of n elements is added in fp32 before
// the rounding.
void matmul_through_fp32(torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& b, bool accumulate = false,
                         const torch::Tensor& bias = {});
torch::Tensor linear_through_fp32(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bias = {});

}  // namespace tailor::runner
