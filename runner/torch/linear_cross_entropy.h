// The output projection and the loss as one operation: the summed token
// cross-entropy of hidden @ weight^T computed a slice of trained rows at a
// time, so that no (tokens x vocabulary) tensor exists in any dtype, in
// forward or backward. With a 128k vocabulary the logits and their gradient
// are 0.5 MiB a token in bf16, more than a small model's whole layer stack
// at long sequences; here a token costs its hidden row and its gradient.
// The planner's "fused-linear" cross-entropy (strategies::CrossEntropy).
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace tailor::runner {

// Sum over rows of -log softmax(hidden @ weight^T)[target] (soft-capped as
// softcap * tanh(z / softcap) first when softcap > 0), targets == -100
// ignored; an fp32 scalar equal to cross_entropy_sum() of the materialised
// logits. hidden (..., C), weight (V, C), targets (...) in [0, V) or -100.
//
// Only the rows with a target are projected at all (packing and
// assistant-only masks skip the rest). Slices hold `slice_elements` logits
// (0: strategies::kCrossEntropySliceElements): one slice's logits in the
// compute dtype, their fp32 softmax and the gradient in the compute dtype
// are the only temporaries beside the trained rows' hidden state.
//
// When only `hidden` needs a gradient (a frozen head: LoRA, QLoRA) and the
// dtype is not fp16, the gradient is computed in forward (Liger's order,
// Hsu et al. 2024) and kept as (rows, C) until backward scales it: no
// second projection. When the weight needs one too, or in fp16 (whose
// unscaled gradients would underflow before the loss scale reaches them),
// forward keeps the trained rows' hidden state and backward projects each
// slice again: one more matmul of the head's three.
torch::Tensor linear_cross_entropy_sum(const torch::Tensor& hidden, const torch::Tensor& weight,
                                       const torch::Tensor& targets, double softcap = 0,
                                       std::int64_t slice_elements = 0);

}  // namespace tailor::runner
