// Device helpers shared by the runner's CUDA kernels: loads and stores in
// fp32 math, block reductions and the launch shapes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "runner/torch/cuda/kernels.h"

namespace tailor::runner::cuda::detail {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float ld(float x) { return x; }
__device__ __forceinline__ float ld(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void st(float* p, float x) { *p = x; }
__device__ __forceinline__ void st(bf16* p, float x) { *p = __float2bfloat16_rn(x); }
__device__ __forceinline__ void st(__half* p, float x) { *p = __float2half_rn(x); }

inline constexpr int kThreads = 256;

// The sum of every thread's v, returned to every thread of the block.
// blockDim.x is a multiple of 32; `scratch` holds 32 floats. Ends with a
// barrier, so the scratch can be used again at once.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? scratch[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  return v;
}

// A grid over (columns, rows): x blocks stride over a row's columns, y
// blocks over rows. Kernels loop, so the grid is capped.
inline dim3 rows_grid(std::int64_t rows, std::int64_t cols, int threads = kThreads) {
  const std::int64_t x = std::min<std::int64_t>((cols + threads - 1) / threads, 1024);
  const std::int64_t y = std::min<std::int64_t>(rows, 65535);
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(y));
}

// One block per row, rows looped past the cap.
inline unsigned row_blocks(std::int64_t rows) { return static_cast<unsigned>(std::min<std::int64_t>(rows, 1 << 20)); }

inline unsigned flat_blocks(std::int64_t n, int threads = kThreads) {
  return static_cast<unsigned>(std::min<std::int64_t>((n + threads - 1) / threads, 1 << 16));
}

inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
inline int launched() { return static_cast<int>(cudaGetLastError()); }

}  // namespace tailor::runner::cuda::detail
