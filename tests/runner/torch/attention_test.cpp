// Fused attention (scaled_dot_product_attention) against the materialised
// formula, in double precision: outputs and gradients, with grouped-query
// heads, a packed (per-document) causal mask and plain causal attention;
// and what the fused form keeps for backward.
#include "runner/torch/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "runner/torch/model.h"
#include "runner/torch/tracking_allocator.h"

namespace tailor::runner {
namespace {

using torch::Tensor;

// Two packed documents per row: tokens [0, 13) and [13, T).
Tensor two_documents(std::int64_t b, std::int64_t t) {
  return (torch::arange(t) >= 13).to(torch::kInt64).unsqueeze(0).expand({b, t}).contiguous();
}

// q (B, H, T, D), k and v (B, KV, T, D) as views of one (B, T, (H + 2 KV) D)
// tensor, the layout the model's fused qkv projection gives them.
struct Qkv {
  Tensor qkv, q, k, v;
  Qkv(std::int64_t b, std::int64_t h, std::int64_t kv, std::int64_t t, std::int64_t d, torch::Dtype dtype) {
    qkv = torch::randn({b, t, (h + 2 * kv) * d}, torch::TensorOptions().dtype(dtype)).requires_grad_();
    auto parts = qkv.split({h * d, kv * d, kv * d}, -1);
    q = parts[0].view({b, t, h, d}).transpose(1, 2);
    k = parts[1].view({b, t, kv, d}).transpose(1, 2);
    v = parts[2].view({b, t, kv, d}).transpose(1, 2);
  }
};

TEST(AttentionTest, FusedMatchesMaterialisedOutputAndGradients) {
  torch::manual_seed(3);
  const std::int64_t b = 2, h = 6, kv = 2, t = 37, d = 8;
  for (const bool packed : {true, false}) {
    Qkv x(b, h, kv, t, d, torch::kFloat64);
    const Tensor segments = packed ? two_documents(b, t) : Tensor();
    const Tensor dout = torch::randn({b, h, t, d}, torch::kFloat64);
    const Tensor want =
        causal_attention(x.q, x.k, x.v, attention_mask(segments, t, false, torch::kFloat64, torch::kCPU), false);
    const Tensor want_grad = torch::autograd::grad({want}, {x.qkv}, {dout})[0];
    const Tensor fused_mask = attention_mask(segments, t, true, torch::kFloat64, torch::kCPU);
    EXPECT_EQ(fused_mask.numel() == 0, !packed) << "plain causal rows need no mask";
    const Tensor got = causal_attention(x.q, x.k, x.v, fused_mask, true);
    EXPECT_TRUE(torch::allclose(got, want, 1e-10, 1e-10)) << "packed " << packed;
    const Tensor got_grad = torch::autograd::grad({got}, {x.qkv}, {dout})[0];
    EXPECT_TRUE(torch::allclose(got_grad, want_grad, 1e-9, 1e-9))
        << "packed " << packed << " max diff " << (got_grad - want_grad).abs().max().item<double>();
  }
}

// A sliding window of w: position i attends to i - w < j <= i, written out
// here position by position; a window as long as the sequence is no window.
TEST(AttentionTest, ASlidingWindowSeesOnlyTheLastWindowOfPositions) {
  torch::manual_seed(5);
  const std::int64_t b = 2, h = 4, kv = 2, t = 21, d = 8, window = 6;
  Qkv x(b, h, kv, t, d, torch::kFloat64);
  const Tensor k = x.k.repeat_interleave(h / kv, 1), v = x.v.repeat_interleave(h / kv, 1);
  Tensor want = torch::empty({b, h, t, d}, torch::kFloat64);
  for (std::int64_t i = 0; i < t; ++i) {
    const std::int64_t from = std::max<std::int64_t>(0, i - window + 1);
    const Tensor q_i = x.q.narrow(2, i, 1);
    const Tensor k_seen = k.narrow(2, from, i + 1 - from), v_seen = v.narrow(2, from, i + 1 - from);
    const Tensor p = (q_i.matmul(k_seen.transpose(-1, -2)) / std::sqrt(static_cast<double>(d))).softmax(-1);
    want.narrow(2, i, 1).copy_(p.matmul(v_seen));
  }
  for (const bool fused : {true, false}) {
    const Tensor mask = attention_mask(Tensor(), t, fused, torch::kFloat64, torch::kCPU, window);
    EXPECT_GT(mask.numel(), 0) << "fused " << fused;
    const Tensor got = causal_attention(x.q, x.k, x.v, mask, fused).detach();
    EXPECT_TRUE(torch::allclose(got, want, 1e-10, 1e-10)) << "fused " << fused;
    const Tensor whole = causal_attention(x.q, x.k, x.v, attention_mask(Tensor(), t, fused, torch::kFloat64,
                                                                        torch::kCPU), fused).detach();
    EXPECT_FALSE(torch::allclose(got, whole, 1e-6, 1e-6)) << "the window changes rows past it";
    EXPECT_TRUE(torch::allclose(got.narrow(2, 0, window), whole.narrow(2, 0, window), 1e-10, 1e-10))
        << "rows within the first window see everything before them";
    const Tensor as_long = attention_mask(Tensor(), t, fused, torch::kFloat64, torch::kCPU, t);
    EXPECT_TRUE(torch::equal(as_long, attention_mask(Tensor(), t, fused, torch::kFloat64, torch::kCPU)));
  }
}

TEST(AttentionTest, FusedKeepsOnlyItsOutputAndRowStatisticsForBackward) {
  TrackingAllocator& alloc = TrackingAllocator::install();
  const std::int64_t b = 1, h = 8, kv = 2, t = 512, d = 16;
  for (const bool packed : {true, false}) {
    Qkv x(b, h, kv, t, d, torch::kFloat32);
    const Tensor mask = attention_mask(packed ? two_documents(b, t) : Tensor(), t, true, torch::kFloat32, torch::kCPU);
    const std::int64_t before = alloc.current_bytes();
    const Tensor out = causal_attention(x.q, x.k, x.v, mask, true);
    // The output and one fp32 log-sum-exp per row and head: no repeated K/V
    // heads, no converted mask; materialised attention would keep its
    // (T x T) softmax per head as well (8 MiB here).
    EXPECT_EQ(alloc.current_bytes() - before, static_cast<std::int64_t>(out.nbytes()) + b * h * t * 4)
        << "packed " << packed;
    // Laid out (B, T, H, D), so merging the heads is a view.
    EXPECT_TRUE(out.transpose(1, 2).is_contiguous());
  }
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
  auto loss_and_grads = [&](bool fused) {
    model->set_fused_attention(fused);
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
