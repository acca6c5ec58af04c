// RoPE (Su et al. 2021) in the rotate-half layout: one thread per output
// value, which reads its own value and its partner half a head away.
#include "runner/torch/cuda/common.cuh"

namespace tailor::runner::cuda {
namespace {

using namespace detail;

template <class T>
__global__ void rope_rows(const T* x, std::int64_t rows, std::int64_t width, std::int64_t rotated, std::int64_t d,
                          const float* cos, const float* sin, float sign, T* y) {
  const std::int64_t half = d / 2, span = rotated * d;
  for (std::int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const T* xr = x + r * width;
    T* yr = y + r * width;
    const float* cr = cos + r * half;
    const float* sr = sin + r * half;
    for (std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; col < width;
         col += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
      if (col >= span) {
        yr[col] = xr[col];
        continue;
      }
      const std::int64_t k = col % d, j = k % half;
      const float c = cr[j], s = sign * sr[j];
      // [a, b] -> [a c - b s, b c + a s]
      const float out = k < half ? ld(xr[col]) * c - ld(xr[col + half]) * s : ld(xr[col]) * c + ld(xr[col - half]) * s;
      st(&yr[col], out);
    }
  }
}

template <class T>
int launch(const void* x, std::int64_t rows, std::int64_t width, std::int64_t rotated, std::int64_t d, const float* cos,
           const float* sin, bool inverse, void* y, cudaStream_t s) {
  rope_rows<T><<<rows_grid(rows, width), kThreads, 0, s>>>(static_cast<const T*>(x), rows, width, rotated, d, cos, sin,
                                                           inverse ? -1.0f : 1.0f, static_cast<T*>(y));
  return launched();
}

}  // namespace

int rope(DType t, const void* x, std::int64_t rows, std::int64_t width, std::int64_t rotated, std::int64_t d,
         const float* cos, const float* sin, bool inverse, void* y, void* stream) {
  if (rows == 0 || width == 0) return 0;
  return t == DType::kBFloat16 ? launch<bf16>(x, rows, width, rotated, d, cos, sin, inverse, y, as_stream(stream))
                               : launch<float>(x, rows, width, rotated, d, cos, sin, inverse, y, as_stream(stream));
}

}  // namespace tailor::runner::cuda
