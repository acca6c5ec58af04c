#include "runner/torch/model.h"

#include <gtest/gtest.h>

#include "runner/torch/cross_entropy.h"

namespace tailor::runner {
namespace {

dsl::ModelArch tiny(dsl::ModelFamily family, std::int64_t kv_heads = 2) {
  dsl::ModelArch a;
  a.family = family;
  a.layers = 2;
  a.hidden = 32;
  a.intermediate = 64;
  a.heads = 4;
  a.kv_heads = family == dsl::ModelFamily::kGpt2 ? 4 : kv_heads;
  a.vocab = 50;
  a.max_seq_len = 16;
  a.tie_embeddings = family == dsl::ModelFamily::kGpt2;
  if (family == dsl::ModelFamily::kQwen3) a.head_size = 16;  // wider than hidden / heads
  if (family == dsl::ModelFamily::kPhi3) a.sliding_window = 5;
  if (family == dsl::ModelFamily::kMixtral) {
    a.experts = 4;
    a.experts_per_token = 2;
  }
  if (family == dsl::ModelFamily::kGemma2) {  // windowed even layers, capped scores and logits
    a.head_size = 16;
    a.sliding_window = 5;
    a.attn_logit_softcap = 2.0;
    a.final_logit_softcap = 3.0;
    a.query_pre_attn_scalar = 12;
    a.tie_embeddings = true;
  }
  if (family == dsl::ModelFamily::kGemma3) {  // q/k norms; windowed layers on their own RoPE base
    a.head_size = 16;
    a.sliding_window = 5;
    a.rope_local_theta = 100.0;
    a.query_pre_attn_scalar = 12;
    a.tie_embeddings = true;
  }
  return a;
}

// Every block kind and what varies it: grouped-query heads, biases, q/k
// norms with wide heads, a mixture of experts, Gemma 2's caps and norms.
constexpr dsl::ModelFamily kFamilies[] = {dsl::ModelFamily::kLlama, dsl::ModelFamily::kQwen2, dsl::ModelFamily::kQwen3,
                                          dsl::ModelFamily::kMixtral, dsl::ModelFamily::kPhi3,
                                          dsl::ModelFamily::kGemma2, dsl::ModelFamily::kGemma3,
                                          dsl::ModelFamily::kGpt2};

ModelInput input(const torch::Tensor& ids) {
  ModelInput in;
  in.input_ids = ids;
  in.positions = torch::arange(ids.size(1)).unsqueeze(0).expand({ids.size(0), ids.size(1)}).contiguous();
  return in;
}

std::int64_t count(CausalLM& m) {
  std::int64_t n = 0;
  for (const auto& p : m->parameters()) n += p.numel();
  return n;
}

TEST(ModelTest, ParameterCountMatchesTheArchitecture) {
  torch::manual_seed(0);
  for (auto family : kFamilies) {
    const dsl::ModelArch a = tiny(family);
    CausalLM m(a, 0);
    EXPECT_EQ(count(m), a.parameter_count()) << dsl::to_string(family);
  }
}

TEST(ModelTest, OutputsAtAPositionIgnoreLaterTokens) {
  torch::manual_seed(1);
  for (auto family : kFamilies) {
    CausalLM m(tiny(family), 0);
    torch::NoGradGuard ng;
    auto ids = torch::randint(0, 50, {1, 12}, torch::kLong);
    auto changed = ids.clone();
    changed.index_put_({0, torch::indexing::Slice(8, torch::indexing::None)}, 7);
    auto a = m->logits(m->hidden_states(input(ids)));
    auto b = m->logits(m->hidden_states(input(changed)));
    using torch::indexing::Slice;
    EXPECT_TRUE(torch::allclose(a.index({0, Slice(0, 8)}), b.index({0, Slice(0, 8)}), 1e-5, 1e-6));
    EXPECT_FALSE(torch::allclose(a.index({0, Slice(8, 12)}), b.index({0, Slice(8, 12)}), 1e-5, 1e-6));
  }
}

TEST(ModelTest, PackedDocumentsDoNotSeeEachOther) {
  torch::manual_seed(2);
  for (auto family : kFamilies) {
    CausalLM m(tiny(family), 0);
    torch::NoGradGuard ng;
    auto doc1 = torch::randint(0, 50, {1, 5}, torch::kLong);
    auto doc2 = torch::randint(0, 50, {1, 7}, torch::kLong);
    ModelInput packed;
    packed.input_ids = torch::cat({doc1, doc2}, 1);
    packed.positions = torch::cat({torch::arange(5), torch::arange(7)}).unsqueeze(0);
    packed.segment_ids = torch::cat({torch::zeros(5, torch::kLong), torch::ones(7, torch::kLong)}).unsqueeze(0);
    auto together = m->logits(m->hidden_states(packed));
    auto alone = m->logits(m->hidden_states(input(doc2)));
    using torch::indexing::Slice;
    EXPECT_TRUE(torch::allclose(together.index({0, Slice(5, 12)}), alone.index({0}), 1e-4, 1e-5))
        << dsl::to_string(family);
  }
}

TEST(ModelTest, CheckpointedGradientsEqualPlainGradients) {
  for (auto family : kFamilies) {
  for (std::int64_t every : {1, 2}) {
    torch::manual_seed(3);
    CausalLM plain(tiny(family), 0);
    torch::manual_seed(3);
    CausalLM ckpt(tiny(family), every);
    auto ids = torch::randint(0, 50, {2, 10}, torch::kLong);
    auto targets = torch::randint(0, 50, {2, 10}, torch::kLong);
    for (CausalLM* m : {&plain, &ckpt}) {
      (*m)->train();
      cross_entropy_sum((*m)->logits((*m)->hidden_states(input(ids))), targets).backward();
    }
    auto p = plain->parameters(), c = ckpt->parameters();
    ASSERT_EQ(p.size(), c.size());
    for (std::size_t i = 0; i < p.size(); ++i) {
      ASSERT_TRUE(c[i].grad().defined()) << i;
      EXPECT_TRUE(torch::allclose(p[i].grad(), c[i].grad(), 1e-5, 1e-6))
          << dsl::to_string(family) << " parameter " << i << " every " << every;
    }
  }
  }
}

TEST(ModelTest, CrossEntropySumIgnoresMaskedTargets) {
  auto logits = torch::randn({1, 4, 6});
  auto targets = torch::tensor({{1, -100, 3, 5}}, torch::kLong);
  auto logp = torch::log_softmax(logits[0], -1);
  const double expected = -(logp[0][1] + logp[2][3] + logp[3][5]).item<double>();
  EXPECT_NEAR(cross_entropy_sum(logits, targets).item<double>(), expected, 1e-5);
}

TEST(ModelTest, Bf16ForwardTracksFp32) {
  torch::manual_seed(4);
  CausalLM m(tiny(dsl::ModelFamily::kLlama), 0);
  torch::NoGradGuard ng;
  auto ids = torch::randint(0, 50, {2, 12}, torch::kLong);
  auto ref = m->logits(m->hidden_states(input(ids)));
  m->to(torch::kBFloat16);
  auto low = m->logits(m->hidden_states(input(ids))).to(torch::kFloat32);
  EXPECT_LT((ref - low).abs().max().item<double>(), 0.05);
}

}  // namespace
}  // namespace tailor::runner

namespace tailor::runner {
namespace {

// The hand-written RMSNorm backward against autograd on the composed ops.
TEST(ModelTest, RmsNormGradientsMatchAutogradOfTheFormula) {
  torch::manual_seed(5);
  dsl::ModelArch a = tiny(dsl::ModelFamily::kLlama);
  a.layers = 1;
  CausalLM m(a, 0);
  auto ids = torch::randint(0, 50, {2, 6}, torch::kLong);
  auto targets = torch::randint(0, 50, {2, 6}, torch::kLong);
  cross_entropy_sum(m->logits(m->hidden_states(input(ids))), targets).backward();
  // Finite differences on one norm weight.
  auto named = m->named_parameters();
  torch::Tensor w = named["final_norm"];
  const double analytic = w.grad()[3].item<double>();
  torch::NoGradGuard ng;
  auto loss_at = [&](double delta) {
    w[3] += delta;
    const double l = cross_entropy_sum(m->logits(m->hidden_states(input(ids))), targets).item<double>();
    w[3] -= delta;
    return l;
  };
  const double h = 1e-3;
  const double numeric = (loss_at(h) - loss_at(-h)) / (2 * h);
  EXPECT_NEAR(analytic, numeric, 1e-2 * std::max(1.0, std::fabs(numeric)));
}

}  // namespace
}  // namespace tailor::runner
