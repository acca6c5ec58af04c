// RMSNorm forward and backward (Zhang & Sennrich 2019): one block per row
// for y and dx, and a column-parallel pass for the weight's gradient.
#include "runner/torch/cuda/common.cuh"

namespace tailor::runner::cuda {
namespace {

using namespace detail;

template <class T>
__global__ void rms_forward(const T* x, const T* w, std::int64_t rows, std::int64_t c, float eps, T* y, float* rstd) {
  __shared__ float scratch[32];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * c;
    float ss = 0;
    for (std::int64_t j = threadIdx.x; j < c; j += blockDim.x)
      ss += ld(xr[j]) * ld(xr[j]);
    const float rs = 1.0f / sqrtf(block_sum(ss, scratch) / static_cast<float>(c) + eps);
    if (threadIdx.x == 0) rstd[r] = rs;
    T* yr = y + r * c;
    for (std::int64_t j = threadIdx.x; j < c; j += blockDim.x)
      st(&yr[j], ld(xr[j]) * rs * ld(w[j]));
  }
}

template <class T>
__global__ void rms_backward_dx(const T* x, const T* w, const float* rstd, const T* dy, std::int64_t rows,
                                std::int64_t c, T* dx) {
  __shared__ float scratch[32];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * c;
    const T* dr = dy + r * c;
    const float rs = rstd[r];
    float dot = 0;
    for (std::int64_t j = threadIdx.x; j < c; j += blockDim.x)
      dot += ld(dr[j]) * ld(w[j]) * ld(xr[j]) * rs;
    dot = block_sum(dot, scratch) / static_cast<float>(c);
    T* out = dx + r * c;
    for (std::int64_t j = threadIdx.x; j < c; j += blockDim.x) {
      st(&out[j], rs * (ld(dr[j]) * ld(w[j]) - ld(xr[j]) * rs * dot));
    }
  }
}

// Block (x, k) sums its columns over chunk k's rows: consecutive threads
// read consecutive columns of a row.
template <class T>
__global__ void rms_backward_dw(const T* x, const float* rstd, const T* dy, std::int64_t rows, std::int64_t c,
                                std::int64_t chunks, float* partial) {
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= c) return;
  for (std::int64_t k = blockIdx.y; k < chunks; k += gridDim.y) {
    const std::int64_t r0 = rows * k / chunks, r1 = rows * (k + 1) / chunks;
    float acc = 0;
    for (std::int64_t r = r0; r < r1; ++r)
      acc += ld(dy[r * c + col]) * ld(x[r * c + col]) * rstd[r];
    partial[k * c + col] = acc;
  }
}

template <class T>
int forward(const void* x, const void* w, std::int64_t rows, std::int64_t c, float eps, void* y, float* rstd,
            cudaStream_t s) {
  rms_forward<T><<<row_blocks(rows), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(w), rows, c, eps,
                                                       static_cast<T*>(y), rstd);
  return launched();
}

template <class T>
int backward(const void* x, const void* w, const float* rstd, const void* dy, std::int64_t rows, std::int64_t c,
             void* dx, float* dw_partial, std::int64_t chunks, cudaStream_t s) {
  rms_backward_dx<T><<<row_blocks(rows), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(w), rstd,
                                                           static_cast<const T*>(dy), rows, c, static_cast<T*>(dx));
  if (const int e = launched()) return e;
  const dim3 grid(static_cast<unsigned>((c + kThreads - 1) / kThreads),
                  static_cast<unsigned>(std::min<std::int64_t>(chunks, 65535)));
  rms_backward_dw<T><<<grid, kThreads, 0, s>>>(static_cast<const T*>(x), rstd, static_cast<const T*>(dy), rows, c,
                                               chunks, dw_partial);
  return launched();
}

}  // namespace

int rms_norm_forward(DType t, const void* x, const void* w, std::int64_t rows, std::int64_t c, float eps, void* y,
                     float* rstd, void* stream) {
  if (rows == 0 || c == 0) return 0;
  return t == DType::kBFloat16 ? forward<bf16>(x, w, rows, c, eps, y, rstd, as_stream(stream))
                               : forward<float>(x, w, rows, c, eps, y, rstd, as_stream(stream));
}

int rms_norm_backward(DType t, const void* x, const void* w, const float* rstd, const void* dy, std::int64_t rows,
                      std::int64_t c, void* dx, float* dw_partial, std::int64_t chunks, void* stream) {
  if (rows == 0 || c == 0) return 0;
  return t == DType::kBFloat16 ? backward<bf16>(x, w, rstd, dy, rows, c, dx, dw_partial, chunks, as_stream(stream))
                               : backward<float>(x, w, rstd, dy, rows, c, dx, dw_partial, chunks, as_stream(stream));
}

const char* error_string(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

}  // namespace tailor::runner::cuda
