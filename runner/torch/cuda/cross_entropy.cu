// Cross-entropy over the vocabulary: the log-sum-exp in one pass over a
// row's logits (the online softmax of Milakov & Gimelshein 2018, "Online
// normalizer calculation for softmax"), one block per row; the gradient one
// thread per logit.
#include <cmath>

#include "runner/torch/cuda/common.cuh"

namespace tailor::runner::cuda {
namespace {

using namespace detail;

// A running maximum and the sum of exp(x - max) over what has been seen.
struct MaxSum {
  float m, s;
};

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.0f};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ __forceinline__ MaxSum warp_combine(MaxSum v) {
  for (int o = 16; o > 0; o >>= 1) {
    v = combine(v, {__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)});
  }
  return v;
}

template <class T>
__global__ void ce_forward(const T* logits, std::int64_t rows, std::int64_t v, const std::int64_t* targets,
                           std::int64_t ignore, float* lse, double* loss) {
  __shared__ float ms[32], ss[32];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* x = logits + r * v;
    MaxSum acc{-INFINITY, 0.0f};
    for (std::int64_t j = threadIdx.x; j < v; j += blockDim.x) {
      const float xj = ld(x[j]);
      if (xj > acc.m) {
        acc = {xj, acc.s * expf(acc.m - xj) + 1.0f};
      } else if (xj != -INFINITY) {
        acc.s += expf(xj - acc.m);  // NaN propagates through here
      }
    }
    acc = warp_combine(acc);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
      ms[warp] = acc.m;
      ss[warp] = acc.s;
    }
    __syncthreads();
    if (warp == 0) {
      acc = lane < static_cast<int>(blockDim.x >> 5) ? MaxSum{ms[lane], ss[lane]} : MaxSum{-INFINITY, 0.0f};
      acc = warp_combine(acc);
      if (lane == 0) {
        const float l = acc.m + logf(acc.s);
        lse[r] = l;
        const std::int64_t t = targets[r];
        loss[r] = t == ignore ? 0.0 : static_cast<double>(l) - static_cast<double>(ld(x[t]));
      }
    }
    __syncthreads();
  }
}

template <class T>
__global__ void ce_backward(const T* logits, std::int64_t rows, std::int64_t v, const std::int64_t* targets,
                            std::int64_t ignore, const float* lse, float scale, T* grad) {
  for (std::int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const std::int64_t t = targets[r];
    const float s = t == ignore ? 0.0f : scale, l = lse[r];
    for (std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < v;
         j += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
      const float p = expf(ld(logits[r * v + j]) - l);
      st(&grad[r * v + j], s * (j == t ? p - 1.0f : p));
    }
  }
}

template <class T>
int forward(const void* logits, std::int64_t rows, std::int64_t v, const std::int64_t* targets, std::int64_t ignore,
            float* lse, double* loss, cudaStream_t s) {
  ce_forward<T><<<row_blocks(rows), 1024, 0, s>>>(static_cast<const T*>(logits), rows, v, targets, ignore, lse, loss);
  return launched();
}

template <class T>
int backward(const void* logits, std::int64_t rows, std::int64_t v, const std::int64_t* targets, std::int64_t ignore,
             const float* lse, float scale, void* grad, cudaStream_t s) {
  ce_backward<T><<<rows_grid(rows, v), kThreads, 0, s>>>(static_cast<const T*>(logits), rows, v, targets, ignore, lse,
                                                         scale, static_cast<T*>(grad));
  return launched();
}

}  // namespace

int cross_entropy_forward(DType t, const void* logits, std::int64_t rows, std::int64_t v, const std::int64_t* targets,
                          std::int64_t ignore, float* lse, double* loss, void* stream) {
  if (rows == 0 || v == 0) return 0;
  return t == DType::kBFloat16 ? forward<bf16>(logits, rows, v, targets, ignore, lse, loss, as_stream(stream))
                               : forward<float>(logits, rows, v, targets, ignore, lse, loss, as_stream(stream));
}

int cross_entropy_backward(DType t, const void* logits, std::int64_t rows, std::int64_t v, const std::int64_t* targets,
                           std::int64_t ignore, const float* lse, float scale, void* grad, void* stream) {
  if (rows == 0 || v == 0) return 0;
  return t == DType::kBFloat16 ? backward<bf16>(logits, rows, v, targets, ignore, lse, scale, grad, as_stream(stream))
                               : backward<float>(logits, rows, v, targets, ignore, lse, scale, grad, as_stream(stream));
}

}  // namespace tailor::runner::cuda
