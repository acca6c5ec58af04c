#include "runner/torch/quant8.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tailor::runner {
namespace {

// Elements handled per pass: bounds the fp32 and index temporaries of a
// large tensor to a few MiB (a multiple of every block size used here).
constexpr std::int64_t kChunkElements = std::int64_t{1} << 20;

// The dynamic tree map (Dettmers 2021, section 2.3, "dynamic tree
// quantization"): after the sign bit, a run of zero bits chooses a decimal
// exponent 10^-k (k = 0..6) and the bits after the first one bit a linear
// fraction in [0.1, 1]. With 7 bits after the sign, exponent 10^(e-6) owns
// 2^e fractions (e = 0..6): 1 + 2 + ... + 64 = 127 magnitudes per sign, plus
// 0 and 1: 256 codes. Without a sign bit each exponent gets one more
// fraction bit: 2 + 4 + ... + 128 = 254, plus 0 and 1. The fractions are the
// midpoints of 2^bits equal intervals of [0.1, 1], formed in fp32 torch ops
// as bitsandbytes' create_dynamic_map forms them, so that the values (and
// with them NF4's double-quantised scales) are bit for bit bitsandbytes'
// (tests/runner/torch/hf_interop_test.cpp).
torch::Tensor build_map(bool is_signed) {
  std::vector<torch::Tensor> parts;
  for (int e = 0; e < 7; ++e) {
    const std::int64_t n = is_signed ? (1 << e) : (1 << (e + 1));
    const torch::Tensor bounds = torch::linspace(0.1, 1.0, n + 1, torch::kFloat32);
    const torch::Tensor mag = (bounds.slice(0, 0, -1) + bounds.slice(0, 1)) / 2.0 * std::pow(10.0, e - 6);
    parts.push_back(mag);
    if (is_signed) parts.push_back(-mag);
  }
  parts.push_back(torch::tensor({0.0f, 1.0f}));
  return std::get<0>(torch::cat(parts).sort());
}

struct MapTables {
  torch::Tensor map;     // (256) fp32 ascending
  torch::Tensor bounds;  // (255) fp32: midpoints between neighbours, for nearest-value search
};

MapTables make_tables(bool is_signed) {
  MapTables t;
  t.map = build_map(is_signed);
  t.bounds = (t.map.slice(0, 0, -1) + t.map.slice(0, 1)) / 2;
  return t;
}

const MapTables& tables(bool is_signed) {
  static const MapTables kSigned = make_tables(true);
  static const MapTables kUnsigned = make_tables(false);
  return is_signed ? kSigned : kUnsigned;
}

const torch::Tensor& bounds(const torch::Tensor& map) {
  // The maps are the two cached tensors: look the bounds up by identity.
  const MapTables& s = tables(true);
  if (map.is_same(s.map)) return s.bounds;
  return tables(false).bounds;
}

}  // namespace

const torch::Tensor& dynamic_map(bool is_signed) { return tables(is_signed).map; }
const torch::Tensor& dynamic_map_bounds(bool is_signed) { return tables(is_signed).bounds; }

std::int64_t Blockwise8::bytes() const {
  return static_cast<std::int64_t>(codes.nbytes()) + static_cast<std::int64_t>(absmax.nbytes());
}

void quantize_blocks_into(const torch::Tensor& blocks, const torch::Tensor& map, torch::Tensor codes_out,
                          torch::Tensor absmax_out) {
  torch::NoGradGuard no_grad;
  torch::Tensor absmax = blocks.abs().amax(1);
  // An all-zero block would divide 0 by 0; with scale 1 its zeros stay zeros.
  absmax.masked_fill_(absmax == 0, 1.0f);
  // The nearest map value: the index of the midpoint interval the value
  // falls in (bitsandbytes' torch backend does the same).
  const torch::Tensor idx =
      torch::bucketize(blocks / absmax.unsqueeze(1), bounds(map).to(blocks.device()), /*out_int32=*/true);
  codes_out.copy_(idx.view({-1}));
  absmax_out.copy_(absmax);
}

torch::Tensor dequantize_blocks(const torch::Tensor& codes, const torch::Tensor& absmax, const torch::Tensor& map) {
  torch::NoGradGuard no_grad;
  const std::int64_t nb = absmax.size(0);
  return map.to(codes.device()).index_select(0, codes.to(torch::kInt32)).view({nb, -1}).mul_(absmax.unsqueeze(1));
}

Blockwise8 quantize_blockwise8(const torch::Tensor& x, std::int64_t block_size, bool is_signed) {
  TORCH_CHECK(block_size > 0, "quantize_blockwise8: block size must be positive, got ", block_size);
  torch::NoGradGuard no_grad;
  const torch::Tensor flat = x.detach().reshape({-1});
  const std::int64_t n = flat.numel(), nb = (n + block_size - 1) / block_size;
  Blockwise8 q;
  q.block_size = block_size;
  q.is_signed = is_signed;
  q.codes = torch::empty({n}, flat.options().dtype(torch::kUInt8));
  q.absmax = torch::empty({nb}, flat.options().dtype(torch::kFloat32));
  const std::int64_t chunk_blocks = std::max<std::int64_t>(1, kChunkElements / block_size);
  const torch::Tensor& map = dynamic_map(is_signed);
  for (std::int64_t b0 = 0; b0 < nb; b0 += chunk_blocks) {
    const std::int64_t b1 = std::min(nb, b0 + chunk_blocks);
    const std::int64_t e0 = b0 * block_size, e1 = std::min(n, b1 * block_size);
    torch::Tensor part = flat.slice(0, e0, e1).to(torch::kFloat32);
    const std::int64_t padded = (b1 - b0) * block_size;
    if (e1 - e0 < padded) part = torch::constant_pad_nd(part, {0, padded - (e1 - e0)}, 0);
    torch::Tensor codes = torch::empty({padded}, q.codes.options());
    quantize_blocks_into(part.view({b1 - b0, block_size}), map, codes, q.absmax.slice(0, b0, b1));
    q.codes.slice(0, e0, e1).copy_(codes.slice(0, 0, e1 - e0));
  }
  return q;
}

torch::Tensor dequantize_blockwise8(const Blockwise8& q) {
  torch::NoGradGuard no_grad;
  const std::int64_t n = q.codes.numel(), nb = q.absmax.numel(), bs = q.block_size;
  torch::Tensor out = torch::empty({n}, q.absmax.options());
  const std::int64_t chunk_blocks = std::max<std::int64_t>(1, kChunkElements / bs);
  for (std::int64_t b0 = 0; b0 < nb; b0 += chunk_blocks) {
    const std::int64_t b1 = std::min(nb, b0 + chunk_blocks);
    const std::int64_t e0 = b0 * bs, e1 = std::min(n, b1 * bs);
    torch::Tensor codes = q.codes.slice(0, e0, e1);
    if (e1 - e0 < (b1 - b0) * bs) codes = torch::constant_pad_nd(codes, {0, (b1 - b0) * bs - (e1 - e0)}, 0);
    out.slice(0, e0, e1).copy_(
        dequantize_blocks(codes, q.absmax.slice(0, b0, b1), dynamic_map(q.is_signed)).view({-1}).slice(0, 0, e1 - e0));
  }
  return out;
}

}  // namespace tailor::runner
