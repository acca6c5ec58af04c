#include "runner/torch/adamw_8bit.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "runner/torch/kernels.h"

namespace tailor::runner {
namespace {

// Blocks per pass (see adamw_8bit.h): small on the CPU, where the tracked
// peak is the product; large on accelerators, where launches cost time.
constexpr std::int64_t kCpuChunkBlocks = 16;
constexpr std::int64_t kDeviceChunkBlocks = 512;
static_assert(kAdamw8bitBlockSize <= kernels::kAdamw8bitMaxBlock);

}  // namespace

Adam8bitState make_adam8bit_state(std::int64_t numel, torch::Device device) {
  Adam8bitState s;
  const std::int64_t nb = (numel + kAdamw8bitBlockSize - 1) / kAdamw8bitBlockSize;
  for (Blockwise8* q : {&s.m, &s.v}) {
    q->block_size = kAdamw8bitBlockSize;
    q->is_signed = q == &s.m;
    q->absmax = torch::ones({nb}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
    // The code of 0.0 in each map, so the initial moments are exact zeros.
    const std::int64_t zero_code = torch::nonzero(dynamic_map(q->is_signed) == 0).item<std::int64_t>();
    q->codes = torch::full({numel}, zero_code, torch::TensorOptions().dtype(torch::kUInt8).device(device));
  }
  return s;
}

namespace {

// Each map's bounds padded for kernels::adamw_8bit and their bucket_index,
// built once.
struct EncoderTable {
  std::vector<float> bounds;
  std::vector<std::uint8_t> index;
};

const EncoderTable& encoder_table(bool is_signed) {
  static const auto kTables = [] {
    std::array<EncoderTable, 2> t;
    for (const bool s : {false, true}) {
      const torch::Tensor b = dynamic_map_bounds(s);
      t[s].bounds.assign(b.data_ptr<float>(), b.data_ptr<float>() + b.numel());
      t[s].bounds.resize(t[s].bounds.size() + kernels::kBucketSteps + 1, std::numeric_limits<float>::infinity());
      t[s].index.resize(kernels::kBucketIndexSize);
      const int widest = kernels::bucket_index(t[s].bounds.data(), t[s].index.data());
      TORCH_CHECK(widest <= kernels::kBucketSteps, "8-bit AdamW: a table span holds ", widest, " bounds");
    }
    return t;
  }();
  return kTables[is_signed];
}

bool fused_update(torch::Tensor& target, const torch::Tensor& grad, Adam8bitState& st, const AdamUpdate& u) {
  using F = torch::ScalarType;
  const auto dtype = [](const torch::Tensor& t, F f) { return t.scalar_type() == f; };
  const torch::Tensor* all[] = {&target, &grad, &st.m.codes, &st.m.absmax, &st.v.codes, &st.v.absmax};
  if (std::ranges::any_of(all, [](const torch::Tensor* t) { return !t->is_cpu() || !t->is_contiguous(); }))
    return false;
  const std::int64_t n = target.numel(), bs = kAdamw8bitBlockSize, nb = st.m.absmax.numel();
  kernels::Adamw8bitArgs a{};
  a.beta1 = static_cast<float>(u.beta1);
  a.beta2 = static_cast<float>(u.beta2);
  a.eps = static_cast<float>(u.eps);
  a.step_size = static_cast<float>(u.lr / u.bias_correction1);
  a.sqrt_bc2 = static_cast<float>(std::sqrt(u.bias_correction2));
  a.grad_scale = static_cast<float>(u.grad_scale);
  const EncoderTable &table_m = encoder_table(true), &table_v = encoder_table(false);
  a.map_m = dynamic_map(true).data_ptr<float>();
  a.bounds_m = table_m.bounds.data();
  a.index_m = table_m.index.data();
  a.map_v = dynamic_map(false).data_ptr<float>();
  a.bounds_v = table_v.bounds.data();
  a.index_v = table_v.index.data();
  std::uint8_t* cm = st.m.codes.data_ptr<std::uint8_t>();
  std::uint8_t* cv = st.v.codes.data_ptr<std::uint8_t>();
  float* am = st.m.absmax.data_ptr<float>();
  float* av = st.v.absmax.data_ptr<float>();
  std::function<void(std::int64_t, std::int64_t)> run;
  if (dtype(target, F::Float) && dtype(grad, F::Float)) {
    run = [&](std::int64_t b0, std::int64_t b1) {
      kernels::adamw_8bit(target.data_ptr<float>(), grad.data_ptr<float>(), cm, am, cv, av, n, bs, b0, b1, a);
    };
  } else if (dtype(target, F::Float) && dtype(grad, F::BFloat16)) {
    run = [&](std::int64_t b0, std::int64_t b1) {
      kernels::adamw_8bit(target.data_ptr<float>(), reinterpret_cast<const kernels::bf16*>(grad.data_ptr()), cm, am, cv,
                          av, n, bs, b0, b1, a);
    };
  } else if (dtype(target, F::BFloat16) && dtype(grad, F::BFloat16)) {
    run = [&](std::int64_t b0, std::int64_t b1) {
      kernels::adamw_8bit(reinterpret_cast<kernels::bf16*>(target.data_ptr()),
                          reinterpret_cast<const kernels::bf16*>(grad.data_ptr()), cm, am, cv, av, n, bs, b0, b1, a);
    };
  } else {
    return false;
  }
  // A fixed grain: results do not depend on the thread count (each block is
  // independent anyway).
  at::parallel_for(0, nb, 8, run);
  return true;
}

}  // namespace

bool adam8bit_update(torch::Tensor& target, const torch::Tensor& grad, Adam8bitState& st, const AdamUpdate& u) {
  torch::NoGradGuard no_grad;
  const std::int64_t n = target.numel();
  TORCH_CHECK(grad.numel() == n && st.m.codes.numel() == n && st.v.codes.numel() == n,
              "adam8bit_update: parameter, gradient and state sizes differ");
  if (fused_update(target, grad, st, u)) return true;
  adam8bit_update_composed(target, grad, st, u);
  return false;
}

void adam8bit_update_composed(torch::Tensor& target, const torch::Tensor& grad, Adam8bitState& st,
                              const AdamUpdate& u) {
  torch::NoGradGuard no_grad;
  const std::int64_t n = target.numel(), bs = kAdamw8bitBlockSize, nb = st.m.absmax.numel();
  TORCH_CHECK(grad.numel() == n && st.m.codes.numel() == n && st.v.codes.numel() == n,
              "adam8bit_update: parameter, gradient and state sizes differ");
  torch::Tensor flat_target = target.view({-1});
  const torch::Tensor flat_grad = grad.reshape({-1});
  const torch::Tensor& map_m = dynamic_map(true);
  const torch::Tensor& map_v = dynamic_map(false);
  const double step = u.lr / u.bias_correction1, sqrt_bc2 = std::sqrt(u.bias_correction2);
  const std::int64_t chunk = target.is_cpu() ? kCpuChunkBlocks : kDeviceChunkBlocks;
  for (std::int64_t b0 = 0; b0 < nb; b0 += chunk) {
    const std::int64_t b1 = std::min(nb, b0 + chunk), rows = b1 - b0;
    const std::int64_t e0 = b0 * bs, e1 = std::min(n, b1 * bs), len = e1 - e0, padded = rows * bs;
    // The last block may be partial: pad codes, gradient and result to whole blocks.
    auto pad = [&](torch::Tensor t) { return len < padded ? torch::constant_pad_nd(t, {0, padded - len}, 0) : t; };
    torch::Tensor g = pad(flat_grad.slice(0, e0, e1).to(torch::kFloat32)).view({rows, bs});
    if (u.grad_scale != 1.0) g = g.mul(u.grad_scale);
    torch::Tensor m = dequantize_blocks(pad(st.m.codes.slice(0, e0, e1)), st.m.absmax.slice(0, b0, b1), map_m);
    torch::Tensor v = dequantize_blocks(pad(st.v.codes.slice(0, e0, e1)), st.v.absmax.slice(0, b0, b1), map_v);
    if (len < padded) {
      // Padding codes decode to map[0], not zero: keep the tail out of absmax.
      m.view({-1}).slice(0, len).zero_();
      v.view({-1}).slice(0, len).zero_();
    }
    m.mul_(u.beta1).add_(g, 1.0 - u.beta1);
    v.mul_(u.beta2).addcmul_(g, g, 1.0 - u.beta2);
    // Same update as the fp32 AdamW (optimizer.cpp), on the dequantised moments.
    torch::Tensor delta = v.sqrt().div_(sqrt_bc2).add_(u.eps).reciprocal_().mul_(m).mul_(-step);
    torch::Tensor t = flat_target.slice(0, e0, e1);
    t.add_(delta.view({-1}).slice(0, 0, len).to(t.scalar_type()));
    torch::Tensor mc = torch::empty({padded}, st.m.codes.options()), vc = torch::empty({padded}, st.v.codes.options());
    quantize_blocks_into(m, map_m, mc, st.m.absmax.slice(0, b0, b1));
    quantize_blocks_into(v, map_v, vc, st.v.absmax.slice(0, b0, b1));
    st.m.codes.slice(0, e0, e1).copy_(mc.slice(0, 0, len));
    st.v.codes.slice(0, e0, e1).copy_(vc.slice(0, 0, len));
  }
}

}  // namespace tailor::runner
