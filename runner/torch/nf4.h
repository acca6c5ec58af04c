// 4-bit NormalFloat (NF4) storage of frozen weights, as in Dettmers et al.,
// "QLoRA: Efficient Finetuning of Quantized LLMs" (2023, arXiv:2305.14314),
// section 3: blocks of 64 values, each scaled by its absolute maximum and
// replaced by the nearest of 16 NormalFloat levels; two 4-bit codes per
// byte; the absmax values stay fp32 (0.5 + 4/64 bytes per parameter), or
// "double quantisation" stores them again as 8-bit dynamic codes (block
// 256) after subtracting their mean (0.5 + 1/64 + 4/(64*256); both in
// memory_model.cpp). bitsandbytes calls the choice compress_statistics.
// nf4_linear() dequantises the weight into the compute dtype and multiplies;
// its backward yields the input's gradient only (the weight is frozen). On
// CUDA the dequantisation is one kernel of the project's own where
// TAILOR_CUDA_KERNELS selects it (cuda_kernels.h), ATen's ops otherwise.
// Not here: FP4, fused dequantise-matmul kernels, per-tensor compute dtypes
// other than that of the input.
#pragma once

#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <vector>

#include "core/status.h"

namespace tailor::runner {

inline constexpr std::int64_t kNf4BlockSize = 64;
inline constexpr std::int64_t kNf4AbsmaxBlockSize = 256;

// The 16 NF4 levels (QLoRA, appendix E: quantiles of N(0, 1) normalised to
// [-1, 1], with an exact zero), ascending; code i stands for kNf4Levels[i].
inline constexpr std::array<float, 16> kNf4Levels = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982713508606f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

// How the blocks' absmax values are stored.
enum class Nf4Scales {
  kFp32,             // one fp32 absmax per block of 64 (strategy.quantization: nf4)
  kDoubleQuantized,  // 8-bit codes, block 256 (nf4-double-quant)
};

// A weight in NF4, its scales fp32 or double-quantised.
struct Nf4Tensor {
  std::vector<std::int64_t> shape;  // of the original weight (1-D or 2-D)
  std::int64_t numel = 0;
  // uint8 (ceil(numel / 64) * 32): element 2k in the high nibble of byte k,
  // element 2k + 1 in the low nibble; the last block is padded with zeros.
  torch::Tensor packed;
  // Double-quantised: uint8 (nb), 8-bit dynamic codes of absmax -
  // absmax_offset. fp32 scales: empty.
  torch::Tensor absmax_codes;
  // Double-quantised: fp32 (ceil(nb / 256)), the absmax of each 256-block of
  // (absmax - offset). fp32 scales: fp32 (nb), each block's absmax.
  torch::Tensor absmax_scale;
  float absmax_offset = 0;  // double-quantised: mean of the first-level absmax values; else 0

  std::int64_t blocks() const { return (numel + kNf4BlockSize - 1) / kNf4BlockSize; }
  bool double_quantized() const { return absmax_codes.numel() > 0; }
  // Storage of packed codes and both levels of scales, in bytes.
  std::int64_t bytes() const;
};

// Quantises a 1-D or 2-D floating tensor (any float dtype, any device).
// Errors: InvalidArgument for other ranks, empty or non-floating tensors,
// or non-finite values. Never throws.
Result<Nf4Tensor> quantize_nf4(const torch::Tensor& weight, Nf4Scales scales = Nf4Scales::kDoubleQuantized);

// The weight the codes stand for, in `dtype`, shaped like the original.
// Throws c10::Error (like any tensor op) on malformed input.
torch::Tensor dequantize_nf4(const Nf4Tensor& q, torch::Dtype dtype);

// The first-level absmax values (fp32, nb), double quantisation undone.
torch::Tensor nf4_absmax(const Nf4Tensor& q);

// Codes (uint8, one per element, unpacked) of the weight's elements.
torch::Tensor nf4_unpack_codes(const Nf4Tensor& q);

// Rows [row0, row0 + rows) of a 2-D weight, dequantised into `dtype`
// (rows x in): a slice of blocks, so row0 * in and rows * in must be
// multiples of the block size. Throws c10::Error otherwise.
torch::Tensor dequantize_nf4_rows(const Nf4Tensor& q, std::int64_t row0, std::int64_t rows, torch::Dtype dtype);

// A mixture of experts' frozen NF4 weights (grouped_linear.h with w stored
// as one 2-D NF4 tensor of `groups` stacked (out, in) weights): each
// group's rows times its weight, one group's weight dequantised at a time,
// in forward and again in backward. Differentiable with respect to x only.
torch::Tensor nf4_grouped_linear(const torch::Tensor& x, const Nf4Tensor& w, std::int64_t groups,
                                 const std::vector<std::int64_t>& counts);

// y = x W^T (+ bias) with W dequantised blockwise into x's dtype for this
// call only. Differentiable with respect to x (grad_x = grad_y W, W
// dequantised again in backward) and bias; W itself gets no gradient.
// x (..., in); W (out, in); bias (out) or undefined.
torch::Tensor nf4_linear(const torch::Tensor& x, const Nf4Tensor& w, const torch::Tensor& bias);

}  // namespace tailor::runner
