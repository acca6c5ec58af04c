#include "runner/torch/optimizer.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <unordered_map>
#include <vector>

#include "runner/torch/cuda_kernels.h"
#include "runner/torch/host_tensor.h"
#include "runner/torch/kernels.h"
#include "runner/torch/tracking_allocator.h"

namespace tailor::runner {

namespace {

using kernels::bf16;

template <class T>
T* ptr(const torch::Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}
bool is(const torch::Tensor& t, torch::ScalarType type) {
  return t.defined() && t.scalar_type() == type && t.device().is_cpu() && t.is_contiguous();
}

// Fixed-size blocks: the work splits the same way whatever the thread count,
// so reductions over them are deterministic.
constexpr std::int64_t kBlock = 1 << 16;

double sum_squares(const torch::Tensor& g) {
  const std::int64_t n = g.numel(), blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<std::size_t>(blocks), 0.0);
  const bool bf = g.scalar_type() == torch::kBFloat16;
  at::parallel_for(0, blocks, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) {
      const std::int64_t start = b * kBlock, len = std::min(kBlock, n - start);
      partial[static_cast<std::size_t>(b)] =
          bf ? kernels::sum_squares(ptr<bf16>(g) + start, len) : kernels::sum_squares(ptr<float>(g) + start, len);
    }
  });
  double s = 0;
  for (double x : partial) s += x;
  return s;
}

// One-element tensors' values as doubles, in their order, read with one
// copy per device: a GPU is waited for once, not once a tensor.
std::vector<double> read_scalars(const std::vector<torch::Tensor>& scalars) {
  std::unordered_map<c10::Device, std::vector<std::size_t>> by_device;
  for (std::size_t i = 0; i < scalars.size(); ++i)
    by_device[scalars[i].device()].push_back(i);
  std::vector<double> out(scalars.size());
  for (const auto& entry : by_device) {
    const std::vector<std::size_t>& indices = entry.second;
    std::vector<torch::Tensor> parts;
    for (const std::size_t i : indices)
      parts.push_back(scalars[i].reshape({1}).to(torch::kFloat64));
    const torch::Tensor host = torch::cat(parts).to(torch::kCPU);
    const double* v = host.const_data_ptr<double>();
    for (std::size_t k = 0; k < indices.size(); ++k)
      out[indices[k]] = v[k];
  }
  return out;
}

}  // namespace

std::optional<std::vector<torch::Tensor>> convert_adamw_states(const std::vector<torch::Tensor>& states,
                                                               const std::vector<torch::Tensor>& params,
                                                               dsl::Optimizer to, dsl::Precision precision) {
  const std::size_t n = params.size();
  const bool to_8bit = to == dsl::Optimizer::kAdamw8bit;
  if ((to != dsl::Optimizer::kAdamw && !to_8bit) || states.size() != n * (to_8bit ? 3 : 5)) return std::nullopt;
  const std::size_t per_in = to_8bit ? 3 : 5;
  const auto state_dtype = precision == dsl::Precision::kPureBf16 ? torch::kBFloat16 : torch::kFloat32;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> out;
  for (std::size_t i = 0; i < n; ++i) {
    const torch::Tensor* in = &states[i * per_in];
    const torch::Tensor &m = in[1], &v = in[2];
    if (!m.defined() || !v.defined()) return std::nullopt;  // SGD's momentum, or not these tensors
    out.push_back(in[0]);
    if (to_8bit) {
      if (m.numel() != params[i].numel()) return std::nullopt;
      if (param_options(params[i], to).blockwise_8bit) {
        Blockwise8 qm = quantize_blockwise8(m, kAdamw8bitBlockSize, /*is_signed=*/true);
        Blockwise8 qv = quantize_blockwise8(v, kAdamw8bitBlockSize, /*is_signed=*/false);
        out.insert(out.end(), {qm.codes, qv.codes, qm.absmax, qv.absmax});
      } else {
        out.insert(out.end(), {m, v, torch::Tensor(), torch::Tensor()});
      }
      continue;
    }
    const torch::Tensor &m_absmax = in[3], &v_absmax = in[4];
    if (m_absmax.defined() != v_absmax.defined() || m.numel() != params[i].numel()) return std::nullopt;
    if (!m_absmax.defined()) {  // fp32 moments already (a small tensor)
      out.insert(out.end(), {m, v});
      continue;
    }
    const auto moment = [&](const torch::Tensor& codes, const torch::Tensor& absmax, bool is_signed) {
      return dequantize_blockwise8(Blockwise8{codes, absmax, kAdamw8bitBlockSize, is_signed})
          .view(params[i].sizes())
          .to(state_dtype);
    };
    out.push_back(moment(m, m_absmax, true));
    out.push_back(moment(v, v_absmax, false));
  }
  return out;
}

ParamOptions param_options(const torch::Tensor& whole, dsl::Optimizer kind) {
  return {whole.dim() >= 2, kind == dsl::Optimizer::kAdamw8bit && whole.numel() >= kAdamw8bitMinElements};
}

TrainingOptimizer::TrainingOptimizer(std::vector<torch::Tensor> params, dsl::Precision precision, dsl::Optimizer kind,
                                     double weight_decay, const std::vector<ParamOptions>& options,
                                     OptimizerHome home)
    : home_(home), kind_(kind), weight_decay_(weight_decay) {
  const bool mixed = precision == dsl::Precision::kBf16 || precision == dsl::Precision::kFp16;
  const auto state_dtype = precision == dsl::Precision::kPureBf16 ? torch::kBFloat16 : torch::kFloat32;
  torch::NoGradGuard no_grad;
  std::optional<HostLedgerScope> host;
  if (offloaded()) host.emplace();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const ParamOptions po = i < options.size() ? options[i] : param_options(params[i], kind);
    Slot s;
    if (home_ == OptimizerHome::kHostCopies) {
      s.device = params[i];
      // Pinned where a GPU's tensor is copied to and from it.
      s.param = host_copy(params[i]);
    } else {
      s.param = params[i];
    }
    const torch::Tensor& p = s.param;
    // fp32 parameters (adapters beside modules trained whole) need none.
    if (mixed && p.scalar_type() != torch::kFloat32) s.master = p.detach().to(torch::kFloat32).clone();
    if (kind_ == dsl::Optimizer::kAdamw8bit && po.blockwise_8bit) {
      s.q8 = make_adam8bit_state(p.numel(), p.device());
    } else {
      s.m = torch::zeros(p.sizes(), p.options().dtype(state_dtype));
      const bool one_state = kind_ == dsl::Optimizer::kSgd || kind_ == dsl::Optimizer::kLion;
      if (!one_state) s.v = torch::zeros(p.sizes(), p.options().dtype(state_dtype));
    }
    s.decay = po.decay;
    slots_.push_back(std::move(s));
  }
}

void TrainingOptimizer::zero_grad() {
  for (Slot& s : slots_) {
    if (s.param.grad().defined()) s.param.mutable_grad() = torch::Tensor();  // free, as set_to_none does
    if (s.device.defined() && s.device.grad().defined()) s.device.mutable_grad() = torch::Tensor();
  }
}

void TrainingOptimizer::offload_gradients() {
  if (home_ != OptimizerHome::kHostCopies) return;
  torch::NoGradGuard no_grad;
  HostLedgerScope host;
  for (Slot& s : slots_) {
    const torch::Tensor g = s.device.grad();
    if (!g.defined()) continue;
    torch::Tensor& h = s.param.mutable_grad();
    if (h.defined()) {
      h.add_(g.to(torch::kCPU));
    } else {
      h = host_copy(g);
    }
    s.device.mutable_grad() = torch::Tensor();
  }
}

void TrainingOptimizer::sync_from_device() {
  if (home_ != OptimizerHome::kHostCopies) return;
  torch::NoGradGuard no_grad;
  for (Slot& s : slots_) s.param.copy_(s.device);
}

// The norms ATen computes (GPU tensors, other dtypes) are read back together:
// one wait for the GPU a step rather than one a tensor.
double TrainingOptimizer::grad_norm(double unscale) const {
  double sum = 0;
  std::vector<torch::Tensor> norms;
  for (const Slot& s : slots_) {
    const torch::Tensor& g = s.param.grad();
    if (!g.defined()) continue;
    if (is(g, torch::kFloat32) || is(g, torch::kBFloat16)) {
      sum += sum_squares(g);
      continue;
    }
    norms.push_back(g.to(torch::kFloat32).norm());
  }
  for (const double n : read_scalars(norms))
    sum += n * n;
  return std::sqrt(sum) / unscale;
}

bool TrainingOptimizer::grads_finite() const {
  std::vector<torch::Tensor> finite;
  for (const Slot& s : slots_) {
    if (s.param.grad().defined()) finite.push_back(torch::isfinite(s.param.grad()).all());
  }
  const std::vector<double> answers = read_scalars(finite);
  return std::ranges::all_of(answers, [](double a) { return a != 0; });
}

void TrainingOptimizer::step(double lr, double grad_scale) {
  torch::NoGradGuard no_grad;
  std::optional<HostLedgerScope> host;  // the update's temporaries too
  if (offloaded()) host.emplace();
  ++t_;
  const double bc1 = 1.0 - std::pow(beta1_, static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(beta2_, static_cast<double>(t_));
  for (Slot& s : slots_) {
    if (!s.param.grad().defined()) continue;
    if (kind_ == dsl::Optimizer::kAdamw && fused_step(s, lr, grad_scale, bc1, bc2)) continue;
    torch::Tensor& target = s.master.defined() ? s.master : s.param;
    if (s.q8) {
      // Scaled and converted chunk by chunk inside: no whole-tensor copy of the gradient.
      if (s.decay && weight_decay_ > 0) target.mul_(1.0 - lr * weight_decay_);
      adam8bit_update(target, s.param.grad(), *s.q8, AdamUpdate{lr, beta1_, beta2_, eps_, bc1, bc2, grad_scale});
      if (s.master.defined()) s.param.copy_(s.master);
      continue;
    }
    // The gradient in the states' dtype, scaled; a temporary the size of
    // this one parameter at most.
    torch::Tensor g = s.param.grad().to(s.m.scalar_type());
    if (grad_scale != 1.0) g = g.mul(grad_scale);
    if (s.decay && weight_decay_ > 0) target.mul_(1.0 - lr * weight_decay_);
    if (kind_ == dsl::Optimizer::kSgd) {
      s.m.mul_(momentum_).add_(g);
      target.add_(s.m.to(target.scalar_type()), -lr);
    } else if (kind_ == dsl::Optimizer::kLion) {
      // Chen et al., "Symbolic Discovery of Optimization Algorithms" (2023),
      // algorithm 2: the sign of an interpolation of the momentum and the
      // gradient, then the momentum moves with the slower beta.
      target.add_(s.m.mul(kLionBeta1).add_(g, 1.0 - kLionBeta1).sign_().to(target.scalar_type()), -lr);
      s.m.mul_(kLionBeta2).add_(g, 1.0 - kLionBeta2);
    } else {
      s.m.mul_(beta1_).add_(g, 1.0 - beta1_);
      s.v.mul_(beta2_).addcmul_(g, g, 1.0 - beta2_);
      torch::Tensor denom = s.v.sqrt().div_(std::sqrt(bc2)).add_(eps_);
      target.addcdiv_(s.m, denom, -lr / bc1);
    }
    if (s.master.defined()) s.param.copy_(s.master);
  }
  // Offloaded: the device's parameters from the updated host copies.
  if (home_ == OptimizerHome::kHostCopies) {
    for (Slot& s : slots_) s.device.copy_(s.param);
  }
}

bool TrainingOptimizer::fused_step(Slot& s, double lr, double grad_scale, double bc1, double bc2) {
  const torch::Tensor& g = s.param.grad();
  kernels::AdamWArgs a{};
  a.beta1 = static_cast<float>(beta1_);
  a.beta2 = static_cast<float>(beta2_);
  a.eps = static_cast<float>(eps_);
  a.lr_wd = s.decay ? static_cast<float>(lr * weight_decay_) : 0.0f;
  a.step_size = static_cast<float>(lr / bc1);
  a.sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
  a.grad_scale = static_cast<float>(grad_scale);
  if (s.param.is_cuda()) {
    if (!cuda_kernel_enabled(FusedKernel::kAdamw)) return false;
    return s.master.defined() ? cuda_adamw(s.master, s.m, s.v, g, a, s.param)
                              : cuda_adamw(s.param, s.m, s.v, g, a, torch::Tensor());
  }
  const std::int64_t n = s.param.numel();
  using F = torch::ScalarType;
  std::function<void(std::int64_t, std::int64_t)> run;
  if (!s.master.defined() && is(s.param, F::Float) && is(g, F::Float) && is(s.m, F::Float) && is(s.v, F::Float)) {
    run = [&](std::int64_t i, std::int64_t len) {
      kernels::adamw(ptr<float>(s.param) + i, ptr<float>(s.m) + i, ptr<float>(s.v) + i, ptr<float>(g) + i, len, a,
                     nullptr);
    };
  } else if (is(s.master, F::Float) && is(s.param, F::BFloat16) && is(g, F::BFloat16) && is(s.m, F::Float) &&
             is(s.v, F::Float)) {
    run = [&](std::int64_t i, std::int64_t len) {
      kernels::adamw(ptr<float>(s.master) + i, ptr<float>(s.m) + i, ptr<float>(s.v) + i, ptr<bf16>(g) + i, len, a,
                     ptr<bf16>(s.param) + i);
    };
  } else if (!s.master.defined() && is(s.param, F::BFloat16) && is(g, F::BFloat16) && is(s.m, F::BFloat16) &&
             is(s.v, F::BFloat16)) {
    run = [&](std::int64_t i, std::int64_t len) {
      kernels::adamw(ptr<bf16>(s.param) + i, ptr<bf16>(s.m) + i, ptr<bf16>(s.v) + i, ptr<bf16>(g) + i, len, a);
    };
  } else {
    return false;  // fp16 or a layout the kernels do not take: the ATen ops below
  }
  at::parallel_for(0, (n + kBlock - 1) / kBlock, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) run(b * kBlock, std::min(kBlock, n - b * kBlock));
  });
  return true;
}

std::int64_t TrainingOptimizer::state_bytes() const {
  std::int64_t n = 0;
  for (const Slot& s : slots_) {
    if (s.q8) n += s.q8->bytes();
    if (!s.m.defined()) continue;
    n += static_cast<std::int64_t>(s.m.nbytes());
    if (s.v.defined()) n += static_cast<std::int64_t>(s.v.nbytes());
  }
  return n;
}

std::int64_t TrainingOptimizer::master_bytes() const {
  std::int64_t n = 0;
  for (const Slot& s : slots_) {
    if (s.master.defined()) n += static_cast<std::int64_t>(s.master.nbytes());
  }
  return n;
}

std::vector<torch::Tensor> TrainingOptimizer::state_tensors() const {
  std::vector<torch::Tensor> out;
  for (const Slot& s : slots_) {
    out.push_back(s.master.defined() ? s.master : torch::Tensor());
    out.push_back(s.q8 ? s.q8->m.codes : s.m);
    out.push_back(s.q8 ? s.q8->v.codes : s.v.defined() ? s.v : torch::Tensor());
    if (kind_ == dsl::Optimizer::kAdamw8bit) {
      out.push_back(s.q8 ? s.q8->m.absmax : torch::Tensor());
      out.push_back(s.q8 ? s.q8->v.absmax : torch::Tensor());
    }
  }
  return out;
}

bool TrainingOptimizer::load_state_tensors(const std::vector<torch::Tensor>& in, std::int64_t steps) {
  const std::size_t per = kind_ == dsl::Optimizer::kAdamw8bit ? 5 : 3;
  if (in.size() != slots_.size() * per) return false;
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    torch::Tensor none_m, none_v;
    torch::Tensor* mine[5] = {&s.master, s.q8 ? &s.q8->m.codes : &s.m, s.q8 ? &s.q8->v.codes : &s.v,
                              s.q8 ? &s.q8->m.absmax : &none_m, s.q8 ? &s.q8->v.absmax : &none_v};
    for (std::size_t k = 0; k < per; ++k) {
      const torch::Tensor* part = &in[per * i + k];
      if (mine[k]->defined() != part->defined()) return false;
      if (!mine[k]->defined()) continue;
      if (mine[k]->sizes() != part->sizes() || mine[k]->scalar_type() != part->scalar_type()) return false;
      mine[k]->copy_(*part);
    }
  }
  t_ = steps;
  return true;
}

}  // namespace tailor::runner
