// Block-wise 8-bit quantisation with a dynamic (non-linear) code map, after
// Dettmers et al., "8-bit Optimizers via Block-wise Quantization" (ICLR
// 2022, arXiv:2110.02861), section 2: a tensor is cut into blocks, each
// block is normalised by its absolute maximum and every value is replaced by
// the index of the nearest entry of a 256-value map. The "dynamic tree" map
// spends its bits on a decimal exponent and a linear fraction, so small
// values keep relative precision (what Adam's second moment needs).
// Used by the 8-bit AdamW states and by NF4's double quantisation.
// Not here: stochastic rounding, the paper's CUDA kernels.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace tailor::runner {

// The 256 code values in [-1, 1] (signed) or [0, 1] (unsigned), ascending,
// fp32, on the CPU. Signed: sign + 7 bits, 0 and 1 included; unsigned: no
// sign bit, one more fraction bit per exponent. Cached: cheap to call.
const torch::Tensor& dynamic_map(bool is_signed);
// Its 255 midpoints between neighbours, fp32 on the CPU: the nearest map
// value of x is the number of them below x (torch.bucketize).
const torch::Tensor& dynamic_map_bounds(bool is_signed);

// A tensor quantised block-wise to 8-bit codes.
struct Blockwise8 {
  torch::Tensor codes;   // uint8, same number of elements as the source (flat)
  torch::Tensor absmax;  // fp32, one per block: ceil(numel / block_size)
  std::int64_t block_size = 2048;
  bool is_signed = true;

  std::int64_t bytes() const;  // codes + absmax storage
};

// Quantises x (any dtype, any shape; read as flat) to the nearest map value
// per block. Blocks of zeros get absmax 1 so they dequantise to exact zeros.
// Throws c10::Error on a non-positive block size.
Blockwise8 quantize_blockwise8(const torch::Tensor& x, std::int64_t block_size, bool is_signed);

// The flat fp32 values (numel) a Blockwise8 stands for.
torch::Tensor dequantize_blockwise8(const Blockwise8& q);

// Lower-level pieces over whole blocks, for in-place updates of slices of
// a Blockwise8 (the 8-bit optimizer): `blocks` is (nb, block) fp32; writes
// the codes of each row into codes_out (nb * block, uint8) and the absmax
// into absmax_out (nb, fp32).
void quantize_blocks_into(const torch::Tensor& blocks, const torch::Tensor& map, torch::Tensor codes_out,
                          torch::Tensor absmax_out);
// (nb, block) fp32 from codes (nb * block) and absmax (nb).
torch::Tensor dequantize_blocks(const torch::Tensor& codes, const torch::Tensor& absmax, const torch::Tensor& map);

}  // namespace tailor::runner
