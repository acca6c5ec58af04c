// Fused element-wise kernels for the training step on CPU, on raw rows of
// fp32 or bf16 values. Each replaces a chain of ATen ops that would read and
// write whole activation-sized tensors several times (docs/libtorch.md: on this
// platform element-wise passes and their fresh allocations, not the matmuls,
// dominate a small model's step). Math is fp32 whatever the storage type;
// bf16 results are rounded to nearest even once, at the store.
//
// Torch-free: the autograd wrappers (fused_ops.h) split rows into chunks and
// run these on LibTorch's thread pool. Every function handles the rows
// [r0, r1) it is given and nothing else, so a fixed chunking gives results
// independent of the thread count. Compiled for AVX-512, AVX2 and baseline
// x86-64 and picked at load time (target_clones).
#pragma once

#include <cstdint>

namespace tailor::runner::kernels {

// bf16 is stored as its raw 16 bits.
using bf16 = std::uint16_t;

// ---- Cross-entropy over the last dimension (V) ---------------------------
// Per row r: lse[r] = log(sum_j exp(x[r, j])), loss[r] = lse[r] - x[r, t]
// with t = targets[r]; rows whose target is `ignore` get loss 0.
void cross_entropy_forward(const float* logits, std::int64_t r0, std::int64_t r1, std::int64_t v,
                           const std::int64_t* targets, std::int64_t ignore, float* lse, double* loss);
void cross_entropy_forward(const bf16* logits, std::int64_t r0, std::int64_t r1, std::int64_t v,
                           const std::int64_t* targets, std::int64_t ignore, float* lse, double* loss);
// grad[r, j] = scale * (exp(x[r, j] - lse[r]) - [j == t]); 0 on ignored rows.
void cross_entropy_backward(const float* logits, std::int64_t r0, std::int64_t r1, std::int64_t v,
                            const std::int64_t* targets, std::int64_t ignore, const float* lse, float scale,
                            float* grad);
void cross_entropy_backward(const bf16* logits, std::int64_t r0, std::int64_t r1, std::int64_t v,
                            const std::int64_t* targets, std::int64_t ignore, const float* lse, float scale,
                            bf16* grad);

// ---- SwiGLU: y = silu(gate) * up ----------------------------------------
// gate_up rows hold [gate (i values), up (i values)]; y rows hold i values.
void swiglu_forward(const float* gate_up, std::int64_t r0, std::int64_t r1, std::int64_t i, float* y);
void swiglu_forward(const bf16* gate_up, std::int64_t r0, std::int64_t r1, std::int64_t i, bf16* y);
// grad rows hold [d gate, d up].
void swiglu_backward(const float* gate_up, const float* dy, std::int64_t r0, std::int64_t r1, std::int64_t i,
                     float* grad);
void swiglu_backward(const bf16* gate_up, const bf16* dy, std::int64_t r0, std::int64_t r1, std::int64_t i,
                     bf16* grad);

// ---- RMSNorm (Zhang & Sennrich 2019): y = x * rsqrt(mean(x^2) + eps) * w --
// rstd[r] keeps the fp32 inverse RMS for backward.
void rms_norm_forward(const float* x, const float* w, std::int64_t r0, std::int64_t r1, std::int64_t c, float eps,
                      float* y, float* rstd);
void rms_norm_forward(const bf16* x, const bf16* w, std::int64_t r0, std::int64_t r1, std::int64_t c, float eps,
                      bf16* y, float* rstd);
// dx = r * (g - xhat * mean(g * xhat)) with g = dy * w, xhat = x * r;
// dw_partial[j] += sum over the rows of dy * xhat (fp32, caller-zeroed).
void rms_norm_backward(const float* x, const float* w, const float* rstd, const float* dy, std::int64_t r0,
                       std::int64_t r1, std::int64_t c, float* dx, float* dw_partial);
void rms_norm_backward(const bf16* x, const bf16* w, const float* rstd, const bf16* dy, std::int64_t r0,
                       std::int64_t r1, std::int64_t c, bf16* dx, float* dw_partial);

// ---- RoPE (Su et al. 2021), rotate-half layout -------------------------
// Rows are tokens of `width` values: `rotated` heads of d values get
// [a, b] -> [a cos - b sin, b cos + a sin] (a, b the halves), the rest of
// the row is copied. cos/sin hold d/2 fp32 values per row (one per
// frequency). inverse = true applies the transpose (for backward).
void rope(const float* x, std::int64_t r0, std::int64_t r1, std::int64_t width, std::int64_t rotated, std::int64_t d,
          const float* cos, const float* sin, bool inverse, float* y);
void rope(const bf16* x, std::int64_t r0, std::int64_t r1, std::int64_t width, std::int64_t rotated, std::int64_t d,
          const float* cos, const float* sin, bool inverse, bf16* y);

// ---- AdamW (Loshchilov & Hutter 2019), one pass per parameter -------------
// For n elements: g = grad * grad_scale; m = b1 m + (1 - b1) g;
// v = b2 v + (1 - b2) g^2; p -= lr * wd * p (decoupled, before the update);
// p -= step_size * m / (sqrt(v) / sqrt_bc2 + eps). `p` is the fp32 master
// (or the parameter itself); `out`, when not null, receives p in bf16.
struct AdamWArgs {
  float beta1, beta2, eps, lr_wd, step_size, sqrt_bc2, grad_scale;
};
void adamw(float* p, float* m, float* v, const float* grad, std::int64_t n, const AdamWArgs& a, bf16* out);
void adamw(float* p, float* m, float* v, const bf16* grad, std::int64_t n, const AdamWArgs& a, bf16* out);
// Pure bf16: parameter, gradient and both moments bf16.
void adamw(bf16* p, bf16* m, bf16* v, const bf16* grad, std::int64_t n, const AdamWArgs& a);

// ---- 8-bit AdamW (Dettmers et al. 2022), one pass per block ----------------
// Both moments stored block-wise in one-byte codes of a 256-value map with an
// fp32 absmax per block (adamw_8bit.h). For the blocks [b0, b1) of `block`
// elements (the last ends at n): the moments decoded (map[code] * absmax),
// the AdamW update of kernels::adamw without weight decay (the caller's),
// then each block's new moments encoded again: absmax = max |x| (1 where all
// are 0) and code = the number of `bounds` below x / absmax (the nearest map
// value; torch.bucketize's). maps: 256 fp32 ascending; bounds: their 255
// midpoints; index: bucket_index of the bounds. block <= kAdamw8bitMaxBlock.
inline constexpr std::int64_t kAdamw8bitMaxBlock = 4096;
struct Adamw8bitArgs {
  float beta1, beta2, eps, step_size, sqrt_bc2, grad_scale;
  const float *map_m, *bounds_m, *map_v, *bounds_v;
  const std::uint8_t *index_m, *index_v;
};
// A search table over 255 ascending bounds (none of them zero), so that
// finding how many lie below x costs a lookup and at most kBucketSteps
// steps instead of eight dependent compares: for each of the 65536 values k
// of the top 16 bits of a float's bits in order (sign flipped, negatives
// inverted), the number of bounds below every float of that k
// (kBucketIndexSize entries). `bounds` as the kernel reads them: the 255
// then kBucketSteps + 1 of +inf. Returns the most bounds one k spans,
// which must not exceed kBucketSteps (the dynamic maps': 2).
inline constexpr std::int64_t kBucketIndexSize = 65536;
inline constexpr int kBucketSteps = 3;
int bucket_index(const float* bounds, std::uint8_t* index);
// The number of bounds below x through such a table, as adamw_8bit counts it.
std::uint8_t bounds_below(const float* bounds, const std::uint8_t* index, float x);
void adamw_8bit(float* p, const float* grad, std::uint8_t* codes_m, float* absmax_m, std::uint8_t* codes_v,
                float* absmax_v, std::int64_t n, std::int64_t block, std::int64_t b0, std::int64_t b1,
                const Adamw8bitArgs& a);
void adamw_8bit(float* p, const bf16* grad, std::uint8_t* codes_m, float* absmax_m, std::uint8_t* codes_v,
                float* absmax_v, std::int64_t n, std::int64_t block, std::int64_t b0, std::int64_t b1,
                const Adamw8bitArgs& a);
void adamw_8bit(bf16* p, const bf16* grad, std::uint8_t* codes_m, float* absmax_m, std::uint8_t* codes_v,
                float* absmax_v, std::int64_t n, std::int64_t block, std::int64_t b0, std::int64_t b1,
                const Adamw8bitArgs& a);

// Sum of squares in double (the global gradient norm).
double sum_squares(const float* x, std::int64_t n);
double sum_squares(const bf16* x, std::int64_t n);

}  // namespace tailor::runner::kernels
