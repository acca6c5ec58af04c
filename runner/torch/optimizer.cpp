#include "runner/torch/optimizer.h"

#include <cmath>

namespace tailor::runner {

TrainingOptimizer::TrainingOptimizer(std::vector<torch::Tensor> params, dsl::Precision precision, dsl::Optimizer kind,
                                     double weight_decay)
    : kind_(kind), weight_decay_(weight_decay) {
  const bool mixed = precision == dsl::Precision::kBf16 || precision == dsl::Precision::kFp16;
  const auto state_dtype = precision == dsl::Precision::kPureBf16 ? torch::kBFloat16 : torch::kFloat32;
  torch::NoGradGuard no_grad;
  for (torch::Tensor& p : params) {
    Slot s;
    s.param = p;
    if (mixed) s.master = p.detach().to(torch::kFloat32).clone();
    s.m = torch::zeros(p.sizes(), torch::TensorOptions().dtype(state_dtype));
    if (kind_ != dsl::Optimizer::kSgd) s.v = torch::zeros(p.sizes(), torch::TensorOptions().dtype(state_dtype));
    s.decay = p.dim() >= 2;
    slots_.push_back(std::move(s));
  }
}

void TrainingOptimizer::zero_grad() {
  for (Slot& s : slots_) {
    if (s.param.grad().defined()) s.param.mutable_grad() = torch::Tensor();  // free, as set_to_none does
  }
}

double TrainingOptimizer::grad_norm(double unscale) const {
  double sum = 0;
  for (const Slot& s : slots_) {
    if (!s.param.grad().defined()) continue;
    const double n = s.param.grad().to(torch::kFloat32).norm().item<double>();
    sum += n * n;
  }
  return std::sqrt(sum) / unscale;
}

bool TrainingOptimizer::grads_finite() const {
  for (const Slot& s : slots_) {
    if (s.param.grad().defined() && !torch::isfinite(s.param.grad()).all().item<bool>()) return false;
  }
  return true;
}

void TrainingOptimizer::step(double lr, double grad_scale) {
  torch::NoGradGuard no_grad;
  ++t_;
  const double bc1 = 1.0 - std::pow(beta1_, static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(beta2_, static_cast<double>(t_));
  for (Slot& s : slots_) {
    if (!s.param.grad().defined()) continue;
    torch::Tensor& target = s.master.defined() ? s.master : s.param;
    // The gradient in the states' dtype, scaled; a temporary the size of
    // this one parameter at most.
    torch::Tensor g = s.param.grad().to(s.m.scalar_type());
    if (grad_scale != 1.0) g = g.mul(grad_scale);
    if (s.decay && weight_decay_ > 0) target.mul_(1.0 - lr * weight_decay_);
    if (kind_ == dsl::Optimizer::kSgd) {
      s.m.mul_(momentum_).add_(g);
      target.add_(s.m.to(target.scalar_type()), -lr);
    } else {
      s.m.mul_(beta1_).add_(g, 1.0 - beta1_);
      s.v.mul_(beta2_).addcmul_(g, g, 1.0 - beta2_);
      torch::Tensor denom = s.v.sqrt().div_(std::sqrt(bc2)).add_(eps_);
      target.addcdiv_(s.m, denom, -lr / bc1);
    }
    if (s.master.defined()) s.param.copy_(s.master);
  }
}

std::int64_t TrainingOptimizer::state_bytes() const {
  std::int64_t n = 0;
  for (const Slot& s : slots_) {
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
    out.push_back(s.m);
    out.push_back(s.v.defined() ? s.v : torch::Tensor());
  }
  return out;
}

bool TrainingOptimizer::load_state_tensors(const std::vector<torch::Tensor>& in, std::int64_t steps) {
  if (in.size() != slots_.size() * 3) return false;
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    const torch::Tensor* parts[3] = {&in[3 * i], &in[3 * i + 1], &in[3 * i + 2]};
    torch::Tensor* mine[3] = {&s.master, &s.m, &s.v};
    for (int k = 0; k < 3; ++k) {
      if (mine[k]->defined() != parts[k]->defined()) return false;
      if (!mine[k]->defined()) continue;
      if (mine[k]->sizes() != parts[k]->sizes() || mine[k]->scalar_type() != parts[k]->scalar_type()) return false;
      mine[k]->copy_(*parts[k]);
    }
  }
  t_ = steps;
  return true;
}

}  // namespace tailor::runner
