#include "runner/torch/grouped_linear.h"

#include "runner/torch/half_matmul.h"

namespace tailor::runner {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct GroupedLinear : torch::autograd::Function<GroupedLinear> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x_in, const Tensor& w, std::vector<std::int64_t> counts) {
    const Tensor x = x_in.contiguous();
    Tensor y = torch::empty({x.size(0), w.size(1)}, x.options());
    std::int64_t row = 0;
    for (std::size_t g = 0; g < counts.size(); ++g) {
      const std::int64_t n = counts[g];
      if (n > 0) {
        Tensor out = y.narrow(0, row, n);
        matmul_into(out, x.narrow(0, row, n), w[static_cast<std::int64_t>(g)].t());
      }
      row += n;
    }
    // x is needed only for w's gradient: a frozen mixture (LoRA) keeps none.
    ctx->save_for_backward({w.requires_grad() ? x : Tensor(), w});
    ctx->saved_data["counts"] = c10::IValue(counts);
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &w = saved[1];
    const Tensor gy = grad_out[0].contiguous();
    const std::vector<std::int64_t> counts = ctx->saved_data["counts"].toIntVector();
    const bool need_x = ctx->needs_input_grad(0), need_w = ctx->needs_input_grad(1);
    Tensor gx = need_x ? torch::empty({gy.size(0), w.size(2)}, gy.options()) : Tensor();
    // Groups without rows get a zero gradient.
    Tensor gw = need_w ? torch::zeros_like(w) : Tensor();
    std::int64_t row = 0;
    for (std::size_t g = 0; g < counts.size(); ++g) {
      const std::int64_t n = counts[g];
      const auto gi = static_cast<std::int64_t>(g);
      if (n > 0) {
        const Tensor dy = gy.narrow(0, row, n);
        if (need_x) {
          Tensor out = gx.narrow(0, row, n);
          matmul_into(out, dy, w[gi]);
        }
        if (need_w) {
          Tensor out = gw[gi];
          matmul_into(out, dy.t(), x.narrow(0, row, n));
        }
      }
      row += n;
    }
    return {gx, gw, Tensor()};
  }
};

}  // namespace

Tensor grouped_linear(const Tensor& x, const Tensor& w, const std::vector<std::int64_t>& counts) {
  return GroupedLinear::apply(x, w, counts);
}

}  // namespace tailor::runner
