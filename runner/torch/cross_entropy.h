// The training loss: summed token cross-entropy whose memory is the logits
// and their gradient, on any device.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace tailor::runner {

// Sum over rows of -log softmax(logits)[target], targets == -100 ignored; an
// fp32 scalar. logits (..., V), targets (...) in [0, V) or -100.
//
// Keeps the logits and one fp32 log-sum-exp per row for backward, which
// writes the gradient straight in the logits' dtype: 2 + 2 bytes per logit
// in bf16. On the CPU (fp32, bf16) that is fused_ops' kernel; elsewhere (a
// GPU, fp16) the same algorithm in ATen ops over slices of
// strategies::kCrossEntropySliceElements logits, whose fp32 temporaries are
// all it adds. Composed ops (a cast, log_softmax, nll_loss) kept 10-12 bytes
// per logit on an H100 instead (docs/gpu-measurements.md), which with a 32k-152k
// vocabulary is often the largest activation. `slice_elements` > 0 sets
// another slice size (tests).
//
// softcap > 0: the loss of softcap * tanh(logits / softcap) (Gemma 2's final
// logits), capped a slice at a time in fp32 in both passes, so the capped
// logits are never a tensor of their own; always the sliced ATen path.
torch::Tensor cross_entropy_sum(const torch::Tensor& logits, const torch::Tensor& targets,
                                std::int64_t slice_elements = 0, double softcap = 0);

// Rows of a `vocab`-wide slice of about `elements` logits (at least one).
std::int64_t cross_entropy_slice_rows(std::int64_t elements, std::int64_t vocab);

}  // namespace tailor::runner
