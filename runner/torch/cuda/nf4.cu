// NF4 dequantisation (Dettmers et al. 2023): one thread per packed byte,
// which writes the byte's two values scaled by their block's absmax.
#include "runner/torch/cuda/common.cuh"

namespace tailor::runner::cuda {
namespace {

using namespace detail;

constexpr std::int64_t kBlock = 64;         // values per NF4 block
constexpr std::int64_t kAbsmaxBlock = 256;  // first-level absmax values per second-level scale

template <class T>
__global__ void nf4_dequant(const std::uint8_t* packed, const float* absmax, const std::uint8_t* absmax_codes,
                            const float* code_map, float offset, std::int64_t b0, std::int64_t bytes, std::int64_t n,
                            Nf4Levels levels, T* out) {
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < bytes;
       k += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t e = 2 * k, b = b0 + e / kBlock;
    // __fmul_rn/__fadd_rn: no contraction into a fused multiply-add, so the
    // values round as nf4.cpp's separate ATen multiply and add round them.
    const float scale = absmax_codes == nullptr
                            ? absmax[b]
                            : __fadd_rn(__fmul_rn(code_map[absmax_codes[b]], absmax[b / kAbsmaxBlock]), offset);
    const unsigned byte = packed[b0 * kBlock / 2 + k];
    if (e < n) st(&out[e], __fmul_rn(levels.value[byte >> 4], scale));
    if (e + 1 < n) st(&out[e + 1], __fmul_rn(levels.value[byte & 15u], scale));
  }
}

template <class T>
int launch(const std::uint8_t* packed, const float* absmax, const std::uint8_t* absmax_codes, const float* code_map,
           float offset, std::int64_t b0, std::int64_t blocks, std::int64_t n, const Nf4Levels& levels, void* out,
           cudaStream_t s) {
  const std::int64_t bytes = blocks * kBlock / 2;
  nf4_dequant<T><<<flat_blocks(bytes), kThreads, 0, s>>>(packed, absmax, absmax_codes, code_map, offset, b0, bytes, n,
                                                         levels, static_cast<T*>(out));
  return launched();
}

}  // namespace

int nf4_dequantize(const std::uint8_t* packed, const float* absmax, const std::uint8_t* absmax_codes,
                   const float* code_map, float absmax_offset, std::int64_t b0, std::int64_t blocks, std::int64_t n,
                   const Nf4Levels& levels, DType out_type, void* out, void* stream) {
  if (blocks == 0 || n == 0) return 0;
  const cudaStream_t s = as_stream(stream);
  switch (out_type) {
    case DType::kBFloat16:
      return launch<bf16>(packed, absmax, absmax_codes, code_map, absmax_offset, b0, blocks, n, levels, out, s);
    case DType::kFloat16:
      return launch<__half>(packed, absmax, absmax_codes, code_map, absmax_offset, b0, blocks, n, levels, out, s);
    case DType::kFloat32: break;
  }
  return launch<float>(packed, absmax, absmax_codes, code_map, absmax_offset, b0, blocks, n, levels, out, s);
}

}  // namespace tailor::runner::cuda
