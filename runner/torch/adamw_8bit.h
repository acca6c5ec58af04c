// AdamW with both moments stored in 8 bits, block-wise (Dettmers et al.,
// "8-bit Optimizers via Block-wise Quantization", ICLR 2022): per block of
// 2048 values an fp32 absmax and 2048 one-byte codes of the dynamic map
// (quant8.h), signed for the first moment, unsigned for the second. Each
// step dequantises a chunk of blocks to fp32, applies the ordinary AdamW
// update there, and quantises the new moments again: 2 + 8/2048 bytes of
// state per parameter instead of 8.
//
// Where 8-bit states are not used: tensors with fewer than
// kAdamw8bitMinElements elements (norm weights, biases, tiny adapters) keep
// fp32 moments, as bitsandbytes does (its min_8bit_size): the absmax would
// cost as much as the codes save, and such tensors are a rounding error of
// the total.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "runner/torch/quant8.h"

namespace tailor::runner {

inline constexpr std::int64_t kAdamw8bitBlockSize = 2048;
inline constexpr std::int64_t kAdamw8bitMinElements = 4096;

// The moments of one parameter, quantised.
struct Adam8bitState {
  Blockwise8 m;  // signed map
  Blockwise8 v;  // unsigned map
  std::int64_t bytes() const { return m.bytes() + v.bytes(); }
};

// Zero moments for `numel` elements on `device`.
Adam8bitState make_adam8bit_state(std::int64_t numel, torch::Device device = torch::kCPU);

struct AdamUpdate {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double bias_correction1 = 1, bias_correction2 = 1;  // 1 - beta^t
  double grad_scale = 1;  // the gradient is multiplied by this first (clipping, loss-scale unscaling)
};

// target -= lr * m_hat / (sqrt(v_hat) + eps) with the moments updated by
// grad (same shape as target; any float dtype, read as fp32). target may be
// any float dtype; it is updated in place. Weight decay is the caller's.
// On the CPU, with target and gradient fp32 or bf16 (not an fp32 gradient for
// a bf16 target), one fused pass per block on LibTorch's threads
// (kernels::adamw_8bit): no temporaries. Elsewhere, and for other dtypes,
// adam8bit_update_composed. Returns whether the fused pass ran.
bool adam8bit_update(torch::Tensor& target, const torch::Tensor& grad, Adam8bitState& state, const AdamUpdate& u);

// The same update in ATen ops over chunks of blocks, on any device: the
// fused pass's reference (tests/runner/torch/quant_test.cpp). Equal to it
// but for rounding: fp32 operations in another order, and a bf16 target
// rounded once instead of its update first. fp32 temporaries of about 26
// bytes per element of a chunk: 32768 elements on the CPU (under 1 MiB, so
// the update adds next to nothing to the peak), 2^20 on accelerators, where
// each chunk costs kernel launches.
void adam8bit_update_composed(torch::Tensor& target, const torch::Tensor& grad, Adam8bitState& state,
                              const AdamUpdate& u);

}  // namespace tailor::runner
