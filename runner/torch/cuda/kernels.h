// Launchers of the runner's own CUDA kernels (the .cu files beside this
// header): fused RMSNorm, RoPE, SwiGLU/GeGLU, cross-entropy, AdamW and NF4
// dequantisation, the CUDA counterparts of ../kernels.h. They take raw
// device pointers and the CUDA stream as void*, so that neither LibTorch's
// headers nor CUDA's are included here: nvcc never compiles LibTorch, and the
// torch wrappers (../cuda_kernels.cpp) never compile device code.
//
// Each launcher queues its kernels on `stream` and returns the launch's
// cudaError_t as an int (0: queued); error_string() names a code. Math is
// fp32 whatever the storage type; bf16 results are rounded to nearest even
// once, at the store. Sizes of 0 queue nothing. Pointers are to contiguous
// row-major data; no alignment beyond the element's is assumed.
#pragma once

#include <cstdint>

#include "runner/torch/kernels.h"

namespace tailor::runner::cuda {

// Storage type of activations, gradients and parameters.
enum class DType { kFloat32, kBFloat16, kFloat16 };

const char* error_string(int code);

// ---- RMSNorm (Zhang & Sennrich 2019) over rows of c values ---------------
// y = x * r * w with r = 1 / sqrt(mean(x^2) + eps), kept per row in rstd.
int rms_norm_forward(DType t, const void* x, const void* w, std::int64_t rows, std::int64_t c, float eps, void* y,
                     float* rstd, void* stream);
// dx = r * (g - xhat * mean(g * xhat)) with g = dy * w, xhat = x * r; the
// weight's gradient as `chunks` fp32 partial sums (chunks, c) over fixed
// row ranges, so its sum does not depend on scheduling.
int rms_norm_backward(DType t, const void* x, const void* w, const float* rstd, const void* dy, std::int64_t rows,
                      std::int64_t c, void* dx, float* dw_partial, std::int64_t chunks, void* stream);

// ---- RoPE (Su et al. 2021), rotate-half layout, as kernels::rope ---------
int rope(DType t, const void* x, std::int64_t rows, std::int64_t width, std::int64_t rotated, std::int64_t d,
         const float* cos, const float* sin, bool inverse, void* y, void* stream);

// ---- Gated linear units: y = act(gate) * up ------------------------------
// gate_up rows hold [gate (i values), up (i values)]; y rows i values; the
// gradient's rows [d gate, d up]. SwiGLU (Shazeer 2020) uses SiLU, GeGLU
// the tanh approximation of GELU (Hendrycks & Gimpel 2016), as Gemma does.
enum class Glu { kSwiglu, kGegluTanh };
int glu_forward(DType t, Glu kind, const void* gate_up, std::int64_t rows, std::int64_t i, void* y, void* stream);
int glu_backward(DType t, Glu kind, const void* gate_up, const void* dy, std::int64_t rows, std::int64_t i, void* grad,
                 void* stream);

// ---- Cross-entropy over rows of v logits, as kernels::cross_entropy_* -----
// lse[r] = log sum exp(x[r]) (one pass, online max), loss[r] = lse[r] -
// x[r, targets[r]], 0 where the target is `ignore`. Targets are assumed in
// range (the caller checks them).
int cross_entropy_forward(DType t, const void* logits, std::int64_t rows, std::int64_t v, const std::int64_t* targets,
                          std::int64_t ignore, float* lse, double* loss, void* stream);
// grad[r, j] = scale * (exp(x[r, j] - lse[r]) - [j == t]), 0 on ignored rows.
int cross_entropy_backward(DType t, const void* logits, std::int64_t rows, std::int64_t v, const std::int64_t* targets,
                           std::int64_t ignore, const float* lse, float scale, void* grad, void* stream);

// ---- AdamW (Loshchilov & Hutter 2019), as kernels::adamw ------------------
// fp32 parameter (or master) and moments; the gradient fp32 or bf16;
// `out_bf16`, when not null, receives the updated parameter in bf16.
int adamw_fp32_states(float* p, float* m, float* v, DType grad_type, const void* grad, std::int64_t n,
                      const kernels::AdamWArgs& a, void* out_bf16, void* stream);
// Pure bf16: parameter, gradient and both moments.
int adamw_bf16(void* p, void* m, void* v, const void* grad, std::int64_t n, const kernels::AdamWArgs& a, void* stream);

// ---- NF4 dequantisation (Dettmers et al. 2023), as ../nf4.h stores it ------
// Blocks [b0, b0 + blocks) of 64 values: packed bytes from b0 * 32 (high
// nibble first); n <= blocks * 64 values written to `out` (the last block's
// padding dropped). Scales: `absmax_codes` null: absmax[b] fp32 per block.
// Otherwise double-quantised: code_map[absmax_codes[b]] * absmax[b / 256] +
// offset, rounded as ../nf4.cpp's ATen ops round (no fused multiply-add).
struct Nf4Levels {
  float value[16];
};
int nf4_dequantize(const std::uint8_t* packed, const float* absmax, const std::uint8_t* absmax_codes,
                   const float* code_map, float absmax_offset, std::int64_t b0, std::int64_t blocks, std::int64_t n,
                   const Nf4Levels& levels, DType out_type, void* out, void* stream);

}  // namespace tailor::runner::cuda
