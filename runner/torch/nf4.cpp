#include "runner/torch/nf4.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <string>

#include "runner/torch/cuda_kernels.h"
#include "runner/torch/half_matmul.h"
#include "runner/torch/quant8.h"

namespace tailor::runner {
namespace {

using torch::Tensor;

const Tensor& levels() {
  static const Tensor kLevels =
      torch::from_blob(const_cast<float*>(kNf4Levels.data()), {16}, torch::kFloat32).clone();
  return kLevels;
}

// Midpoints between neighbouring levels: bucketize against them gives the
// nearest level's index.
const Tensor& level_bounds() {
  static const Tensor kBounds = (levels().slice(0, 0, -1) + levels().slice(0, 1)) / 2;
  return kBounds;
}

// (256, 2) fp32: the two values a packed byte stands for, so dequantising is
// one table lookup per byte instead of unpacking nibbles first.
const Tensor& byte_table() {
  static const Tensor kTable = [] {
    const Tensor b = torch::arange(256, torch::kInt64);
    return torch::stack({levels().index_select(0, b.div(16, "floor")), levels().index_select(0, b.remainder(16))}, 1);
  }();
  return kTable;
}

std::string shape_string(const Tensor& t) {
  std::string s = "(";
  for (std::int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + ")";
}

// An NF4 weight as an autograd function keeps it: its three tensors saved
// for backward and its offset and 2-D shape as saved values.
void save_weight(torch::autograd::AutogradContext* ctx, const Tensor& packed, const Tensor& absmax_codes,
                 const Tensor& absmax_scale, double offset, std::int64_t rows, std::int64_t in) {
  ctx->save_for_backward({packed, absmax_codes, absmax_scale});
  ctx->saved_data["offset"] = offset;
  ctx->saved_data["rows"] = rows;
  ctx->saved_data["in"] = in;
}

Nf4Tensor weight_of(const Tensor& packed, const Tensor& absmax_codes, const Tensor& absmax_scale, double offset,
                    std::int64_t rows, std::int64_t in) {
  Nf4Tensor w;
  w.shape = {rows, in};
  w.numel = rows * in;
  w.packed = packed;
  w.absmax_codes = absmax_codes;
  w.absmax_scale = absmax_scale;
  w.absmax_offset = static_cast<float>(offset);
  return w;
}

// In backward only: forward has the tensors themselves.
Nf4Tensor saved_weight(torch::autograd::AutogradContext* ctx) {
  const auto saved = ctx->get_saved_variables();
  return weight_of(saved[0], saved[1], saved[2], ctx->saved_data["offset"].toDouble(),
                   ctx->saved_data["rows"].toInt(), ctx->saved_data["in"].toInt());
}

// Backward yields only grad_x: the weight is frozen, so its gradient (and
// the input it would need) is never computed or kept.
struct Nf4LinearFunction : torch::autograd::Function<Nf4LinearFunction> {
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& x, const Tensor& packed,
                        const Tensor& absmax_codes, const Tensor& absmax_scale, double offset, std::int64_t out_features,
                        std::int64_t in_features) {
    save_weight(ctx, packed, absmax_codes, absmax_scale, offset, out_features, in_features);
    const Nf4Tensor w = weight_of(packed, absmax_codes, absmax_scale, offset, out_features, in_features);
    return linear_layer(x, dequantize_nf4(w, x.scalar_type()));
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const Tensor& g = grad_out[0];
    torch::autograd::variable_list grads(7);  // the input's only
    grads[0] = linear_layer(g, dequantize_nf4(saved_weight(ctx), g.scalar_type()).t());
    return grads;
  }
};

// Keeps only the codes and scales: the weight is frozen, so neither its
// gradient nor the input it would need is computed or kept.
struct Nf4GroupedLinear : torch::autograd::Function<Nf4GroupedLinear> {
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& x_in, const Tensor& packed,
                        const Tensor& absmax_codes, const Tensor& absmax_scale, double offset,
                        std::vector<std::int64_t> shape, std::int64_t groups, std::vector<std::int64_t> counts) {
    save_weight(ctx, packed, absmax_codes, absmax_scale, offset, shape[0], shape[1]);
    ctx->saved_data["groups"] = groups;
    ctx->saved_data["counts"] = c10::IValue(counts);
    const Nf4Tensor w = weight_of(packed, absmax_codes, absmax_scale, offset, shape[0], shape[1]);
    const std::int64_t out = shape[0] / groups;
    const Tensor x = x_in.contiguous();
    Tensor y = torch::empty({x.size(0), out}, x.options());
    std::int64_t row = 0;
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::int64_t n = counts[static_cast<std::size_t>(g)];
      if (n > 0) {
        Tensor dst = y.narrow(0, row, n);
        matmul_into(dst, x.narrow(0, row, n), dequantize_nf4_rows(w, g * out, out, x.scalar_type()).t());
      }
      row += n;
    }
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const Nf4Tensor w = saved_weight(ctx);
    const std::int64_t groups = ctx->saved_data["groups"].toInt(), out = w.shape[0] / groups;
    const std::vector<std::int64_t> counts = ctx->saved_data["counts"].toIntVector();
    const Tensor gy = grad_out[0].contiguous();
    Tensor gx = torch::empty({gy.size(0), w.shape[1]}, gy.options());
    std::int64_t row = 0;
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::int64_t n = counts[static_cast<std::size_t>(g)];
      if (n > 0) {
        Tensor dst = gx.narrow(0, row, n);
        matmul_into(dst, gy.narrow(0, row, n), dequantize_nf4_rows(w, g * out, out, gy.scalar_type()));
      }
      row += n;
    }
    return {gx, Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

// The signed 8-bit code map on a device, copied there once. Never freed:
// a CUDA tensor released by a static destructor could outlive the driver.
Tensor code_map_on(const torch::Device& device) {
  static std::mutex mu;
  static auto* maps = new std::map<std::string, Tensor>();
  std::lock_guard<std::mutex> lock(mu);
  Tensor& t = (*maps)[device.str()];
  if (!t.defined()) t = dynamic_map(true).to(device);
  return t;
}

// The blocks [b0, b0 + blocks) as n values, by the CUDA kernel.
Tensor dequantize_on_gpu(const Nf4Tensor& q, std::int64_t b0, std::int64_t blocks, std::int64_t n, torch::Dtype dtype) {
  const Tensor map = q.double_quantized() ? code_map_on(q.packed.device()) : Tensor();
  return cuda_nf4_dequantize(q.packed, q.absmax_scale, q.absmax_codes, map, q.absmax_offset, b0, blocks, n, dtype);
}

bool on_gpu_kernel(const Nf4Tensor& q, torch::Dtype dtype) {
  return q.packed.is_cuda() && cuda_kernel_enabled(FusedKernel::kNf4Dequantize) &&
         (dtype == torch::kFloat32 || dtype == torch::kBFloat16 || dtype == torch::kFloat16);
}

}  // namespace

std::int64_t Nf4Tensor::bytes() const {
  return static_cast<std::int64_t>(packed.nbytes() + absmax_codes.nbytes() + absmax_scale.nbytes());
}

Result<Nf4Tensor> quantize_nf4(const Tensor& weight, Nf4Scales scales) {
  if (!weight.defined() || weight.numel() == 0 || (weight.dim() != 1 && weight.dim() != 2)) {
    return Status::invalid_argument("quantize_nf4: expected a non-empty 1-D or 2-D tensor, got shape " +
                                    (weight.defined() ? shape_string(weight) : std::string("(undefined)")));
  }
  if (!weight.is_floating_point()) {
    return Status::invalid_argument("quantize_nf4: expected a floating-point tensor, got " +
                                    std::string(c10::toString(weight.scalar_type())));
  }
  try {
    torch::NoGradGuard no_grad;
    const Tensor flat = weight.detach().reshape({-1}).to(torch::kFloat32);
    if (!torch::isfinite(flat).all().item<bool>()) {
      return Status::invalid_argument("quantize_nf4: weight of shape " + shape_string(weight) +
                                      " holds inf or nan values");
    }
    Nf4Tensor q;
    q.shape = weight.sizes().vec();
    q.numel = flat.numel();
    const std::int64_t nb = (q.numel + kNf4BlockSize - 1) / kNf4BlockSize;
    Tensor blocks = torch::constant_pad_nd(flat, {0, nb * kNf4BlockSize - q.numel}, 0).view({nb, kNf4BlockSize});
    const Tensor absmax = blocks.abs().amax(1);
    // An all-zero block: any divisor gives zeros (code 7); its absmax stays
    // 0 in the statistics, as bitsandbytes stores it.
    const Tensor divisor = absmax.masked_fill(absmax == 0, 1.0f);
    const Tensor codes = torch::bucketize(blocks / divisor.unsqueeze(1), level_bounds().to(flat.device()),
                                          /*out_int32=*/true)
                             .view({-1, 2});
    q.packed = (codes.select(1, 0) * 16 + codes.select(1, 1)).to(torch::kUInt8);
    if (scales == Nf4Scales::kFp32) {
      q.absmax_codes = torch::empty({0}, absmax.options().dtype(torch::kUInt8));
      q.absmax_scale = absmax.contiguous();
      return q;
    }
    // Double quantisation (QLoRA section 3): the absmax values are positive
    // and similar, so centring them on their mean lets the signed 8-bit map
    // resolve their spread.
    q.absmax_offset = absmax.mean().item<float>();
    Blockwise8 dq = quantize_blockwise8(absmax - q.absmax_offset, kNf4AbsmaxBlockSize, /*is_signed=*/true);
    q.absmax_codes = std::move(dq.codes);
    q.absmax_scale = std::move(dq.absmax);
    return q;
  } catch (const c10::Error& e) {
    return Status::internal(std::string("quantize_nf4: ") + e.what_without_backtrace());
  }
}

Tensor nf4_absmax(const Nf4Tensor& q) {
  if (!q.double_quantized()) return q.absmax_scale;
  Blockwise8 dq;
  dq.codes = q.absmax_codes;
  dq.absmax = q.absmax_scale;
  dq.block_size = kNf4AbsmaxBlockSize;
  dq.is_signed = true;
  return dequantize_blockwise8(dq).add_(q.absmax_offset);
}

Tensor dequantize_nf4(const Nf4Tensor& q, torch::Dtype dtype) {
  torch::NoGradGuard no_grad;
  const std::int64_t nb = q.blocks();
  if (on_gpu_kernel(q, dtype)) return dequantize_on_gpu(q, 0, nb, q.numel, dtype).view(q.shape);
  const Tensor absmax = nf4_absmax(q);
  const Tensor table = byte_table().to(q.packed.device());
  // Written chunk by chunk into the output: the lookup's int32 index and
  // fp32 products stay a fixed size, so a dequantised weight costs about its
  // own bytes (memory_model.cpp's "one dequantised weight" overhead).
  Tensor out = torch::empty({nb * kNf4BlockSize}, q.packed.options().dtype(dtype));
  constexpr std::int64_t kChunkBlocks = 2048;
  for (std::int64_t b0 = 0; b0 < nb; b0 += kChunkBlocks) {
    const std::int64_t b1 = std::min(nb, b0 + kChunkBlocks);
    const Tensor bytes = q.packed.slice(0, b0 * kNf4BlockSize / 2, b1 * kNf4BlockSize / 2).to(torch::kInt32);
    out.slice(0, b0 * kNf4BlockSize, b1 * kNf4BlockSize)
        .view({b1 - b0, kNf4BlockSize})
        .copy_(table.index_select(0, bytes).view({b1 - b0, kNf4BlockSize}).mul_(absmax.slice(0, b0, b1).unsqueeze(1)));
  }
  const Tensor flat = out.numel() != q.numel ? out.slice(0, 0, q.numel) : out;
  return flat.view(q.shape);
}

Tensor dequantize_nf4_rows(const Nf4Tensor& q, std::int64_t row0, std::int64_t rows, torch::Dtype dtype) {
  torch::NoGradGuard no_grad;
  TORCH_CHECK(q.shape.size() == 2, "dequantize_nf4_rows: expected a 2-D weight");
  const std::int64_t in = q.shape[1], e0 = row0 * in, n = rows * in;
  TORCH_CHECK(e0 % kNf4BlockSize == 0 && n % kNf4BlockSize == 0 && row0 >= 0 && row0 + rows <= q.shape[0],
              "dequantize_nf4_rows: rows [", row0, ", ", row0 + rows, ") of ", in, " values are not whole blocks");
  const std::int64_t b0 = e0 / kNf4BlockSize, nb = n / kNf4BlockSize;
  if (on_gpu_kernel(q, dtype)) return dequantize_on_gpu(q, b0, nb, n, dtype).view({rows, in});
  // This slice's first-level absmax: as stored, or its 8-bit codes times
  // their 256-block scales, plus the offset (nf4_absmax() for the whole
  // tensor).
  Tensor absmax;
  if (q.double_quantized()) {
    const Tensor block = torch::arange(b0, b0 + nb, q.absmax_codes.options().dtype(torch::kInt64));
    absmax = dynamic_map(true)
                 .to(q.absmax_codes.device())
                 .index_select(0, q.absmax_codes.slice(0, b0, b0 + nb).to(torch::kInt64))
                 .mul_(q.absmax_scale.index_select(0, block.div(kNf4AbsmaxBlockSize, "floor")))
                 .add_(q.absmax_offset);
  } else {
    absmax = q.absmax_scale.slice(0, b0, b0 + nb);
  }
  const Tensor bytes = q.packed.slice(0, e0 / 2, (e0 + n) / 2).to(torch::kInt32);
  return byte_table()
      .to(q.packed.device())
      .index_select(0, bytes)
      .view({nb, kNf4BlockSize})
      .mul_(absmax.unsqueeze(1))
      .to(dtype)
      .view({rows, in});
}

Tensor nf4_grouped_linear(const Tensor& x, const Nf4Tensor& w, std::int64_t groups,
                          const std::vector<std::int64_t>& counts) {
  TORCH_CHECK(w.shape.size() == 2 && groups > 0 && w.shape[0] % groups == 0,
              "nf4_grouped_linear: ", groups, " groups do not divide the weight's rows");
  TORCH_CHECK(static_cast<std::int64_t>(counts.size()) == groups, "nf4_grouped_linear: ", counts.size(),
              " counts for ", groups, " groups");
  return Nf4GroupedLinear::apply(x, w.packed, w.absmax_codes, w.absmax_scale, static_cast<double>(w.absmax_offset),
                                 w.shape, groups, counts);
}

Tensor nf4_unpack_codes(const Nf4Tensor& q) {
  torch::NoGradGuard no_grad;
  const Tensor hi = q.packed.div(16, "floor"), lo = q.packed.remainder(16);
  return torch::stack({hi, lo}, 1).view({-1}).slice(0, 0, q.numel).to(torch::kUInt8);
}

Tensor nf4_linear(const Tensor& x, const Nf4Tensor& w, const Tensor& bias) {
  TORCH_CHECK(w.shape.size() == 2, "nf4_linear: the weight must be 2-D");
  Tensor y = Nf4LinearFunction::apply(x, w.packed, w.absmax_codes, w.absmax_scale,
                                      static_cast<double>(w.absmax_offset), w.shape[0], w.shape[1]);
  return bias.defined() ? y.add_(bias) : y;
}

}  // namespace tailor::runner
