// AdamW (Loshchilov & Hutter 2019) in one pass over a parameter, as
// kernels::adamw computes it on the CPU: decoupled decay, then the update.
#include "runner/torch/cuda/common.cuh"

namespace tailor::runner::cuda {
namespace {

using namespace detail;

template <class P, class S, class G>
__global__ void adamw_step(P* p, S* m, S* v, const G* grad, std::int64_t n, kernels::AdamWArgs a, bf16* out) {
  const float c1 = 1.0f - a.beta1, c2 = 1.0f - a.beta2;
  for (std::int64_t k = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float g = ld(grad[k]) * a.grad_scale;
    const float mk = a.beta1 * ld(m[k]) + c1 * g;
    const float vk = a.beta2 * ld(v[k]) + c2 * g * g;
    float pk = ld(p[k]);
    pk -= a.lr_wd * pk;
    pk -= a.step_size * mk / (sqrtf(vk) / a.sqrt_bc2 + a.eps);
    st(&m[k], mk);
    st(&v[k], vk);
    st(&p[k], pk);
    if (out != nullptr) st(&out[k], pk);
  }
}

}  // namespace

int adamw_fp32_states(float* p, float* m, float* v, DType grad_type, const void* grad, std::int64_t n,
                      const kernels::AdamWArgs& a, void* out_bf16, void* stream) {
  if (n == 0) return 0;
  auto* out = static_cast<bf16*>(out_bf16);
  if (grad_type == DType::kBFloat16) {
    adamw_step<<<flat_blocks(n), kThreads, 0, as_stream(stream)>>>(p, m, v, static_cast<const bf16*>(grad), n, a, out);
  } else {
    adamw_step<<<flat_blocks(n), kThreads, 0, as_stream(stream)>>>(p, m, v, static_cast<const float*>(grad), n, a, out);
  }
  return launched();
}

int adamw_bf16(void* p, void* m, void* v, const void* grad, std::int64_t n, const kernels::AdamWArgs& a, void* stream) {
  if (n == 0) return 0;
  adamw_step<<<flat_blocks(n), kThreads, 0, as_stream(stream)>>>(static_cast<bf16*>(p), static_cast<bf16*>(m),
                                                                 static_cast<bf16*>(v), static_cast<const bf16*>(grad),
                                                                 n, a, static_cast<bf16*>(nullptr));
  return launched();
}

}  // namespace tailor::runner::cuda
