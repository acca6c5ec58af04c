// SwiGLU and GeGLU (Shazeer 2020), forward and backward, one thread per
// value of the unit's output: it reads the gate and the up value.
#include "runner/torch/cuda/common.cuh"

namespace tailor::runner::cuda {
namespace {

using namespace detail;

// sqrt(2 / pi) and the cubic term's coefficient of GELU's tanh form.
constexpr float kGeluScale = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

struct Activation {
  float value, slope;  // act(g) and d act / dg
};

template <Glu K>
__device__ __forceinline__ Activation activate(float g) {
  if constexpr (K == Glu::kSwiglu) {
    const float s = 1.0f / (1.0f + expf(-g));
    return {g * s, s * (1.0f + g * (1.0f - s))};
  } else {
    const float t = tanhf(kGeluScale * (g + kGeluCubic * g * g * g));
    return {0.5f * g * (1.0f + t),
            0.5f * (1.0f + t) + 0.5f * g * (1.0f - t * t) * kGeluScale * (1.0f + 3.0f * kGeluCubic * g * g)};
  }
}

template <Glu K, class T>
__global__ void glu_fwd(const T* gate_up, std::int64_t rows, std::int64_t i, T* y) {
  for (std::int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const T* g = gate_up + r * 2 * i;
    for (std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < i;
         j += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
      st(&y[r * i + j], activate<K>(ld(g[j])).value * ld(g[i + j]));
    }
  }
}

template <Glu K, class T>
__global__ void glu_bwd(const T* gate_up, const T* dy, std::int64_t rows, std::int64_t i, T* grad) {
  for (std::int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const T* g = gate_up + r * 2 * i;
    T* dg = grad + r * 2 * i;
    for (std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < i;
         j += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
      const float d = ld(dy[r * i + j]), u = ld(g[i + j]);
      const Activation a = activate<K>(ld(g[j]));
      st(&dg[j], d * u * a.slope);
      st(&dg[i + j], d * a.value);
    }
  }
}

template <Glu K, class T>
int launch(const void* gate_up, const void* dy, std::int64_t rows, std::int64_t i, void* out, cudaStream_t s) {
  const dim3 grid = rows_grid(rows, i);
  if (dy == nullptr) {
    glu_fwd<K, T><<<grid, kThreads, 0, s>>>(static_cast<const T*>(gate_up), rows, i, static_cast<T*>(out));
  } else {
    glu_bwd<K, T><<<grid, kThreads, 0, s>>>(static_cast<const T*>(gate_up), static_cast<const T*>(dy), rows, i,
                                            static_cast<T*>(out));
  }
  return launched();
}

template <class T>
int launch_kind(Glu kind, const void* gate_up, const void* dy, std::int64_t rows, std::int64_t i, void* out,
                cudaStream_t s) {
  return kind == Glu::kSwiglu ? launch<Glu::kSwiglu, T>(gate_up, dy, rows, i, out, s)
                              : launch<Glu::kGegluTanh, T>(gate_up, dy, rows, i, out, s);
}

}  // namespace

int glu_forward(DType t, Glu kind, const void* gate_up, std::int64_t rows, std::int64_t i, void* y, void* stream) {
  if (rows == 0 || i == 0) return 0;
  return t == DType::kBFloat16 ? launch_kind<bf16>(kind, gate_up, nullptr, rows, i, y, as_stream(stream))
                               : launch_kind<float>(kind, gate_up, nullptr, rows, i, y, as_stream(stream));
}

int glu_backward(DType t, Glu kind, const void* gate_up, const void* dy, std::int64_t rows, std::int64_t i, void* grad,
                 void* stream) {
  if (rows == 0 || i == 0) return 0;
  return t == DType::kBFloat16 ? launch_kind<bf16>(kind, gate_up, dy, rows, i, grad, as_stream(stream))
                               : launch_kind<float>(kind, gate_up, dy, rows, i, grad, as_stream(stream));
}

}  // namespace tailor::runner::cuda
