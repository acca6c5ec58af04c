// The runner's fused CPU kernels (runner/torch/fused_ops.h, the fused AdamW
// pass of optimizer.h and its 8-bit form of adamw_8bit.h, bf16 linear
// layers through fp32 of half_matmul.h) against what LibTorch itself offers
// for the same math on this torch, side by side in one run: forward +
// backward time of each op at the shapes of bench/runner_vs_python.sh's
// model, in bf16 and fp32, and an AdamW step (and an 8-bit one) over that
// model's parameters. A fused kernel earns its place
// only where it is measured faster than the best ATen form; the table says
// which.
//   build/bin/fused_ops_bench [--threads N] [--reps N]
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "runner/torch/adamw_8bit.h"
#include "runner/torch/fused_ops.h"
#include "runner/torch/half_matmul.h"
#include "runner/torch/optimizer.h"

namespace {

using tailor::runner::TrainingOptimizer;
using torch::Tensor;

// The median of `reps` timed runs after two warm-up runs, in ms.
double time_ms(const std::function<void()>& fn, int reps) {
  fn();
  fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Forward, then backward from a fixed upstream gradient.
std::function<void()> fwd_bwd(const std::function<Tensor()>& forward, const std::vector<Tensor>& leaves) {
  return [=] {
    for (const Tensor& l : leaves) l.mutable_grad() = Tensor();
    Tensor y = forward();
    if (y.dim() == 0) {
      y.backward();
    } else {
      y.backward(torch::ones_like(y));
    }
  };
}

void row(const char* op, const char* dtype, const char* aten_form, double fused, double aten) {
  std::printf("%-14s %-5s %-34s %9.3f %9.3f %7.2fx  %s\n", op, dtype, aten_form, fused, aten, aten / fused,
              fused < aten ? "keep" : "ATen is faster");
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, reps = 30;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[i + 1]);
  }
  at::set_num_threads(threads);
  torch::manual_seed(0);
  // bench/runner_vs_python.sh: batch 8 x 256 tokens, hidden 256, 4 heads of
  // 64, MLP 688, vocab 4096, 4 layers.
  const std::int64_t b = 8, t = 256, c = 256, heads = 4, d = 64, inter = 688, vocab = 4096, layers = 4;
  std::printf("torch %s, %d threads, median of %d runs (ms, forward + backward)\n", TORCH_VERSION, threads, reps);
  std::printf("%-14s %-5s %-34s %9s %9s %8s\n", "op", "dtype", "ATen form", "fused", "ATen", "fused is");

  for (const auto dtype : {torch::kBFloat16, torch::kFloat32}) {
    const char* dn = dtype == torch::kBFloat16 ? "bf16" : "fp32";
    const auto opts = torch::TensorOptions().dtype(dtype);

    {  // Cross-entropy from the logits (the loss of the step).
      Tensor logits = torch::randn({b * t, vocab}, opts).requires_grad_();
      Tensor targets = torch::randint(0, vocab, {b * t}, torch::kLong);
      const double fused = time_ms(fwd_bwd([&] { return tailor::runner::fused_cross_entropy_sum(logits, targets); },
                                           {logits}), reps);
      const double aten = time_ms(fwd_bwd([&] {
        return torch::nn::functional::cross_entropy(
            logits.to(torch::kFloat32), targets,
            torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
      }, {logits}), reps);
      row("cross_entropy", dn, "cross_entropy(logits.float())", fused, aten);
    }
    {  // SwiGLU over the fused gate/up output.
      Tensor gate_up = torch::randn({b, t, 2 * inter}, opts).requires_grad_();
      const double fused = time_ms(fwd_bwd([&] { return tailor::runner::fused_swiglu(gate_up); }, {gate_up}), reps);
      const double aten = time_ms(fwd_bwd([&] {
        auto p = gate_up.chunk(2, -1);
        return torch::silu(p[0]) * p[1];
      }, {gate_up}), reps);
      row("swiglu", dn, "silu(gate) * up", fused, aten);
    }
    {  // RMSNorm with its weight.
      Tensor x = torch::randn({b, t, c}, opts).requires_grad_();
      Tensor w = torch::ones({c}, opts).requires_grad_();
      const double fused = time_ms(fwd_bwd([&] { return tailor::runner::fused_rms_norm(x, w, 1e-5); }, {x, w}), reps);
      const double aten =
          time_ms(fwd_bwd([&] { return at::rms_norm(x, {c}, w, 1e-5); }, {x, w}), reps);
      row("rms_norm", dn, "at::rms_norm", fused, aten);
    }
    {  // RoPE on q and k of the fused qkv output.
      Tensor qkv = torch::randn({b, t, 3 * heads * d}, opts).requires_grad_();
      Tensor pos = torch::arange(t).to(torch::kFloat32).unsqueeze(-1) *
                   torch::pow(10000.0, -torch::arange(0, d, 2).to(torch::kFloat32) / d);
      Tensor cos = pos.cos().unsqueeze(0).expand({b, t, d / 2}).contiguous();
      Tensor sin = pos.sin().unsqueeze(0).expand({b, t, d / 2}).contiguous();
      const double fused =
          time_ms(fwd_bwd([&] { return tailor::runner::fused_rope(qkv, cos, sin, 2 * heads, d); }, {qkv}), reps);
      const Tensor cc = torch::cat({cos, cos}, -1).to(dtype).unsqueeze(2), ss = torch::cat({sin, sin}, -1).to(dtype).unsqueeze(2);
      const double aten = time_ms(fwd_bwd([&] {
        auto parts = qkv.split({2 * heads * d, heads * d}, -1);
        const Tensor x = parts[0].view({b, t, 2 * heads, d});
        auto h = x.chunk(2, -1);
        const Tensor r = x * cc + torch::cat({-h[1], h[0]}, -1) * ss;
        return torch::cat({r.reshape({b, t, 2 * heads * d}), parts[1]}, -1);
      }, {qkv}), reps);
      row("rope", dn, "x*cos + rotate_half(x)*sin", fused, aten);
    }
    if (dtype == torch::kBFloat16) {  // The MLP's gate/up projection, input and weight trained.
      Tensor x = torch::randn({b, t, c}, opts).requires_grad_();
      Tensor w = torch::randn({2 * inter, c}, opts).mul(0.05).requires_grad_();
      const double fused = time_ms(fwd_bwd([&] { return tailor::runner::linear_through_fp32(x, w); }, {x, w}), reps);
      const double aten = time_ms(fwd_bwd([&] { return torch::linear(x, w); }, {x, w}), reps);
      row("linear", dn, "torch::linear (its bf16 GEMM)", fused, aten);
    }
    {  // One AdamW step over the model's parameters (mixed precision in
       // bf16: bf16 parameters and gradients, fp32 master weights and moments).
      std::vector<std::int64_t> sizes = {vocab * c, vocab * c};
      for (std::int64_t l = 0; l < layers; ++l) {
        for (std::int64_t n : {3 * c * c, c * c, 2 * inter * c, inter * c, c, c}) sizes.push_back(n);
      }
      std::vector<Tensor> params;
      for (std::int64_t n : sizes) {
        Tensor p = torch::randn({n}, opts);
        p.mutable_grad() = torch::randn({n}, opts);
        params.push_back(p);
      }
      const auto precision = dtype == torch::kBFloat16 ? tailor::dsl::Precision::kBf16 : tailor::dsl::Precision::kFp32;
      TrainingOptimizer opt(params, precision, tailor::dsl::Optimizer::kAdamw, 0.1);
      const double fused = time_ms([&] { opt.step(1e-4, 1.0); }, reps);
      // torch.optim.AdamW(fused=True)'s kernel over fp32 master weights; in
      // bf16 the gradients are first cast to fp32, as an fp32-master loop
      // must do (the cast is part of the cost).
      std::vector<Tensor> master, grads, m, v, steps;
      for (const Tensor& p : params) {
        master.push_back(p.to(torch::kFloat32));
        grads.push_back(p.grad().to(torch::kFloat32));
        m.push_back(torch::zeros_like(master.back()));
        v.push_back(torch::zeros_like(master.back()));
        steps.push_back(torch::zeros({}, torch::kFloat32));
      }
      const double aten = time_ms([&] {
        if (dtype == torch::kBFloat16) {
          for (std::size_t i = 0; i < params.size(); ++i) grads[i].copy_(params[i].grad());
        }
        at::_fused_adamw_(master, grads, m, v, {}, steps, 1e-4, 0.9, 0.95, 0.1, 1e-8, false, false);
        if (dtype == torch::kBFloat16) {
          for (std::size_t i = 0; i < params.size(); ++i) params[i].copy_(master[i]);
        }
      }, reps);
      row("adamw_step", dn, "at::_fused_adamw_ (fp32 master)", fused, aten);
      // The 8-bit AdamW update of the same parameters (fp32 targets: the
      // master weights in bf16), fused against the same update in ATen ops.
      std::vector<Tensor> fused_targets, composed_targets;
      std::vector<tailor::runner::Adam8bitState> fused_states, composed_states;
      for (const Tensor& p : params) {
        fused_targets.push_back(p.detach().to(torch::kFloat32));
        composed_targets.push_back(fused_targets.back().clone());
        fused_states.push_back(tailor::runner::make_adam8bit_state(p.numel()));
        composed_states.push_back(tailor::runner::make_adam8bit_state(p.numel()));
      }
      const tailor::runner::AdamUpdate u{1e-4, 0.9, 0.95, 1e-8, 0.1, 0.05, 1.0};
      const double fused8 = time_ms(
          [&] {
            for (std::size_t i = 0; i < params.size(); ++i)
              tailor::runner::adam8bit_update(fused_targets[i], params[i].grad(), fused_states[i], u);
          },
          reps);
      const double composed8 = time_ms(
          [&] {
            for (std::size_t i = 0; i < params.size(); ++i)
              tailor::runner::adam8bit_update_composed(composed_targets[i], params[i].grad(), composed_states[i], u);
          },
          reps);
      row("adamw_8bit", dn, "the same update in ATen ops", fused8, composed8);
    }
  }
  return 0;
}
