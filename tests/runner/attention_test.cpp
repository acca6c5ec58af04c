// Memory-efficient attention against the materialised formula, in double
// precision: outputs and gradients, with grouped-query heads, a packed
// (per-document) causal mask and a block size that does not divide T.
#include "runner/torch/attention.h"

#include <gtest/gtest.h>

#include <cmath>

#include "runner/torch/model.h"
#include "runner/torch/tracking_allocator.h"

namespace tailor::runner {
namespace {

using torch::Tensor;

Tensor reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) {
  const std::int64_t groups = q.size(1) / k.size(1);
  const Tensor kr = k.repeat_interleave(groups, 1), vr = v.repeat_interleave(groups, 1);
  const Tensor s = torch::matmul(q, kr.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(3))) + mask;
  return torch::matmul(torch::softmax(s, -1), vr);
}

// Causal, within two packed documents per row: tokens [0, 13) and [13, T).
Tensor packed_mask(std::int64_t b, std::int64_t t) {
  Tensor seg = (torch::arange(t) >= 13).to(torch::kInt64).unsqueeze(0).expand({b, t});
  Tensor allowed = torch::ones({t, t}, torch::kBool).tril().unsqueeze(0) & (seg.unsqueeze(2) == seg.unsqueeze(1));
  return torch::zeros({b, t, t}, torch::kFloat64)
      .masked_fill_(allowed.logical_not(), -std::numeric_limits<double>::infinity())
      .unsqueeze(1);
}

TEST(AttentionTest, BlockwiseMatchesMaterialisedOutputAndGradients) {
  torch::manual_seed(3);
  const std::int64_t b = 2, h = 6, kv = 2, t = 37, d = 8;
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  Tensor q = torch::randn({b, h, t, d}, opts).requires_grad_(), k = torch::randn({b, kv, t, d}, opts).requires_grad_(),
         v = torch::randn({b, kv, t, d}, opts).requires_grad_();
  const Tensor mask = packed_mask(b, t), dout = torch::randn({b, h, t, d}, opts);

  const Tensor want = reference(q, k, v, mask);
  const auto want_grads = torch::autograd::grad({want}, {q, k, v}, {dout});
  for (std::int64_t block : {5, 16, 64}) {
    const Tensor got = blockwise_attention(q, k, v, mask, block);
    EXPECT_TRUE(torch::allclose(got, want, 1e-10, 1e-10)) << "block " << block;
    const auto got_grads = torch::autograd::grad({got}, {q, k, v}, {dout});
    for (int i = 0; i < 3; ++i) {
      EXPECT_TRUE(torch::allclose(got_grads[i], want_grads[i], 1e-9, 1e-9))
          << "block " << block << " gradient " << i << " max diff "
          << (got_grads[i] - want_grads[i]).abs().max().item<double>();
    }
  }
}

TEST(AttentionTest, KeepsOnlyItsOutputAndRowStatisticsForBackward) {
  TrackingAllocator& alloc = TrackingAllocator::install();
  const std::int64_t b = 1, h = 4, t = 512, d = 16;
  Tensor q = torch::randn({b, h, t, d}).requires_grad_(), k = torch::randn({b, h, t, d}).requires_grad_(),
         v = torch::randn({b, h, t, d}).requires_grad_();
  const Tensor mask = torch::zeros({t, t}).masked_fill_(torch::ones({t, t}, torch::kBool).triu(1),
                                                        -std::numeric_limits<float>::infinity());
  const std::int64_t before = alloc.current_bytes();
  const Tensor out = blockwise_attention(q, k, v, mask.view({1, 1, t, t}), 64);
  // The output and one fp32 log-sum-exp per row; materialised attention
  // would keep its (T x T) softmax per head as well (4 MiB here).
  EXPECT_EQ(alloc.current_bytes() - before, static_cast<std::int64_t>(out.nbytes()) + b * h * t * 4);
}

TEST(AttentionTest, TheModelTrainsTheSameWithEitherAttention) {
  const dsl::ModelArch a{.family = dsl::ModelFamily::kLlama, .layers = 2, .hidden = 32, .intermediate = 64,
                         .heads = 4, .kv_heads = 2, .vocab = 50, .max_seq_len = 64};
  torch::manual_seed(5);
  CausalLM model(a, /*checkpoint_every=*/1);
  model->to(torch::kFloat64);
  ModelInput in;
  in.input_ids = torch::randint(0, 50, {2, 24}, torch::kInt64);
  in.positions = torch::arange(24).unsqueeze(0).expand({2, 24}).contiguous();
  in.segment_ids = (torch::arange(24) >= 10).to(torch::kInt64).unsqueeze(0).expand({2, 24}).contiguous();
  auto loss_and_grads = [&](bool efficient) {
    model->set_memory_efficient_attention(efficient);
    model->zero_grad();
    Tensor loss = model->logits(model->hidden_states(in)).pow(2).mean();
    loss.backward();
    std::vector<Tensor> grads;
    for (const auto& p : model->parameters()) grads.push_back(p.grad().clone());
    return std::make_pair(loss.item<double>(), grads);
  };
  const auto [l0, g0] = loss_and_grads(false);
  const auto [l1, g1] = loss_and_grads(true);
  EXPECT_NEAR(l0, l1, 1e-12);
  ASSERT_EQ(g0.size(), g1.size());
  for (std::size_t i = 0; i < g0.size(); ++i) EXPECT_TRUE(torch::allclose(g0[i], g1[i], 1e-9, 1e-10)) << "param " << i;
}

}  // namespace
}  // namespace tailor::runner
