#include "runner/torch/kernels.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

// Loops are written so that GCC vectorizes them (no calls, no branches in
// the inner loops); target_clones builds each kernel for AVX-512, AVX2 and
// baseline x86-64 and the loader picks the best the CPU has.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TAILOR_KERNEL __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TAILOR_KERNEL
#endif
#define TAILOR_INLINE inline __attribute__((always_inline))

namespace tailor::runner::kernels {
namespace {

TAILOR_INLINE float ld(float x) { return x; }
TAILOR_INLINE float ld(bf16 h) { return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16); }

TAILOR_INLINE void st(float& out, float x) { out = x; }
// Round to nearest even, as c10::BFloat16 does; NaN stays a quiet NaN.
TAILOR_INLINE void st(bf16& out, float x) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  out = static_cast<bf16>(x != x ? 0x7fc0u : rounded);
}

// exp(x) to ~2e-7 relative error, branch-free so that loops calling it
// vectorize: x = n ln2 + f with |f| <= ln2/2 (Cody-Waite split of ln2),
// e^f by its degree-6 Taylor polynomial (remainder < 0.347^7/7! = 1.2e-7),
// 2^n built in the exponent bits. Inputs are clamped to [-87, 88], inside
// fp32's normal range; NaN propagates.
TAILOR_INLINE float fast_exp(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  const float f = x - n * 0.693145751953125f - n * 1.42860682030941723e-6f;
  float p = 1.0f / 720;
  p = p * f + 1.0f / 120;
  p = p * f + 1.0f / 24;
  p = p * f + 1.0f / 6;
  p = p * f + 0.5f;
  p = p * f + 1.0f;
  p = p * f + 1.0f;
  const std::int32_t e = static_cast<std::int32_t>(n) + 127;
  return p * std::bit_cast<float>(static_cast<std::uint32_t>(e) << 23);
}

template <class T>
TAILOR_INLINE void ce_forward(const T* logits, std::int64_t r0, std::int64_t r1, std::int64_t v,
                              const std::int64_t* targets, std::int64_t ignore, float* lse, double* loss) {
  for (std::int64_t r = r0; r < r1; ++r) {
    const T* x = logits + r * v;
    float m = -std::numeric_limits<float>::infinity();
    for (std::int64_t j = 0; j < v; ++j) m = std::max(m, ld(x[j]));
    float sum = 0;
    for (std::int64_t j = 0; j < v; ++j) sum += fast_exp(ld(x[j]) - m);
    lse[r] = m + std::log(sum);
    const std::int64_t t = targets[r];
    loss[r] = t == ignore ? 0.0 : static_cast<double>(lse[r]) - static_cast<double>(ld(x[t]));
  }
}

template <class T>
TAILOR_INLINE void ce_backward(const T* logits, std::int64_t r0, std::int64_t r1, std::int64_t v,
                               const std::int64_t* targets, std::int64_t ignore, const float* lse, float scale,
                               T* grad) {
  for (std::int64_t r = r0; r < r1; ++r) {
    const T* x = logits + r * v;
    T* g = grad + r * v;
    const std::int64_t t = targets[r];
    const float s = t == ignore ? 0.0f : scale, l = lse[r];
    for (std::int64_t j = 0; j < v; ++j) st(g[j], s * fast_exp(ld(x[j]) - l));
    if (t != ignore) st(g[t], s * (fast_exp(ld(x[t]) - l) - 1.0f));
  }
}

template <class T>
TAILOR_INLINE void swiglu_fwd(const T* gate_up, std::int64_t r0, std::int64_t r1, std::int64_t i, T* y) {
  for (std::int64_t r = r0; r < r1; ++r) {
    const T* g = gate_up + r * 2 * i;
    const T* u = g + i;
    T* out = y + r * i;
    for (std::int64_t j = 0; j < i; ++j) {
      const float gj = ld(g[j]);
      st(out[j], gj / (1.0f + fast_exp(-gj)) * ld(u[j]));
    }
  }
}

template <class T>
TAILOR_INLINE void swiglu_bwd(const T* gate_up, const T* dy, std::int64_t r0, std::int64_t r1, std::int64_t i,
                              T* grad) {
  for (std::int64_t r = r0; r < r1; ++r) {
    const T* g = gate_up + r * 2 * i;
    const T* u = g + i;
    const T* d = dy + r * i;
    T* dg = grad + r * 2 * i;
    T* du = dg + i;
    for (std::int64_t j = 0; j < i; ++j) {
      const float gj = ld(g[j]), uj = ld(u[j]), dj = ld(d[j]);
      const float s = 1.0f / (1.0f + fast_exp(-gj));
      // d silu(g) / dg = s (1 + g (1 - s))
      st(dg[j], dj * uj * s * (1.0f + gj * (1.0f - s)));
      st(du[j], dj * gj * s);
    }
  }
}

template <class T>
TAILOR_INLINE void rms_fwd(const T* x, const T* w, std::int64_t r0, std::int64_t r1, std::int64_t c, float eps, T* y,
                           float* rstd) {
  for (std::int64_t r = r0; r < r1; ++r) {
    const T* xr = x + r * c;
    float ss = 0;
    for (std::int64_t j = 0; j < c; ++j) ss += ld(xr[j]) * ld(xr[j]);
    const float rs = 1.0f / std::sqrt(ss / static_cast<float>(c) + eps);
    rstd[r] = rs;
    T* yr = y + r * c;
    for (std::int64_t j = 0; j < c; ++j) st(yr[j], ld(xr[j]) * rs * ld(w[j]));
  }
}

template <class T>
TAILOR_INLINE void rms_bwd(const T* x, const T* w, const float* rstd, const T* dy, std::int64_t r0, std::int64_t r1,
                           std::int64_t c, T* dx, float* dw) {
  for (std::int64_t r = r0; r < r1; ++r) {
    const T* xr = x + r * c;
    const T* dr = dy + r * c;
    const float rs = rstd[r];
    float dot = 0;
    for (std::int64_t j = 0; j < c; ++j) dot += ld(dr[j]) * ld(w[j]) * ld(xr[j]) * rs;
    dot /= static_cast<float>(c);
    T* out = dx + r * c;
    for (std::int64_t j = 0; j < c; ++j) {
      const float xhat = ld(xr[j]) * rs;
      st(out[j], rs * (ld(dr[j]) * ld(w[j]) - xhat * dot));
      dw[j] += ld(dr[j]) * xhat;
    }
  }
}

template <class T>
TAILOR_INLINE void rope_rows(const T* x, std::int64_t r0, std::int64_t r1, std::int64_t width, std::int64_t rotated,
                             std::int64_t d, const float* cos, const float* sin, bool inverse, T* y) {
  const std::int64_t half = d / 2;
  const float sign = inverse ? -1.0f : 1.0f;
  for (std::int64_t r = r0; r < r1; ++r) {
    const T* xr = x + r * width;
    T* yr = y + r * width;
    const float* c = cos + r * half;
    const float* s = sin + r * half;
    for (std::int64_t h = 0; h < rotated; ++h) {
      const T* a = xr + h * d;
      const T* b = a + half;
      T* ya = yr + h * d;
      T* yb = ya + half;
      for (std::int64_t j = 0; j < half; ++j) {
        const float aj = ld(a[j]), bj = ld(b[j]), sj = sign * s[j];
        st(ya[j], aj * c[j] - bj * sj);
        st(yb[j], bj * c[j] + aj * sj);
      }
    }
    for (std::int64_t j = rotated * d; j < width; ++j) yr[j] = xr[j];
  }
}

// The arguments are copied into locals and the pointers marked restrict:
// read through `a` in the loop, they could alias the float stores, and GCC
// then reloads them and, with the bf16 copy's conditional store (which
// AVX2 cannot mask at 16 bits), leaves the loop scalar (0.3x ATen's
// `_fused_adamw_` on an AVX2 EPYC). The copy is a template parameter for the
// same reason.
template <bool kCopy, class P, class G, class S>
TAILOR_INLINE void adamw_loop(P* __restrict p, S* __restrict m, S* __restrict v, const G* __restrict grad,
                              std::int64_t n, const AdamWArgs& a, bf16* __restrict out) {
  const float b1 = a.beta1, b2 = a.beta2, c1 = 1.0f - a.beta1, c2 = 1.0f - a.beta2;
  const float scale = a.grad_scale, lr_wd = a.lr_wd, step = a.step_size, sqrt_bc2 = a.sqrt_bc2, eps = a.eps;
  for (std::int64_t k = 0; k < n; ++k) {
    const float g = ld(grad[k]) * scale;
    const float mk = b1 * ld(m[k]) + c1 * g;
    const float vk = b2 * ld(v[k]) + c2 * g * g;
    float pk = ld(p[k]);
    pk -= lr_wd * pk;
    pk -= step * mk / (std::sqrt(vk) / sqrt_bc2 + eps);
    st(m[k], mk);
    st(v[k], vk);
    st(p[k], pk);
    if constexpr (kCopy) st(out[k], pk);
  }
}

template <class P, class G, class S>
TAILOR_INLINE void adamw_loop(P* p, S* m, S* v, const G* grad, std::int64_t n, const AdamWArgs& a, bf16* out) {
  if (out != nullptr) {
    adamw_loop<true>(p, m, v, grad, n, a, out);
  } else {
    adamw_loop<false>(p, m, v, grad, n, a, out);
  }
}

// A float's bits as an unsigned integer in the floats' order.
TAILOR_INLINE std::uint32_t ordered_bits(float x) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}

// The number of the 255 ascending bounds below x: the table's count for x's
// top 16 ordered bits, then the bounds within that span stepped over (at
// most kBucketSteps; the +inf past the end stops the last). A loop that
// usually stops at once: 1.8x faster here than a fixed kBucketSteps steps.
TAILOR_INLINE std::uint8_t bucket(const float* bounds, const std::uint8_t* index, float x) {
  std::int32_t pos = index[ordered_bits(x) >> 16];
  while (bounds[pos] < x)
    ++pos;
  return static_cast<std::uint8_t>(pos);
}

// One block in three passes over L1-resident scratch: decode and update
// (vectorizable but for the map gathers), the absmaxes, then encode.
template <class P, class G>
TAILOR_INLINE void adamw_8bit_blocks(P* __restrict p, const G* __restrict grad, std::uint8_t* __restrict cm,
                                     float* __restrict am, std::uint8_t* __restrict cv, float* __restrict av,
                                     std::int64_t n, std::int64_t block, std::int64_t b0, std::int64_t b1,
                                     const Adamw8bitArgs& a) {
  const float b1f = a.beta1, b2f = a.beta2, c1 = 1.0f - a.beta1, c2 = 1.0f - a.beta2;
  const float scale = a.grad_scale, step = a.step_size, sqrt_bc2 = a.sqrt_bc2, eps = a.eps;
  const float* __restrict map_m = a.map_m, * __restrict map_v = a.map_v;
  alignas(64) float m[kAdamw8bitMaxBlock];
  alignas(64) float v[kAdamw8bitMaxBlock];
  for (std::int64_t b = b0; b < b1; ++b) {
    const std::int64_t e0 = b * block, len = std::min(block, n - e0);
    const float sm = am[b], sv = av[b];
    for (std::int64_t k = 0; k < len; ++k) {
      const float g = ld(grad[e0 + k]) * scale;
      const float mk = b1f * (map_m[cm[e0 + k]] * sm) + c1 * g;
      const float vk = b2f * (map_v[cv[e0 + k]] * sv) + c2 * g * g;
      float pk = ld(p[e0 + k]);
      pk -= step * mk / (std::sqrt(vk) / sqrt_bc2 + eps);
      st(p[e0 + k], pk);
      m[k] = mk;
      v[k] = vk;
    }
    float mmax = 0, vmax = 0;
    for (std::int64_t k = 0; k < len; ++k) {
      mmax = std::max(mmax, std::fabs(m[k]));
      vmax = std::max(vmax, std::fabs(v[k]));
    }
    mmax = mmax == 0 ? 1.0f : mmax;
    vmax = vmax == 0 ? 1.0f : vmax;
    for (std::int64_t k = 0; k < len; ++k) {
      cm[e0 + k] = bucket(a.bounds_m, a.index_m, m[k] / mmax);
      cv[e0 + k] = bucket(a.bounds_v, a.index_v, v[k] / vmax);
    }
    am[b] = mmax;
    av[b] = vmax;
  }
}

template <class T>
TAILOR_INLINE double sum_sq(const T* x, std::int64_t n) {
  double s = 0;
  for (std::int64_t k = 0; k < n; ++k) {
    const double e = ld(x[k]);
    s += e * e;
  }
  return s;
}

}  // namespace

TAILOR_KERNEL void cross_entropy_forward(const float* logits, std::int64_t r0, std::int64_t r1, std::int64_t v,
                                         const std::int64_t* targets, std::int64_t ignore, float* lse, double* loss) {
  ce_forward(logits, r0, r1, v, targets, ignore, lse, loss);
}
TAILOR_KERNEL void cross_entropy_forward(const bf16* logits, std::int64_t r0, std::int64_t r1, std::int64_t v,
                                         const std::int64_t* targets, std::int64_t ignore, float* lse, double* loss) {
  ce_forward(logits, r0, r1, v, targets, ignore, lse, loss);
}
TAILOR_KERNEL void cross_entropy_backward(const float* logits, std::int64_t r0, std::int64_t r1, std::int64_t v,
                                          const std::int64_t* targets, std::int64_t ignore, const float* lse,
                                          float scale, float* grad) {
  ce_backward(logits, r0, r1, v, targets, ignore, lse, scale, grad);
}
TAILOR_KERNEL void cross_entropy_backward(const bf16* logits, std::int64_t r0, std::int64_t r1, std::int64_t v,
                                          const std::int64_t* targets, std::int64_t ignore, const float* lse,
                                          float scale, bf16* grad) {
  ce_backward(logits, r0, r1, v, targets, ignore, lse, scale, grad);
}

TAILOR_KERNEL void swiglu_forward(const float* gate_up, std::int64_t r0, std::int64_t r1, std::int64_t i, float* y) {
  swiglu_fwd(gate_up, r0, r1, i, y);
}
TAILOR_KERNEL void swiglu_forward(const bf16* gate_up, std::int64_t r0, std::int64_t r1, std::int64_t i, bf16* y) {
  swiglu_fwd(gate_up, r0, r1, i, y);
}
TAILOR_KERNEL void swiglu_backward(const float* gate_up, const float* dy, std::int64_t r0, std::int64_t r1,
                                   std::int64_t i, float* grad) {
  swiglu_bwd(gate_up, dy, r0, r1, i, grad);
}
TAILOR_KERNEL void swiglu_backward(const bf16* gate_up, const bf16* dy, std::int64_t r0, std::int64_t r1,
                                   std::int64_t i, bf16* grad) {
  swiglu_bwd(gate_up, dy, r0, r1, i, grad);
}

TAILOR_KERNEL void rms_norm_forward(const float* x, const float* w, std::int64_t r0, std::int64_t r1, std::int64_t c,
                                    float eps, float* y, float* rstd) {
  rms_fwd(x, w, r0, r1, c, eps, y, rstd);
}
TAILOR_KERNEL void rms_norm_forward(const bf16* x, const bf16* w, std::int64_t r0, std::int64_t r1, std::int64_t c,
                                    float eps, bf16* y, float* rstd) {
  rms_fwd(x, w, r0, r1, c, eps, y, rstd);
}
TAILOR_KERNEL void rms_norm_backward(const float* x, const float* w, const float* rstd, const float* dy,
                                     std::int64_t r0, std::int64_t r1, std::int64_t c, float* dx, float* dw_partial) {
  rms_bwd(x, w, rstd, dy, r0, r1, c, dx, dw_partial);
}
TAILOR_KERNEL void rms_norm_backward(const bf16* x, const bf16* w, const float* rstd, const bf16* dy, std::int64_t r0,
                                     std::int64_t r1, std::int64_t c, bf16* dx, float* dw_partial) {
  rms_bwd(x, w, rstd, dy, r0, r1, c, dx, dw_partial);
}

TAILOR_KERNEL void rope(const float* x, std::int64_t r0, std::int64_t r1, std::int64_t width, std::int64_t rotated,
                        std::int64_t d, const float* cos, const float* sin, bool inverse, float* y) {
  rope_rows(x, r0, r1, width, rotated, d, cos, sin, inverse, y);
}
TAILOR_KERNEL void rope(const bf16* x, std::int64_t r0, std::int64_t r1, std::int64_t width, std::int64_t rotated,
                        std::int64_t d, const float* cos, const float* sin, bool inverse, bf16* y) {
  rope_rows(x, r0, r1, width, rotated, d, cos, sin, inverse, y);
}

TAILOR_KERNEL void adamw(float* p, float* m, float* v, const float* grad, std::int64_t n, const AdamWArgs& a,
                         bf16* out) {
  adamw_loop(p, m, v, grad, n, a, out);
}
TAILOR_KERNEL void adamw(float* p, float* m, float* v, const bf16* grad, std::int64_t n, const AdamWArgs& a,
                         bf16* out) {
  adamw_loop(p, m, v, grad, n, a, out);
}
TAILOR_KERNEL void adamw(bf16* p, bf16* m, bf16* v, const bf16* grad, std::int64_t n, const AdamWArgs& a) {
  adamw_loop(p, m, v, grad, n, a, nullptr);
}

int bucket_index(const float* bounds, std::uint8_t* index) {
  std::int32_t below = 0, widest = 0;
  for (std::int64_t k = 0; k < kBucketIndexSize; ++k) {
    // Bounds whose ordered bits fall under the first float of this k.
    const std::uint32_t first = static_cast<std::uint32_t>(k) << 16;
    const std::int32_t before = below;
    while (below < 255 && ordered_bits(bounds[below]) < first)
      ++below;
    index[k] = static_cast<std::uint8_t>(below);
    if (k > 0) widest = std::max(widest, below - before);
  }
  return std::max(widest, 255 - below);
}

std::uint8_t bounds_below(const float* bounds, const std::uint8_t* index, float x) { return bucket(bounds, index, x); }

TAILOR_KERNEL void adamw_8bit(float* p, const float* grad, std::uint8_t* codes_m, float* absmax_m,
                              std::uint8_t* codes_v, float* absmax_v, std::int64_t n, std::int64_t block,
                              std::int64_t b0, std::int64_t b1, const Adamw8bitArgs& a) {
  adamw_8bit_blocks(p, grad, codes_m, absmax_m, codes_v, absmax_v, n, block, b0, b1, a);
}
TAILOR_KERNEL void adamw_8bit(float* p, const bf16* grad, std::uint8_t* codes_m, float* absmax_m, std::uint8_t* codes_v,
                              float* absmax_v, std::int64_t n, std::int64_t block, std::int64_t b0, std::int64_t b1,
                              const Adamw8bitArgs& a) {
  adamw_8bit_blocks(p, grad, codes_m, absmax_m, codes_v, absmax_v, n, block, b0, b1, a);
}
TAILOR_KERNEL void adamw_8bit(bf16* p, const bf16* grad, std::uint8_t* codes_m, float* absmax_m, std::uint8_t* codes_v,
                              float* absmax_v, std::int64_t n, std::int64_t block, std::int64_t b0, std::int64_t b1,
                              const Adamw8bitArgs& a) {
  adamw_8bit_blocks(p, grad, codes_m, absmax_m, codes_v, absmax_v, n, block, b0, b1, a);
}

TAILOR_KERNEL double sum_squares(const float* x, std::int64_t n) { return sum_sq(x, n); }
TAILOR_KERNEL double sum_squares(const bf16* x, std::int64_t n) { return sum_sq(x, n); }

}  // namespace tailor::runner::kernels
