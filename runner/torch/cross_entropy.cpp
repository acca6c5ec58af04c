#include "runner/torch/cross_entropy.h"

#include <algorithm>

#include "runner/torch/fused_ops.h"
#include "strategies/memory_model.h"

namespace tailor::runner {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The fused CPU kernel's algorithm (kernels.h) in ATen ops, a slice of rows
// at a time: log_softmax and softmax read the logits in their own dtype and
// compute in fp32 (one pass each), so a slice's one fp32 tensor is the only
// temporary, and backward recomputes the softmax instead of keeping it.
// A slice of logits as a new fp32 tensor (never the saved logits
// themselves, which the in-place cap would overwrite), soft-capped.
Tensor capped_slice(const Tensor& logits, double cap) {
  Tensor z = logits.to(torch::kFloat32, /*non_blocking=*/false, /*copy=*/true);
  return cap > 0 ? z.div_(cap).tanh_().mul_(cap) : z;
}

struct SlicedCrossEntropy : torch::autograd::Function<SlicedCrossEntropy> {
  static Tensor forward(AutogradContext* ctx, const Tensor& logits_in, const Tensor& targets_in,
                        std::int64_t slice_elements, double cap) {
    const std::int64_t v = logits_in.size(-1);
    const Tensor logits = logits_in.reshape({-1, v}).contiguous();
    const Tensor targets = targets_in.reshape({-1}).to(logits.device(), torch::kInt64);
    const std::int64_t rows = logits.size(0);
    TORCH_CHECK(targets.numel() == rows, "cross-entropy: ", rows, " rows of logits but ", targets.numel(), " targets");
    if (rows > 0) {
      const bool bad = (((targets < 0) & (targets != -100)) | (targets >= v)).any().item<bool>();
      TORCH_CHECK(!bad, "cross-entropy: a target id is outside the vocabulary of ", v);
    }
    Tensor loss = torch::zeros({}, logits.options().dtype(torch::kFloat64));
    const Tensor ignored = targets == -100;
    const Tensor index = targets.clamp_min(0).unsqueeze(1);
    const std::int64_t step = cross_entropy_slice_rows(slice_elements, v);
    for (std::int64_t r0 = 0; r0 < rows; r0 += step) {
      const std::int64_t r1 = std::min(rows, r0 + step);
      const Tensor logp = cap > 0 ? torch::log_softmax(capped_slice(logits.slice(0, r0, r1), cap), 1)
                                  : torch::log_softmax(logits.slice(0, r0, r1), 1, torch::kFloat32);
      loss -= logp.gather(1, index.slice(0, r0, r1))
                  .squeeze(1)
                  .masked_fill_(ignored.slice(0, r0, r1), 0.0)
                  .sum(torch::kFloat64);
    }
    ctx->save_for_backward({logits, targets});
    ctx->saved_data["sizes"] = logits_in.sizes().vec();
    ctx->saved_data["step"] = step;
    ctx->saved_data["cap"] = cap;
    return loss.to(torch::kFloat32);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const Tensor &logits = saved[0], &targets = saved[1];
    const std::int64_t rows = logits.size(0);
    const Tensor keep = (targets != -100).to(torch::kFloat32).unsqueeze(1) * grad_out[0].to(torch::kFloat32);
    const Tensor index = targets.clamp_min(0).unsqueeze(1);
    Tensor grad = torch::empty_like(logits);
    const std::int64_t step = ctx->saved_data["step"].toInt();
    const double cap = ctx->saved_data["cap"].toDouble();
    for (std::int64_t r0 = 0; r0 < rows; r0 += step) {
      const std::int64_t r1 = std::min(rows, r0 + step);
      // softmax - one_hot(target), scaled; rows of ignored targets are 0.
      Tensor z = cap > 0 ? capped_slice(logits.slice(0, r0, r1), cap) : Tensor();
      Tensor p = cap > 0 ? torch::softmax(z, 1) : torch::softmax(logits.slice(0, r0, r1), 1, torch::kFloat32);
      p.scatter_add_(1, index.slice(0, r0, r1), torch::full({r1 - r0, 1}, -1.0, p.options()));
      p.mul_(keep.slice(0, r0, r1));
      // Through the cap: d(c tanh(x / c))/dx = 1 - (z / c)^2.
      if (cap > 0) p.mul_(z.div_(cap).square_().neg_().add_(1.0));
      grad.slice(0, r0, r1).copy_(p);
    }
    return {grad.view(ctx->saved_data["sizes"].toIntVector()), Tensor(), Tensor(), Tensor()};
  }
};

}  // namespace

std::int64_t cross_entropy_slice_rows(std::int64_t elements, std::int64_t vocab) {
  return std::max<std::int64_t>(1, elements / std::max<std::int64_t>(1, vocab));
}

Tensor cross_entropy_sum(const Tensor& logits, const Tensor& targets, std::int64_t slice_elements, double softcap) {
  if (softcap <= 0 && fused_supported(logits, FusedKernel::kCrossEntropy))
    return fused_cross_entropy_sum(logits, targets);
  return SlicedCrossEntropy::apply(logits, targets,
                                   slice_elements > 0 ? slice_elements : strategies::kCrossEntropySliceElements,
                                   softcap);
}

}  // namespace tailor::runner
