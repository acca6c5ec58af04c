// LoRA and QLoRA on CausalLM: zero-initialised B leaves the base output,
// only adapters get gradients, merging keeps the outputs, QLoRA matches a
// dequantised-weight reference, and PEFT files round-trip.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "dsl/model_family.h"
#include "runner/io/safetensors.h"
#include "runner/torch/lora.h"
#include "runner/torch/model.h"
#include "runner/torch/nf4.h"
#include "tests/testing/temp_dir.h"

namespace tailor::runner {
namespace {

using torch::Tensor;

dsl::ModelArch llama_arch() {
  return {.family = dsl::ModelFamily::kLlama, .layers = 2, .hidden = 64, .intermediate = 96, .heads = 4,
          .kv_heads = 2, .vocab = 300, .max_seq_len = 32};
}

dsl::ModelArch gpt2_arch() {
  return {.family = dsl::ModelFamily::kGpt2, .layers = 2, .hidden = 64, .intermediate = 256, .heads = 4,
          .kv_heads = 4, .vocab = 300, .max_seq_len = 32, .tie_embeddings = true, .norm_eps = 1e-5};
}

dsl::ModelArch mixtral_arch() {
  return {.family = dsl::ModelFamily::kMixtral, .layers = 2, .hidden = 64, .intermediate = 96, .heads = 4,
          .kv_heads = 2, .vocab = 300, .max_seq_len = 32, .experts = 4, .experts_per_token = 2};
}

ModelInput sample_input() {
  ModelInput in;
  in.input_ids = torch::randint(0, 300, {2, 12}, torch::kInt64);
  in.positions = torch::arange(12, torch::kInt64).unsqueeze(0).repeat({2, 1});
  return in;
}

torch::Tensor logits_of(CausalLM& m, const ModelInput& in) { return m->logits(m->hidden_states(in)); }

// Gives every B a non-zero value, so adapters change the output.
void randomise_b(CausalLM& m) {
  torch::NoGradGuard ng;
  for (auto& p : m->named_parameters()) {
    if (p.key().size() > 2 && p.key().substr(p.key().size() - 2) == "_B") p.value().normal_(0, 0.05);
  }
}

TEST(LoraTest, ZeroInitialisedBLeavesTheBaseOutput) {
  for (const auto& arch : {llama_arch(), gpt2_arch()}) {
    torch::manual_seed(1);
    CausalLM m(arch, 0);
    const ModelInput in = sample_input();
    const torch::Tensor before = logits_of(m, in).detach();
    LoraOptions o;
    o.rank = 4;
    ASSERT_TRUE(attach_lora(*m, o).is_ok());
    m->eval();
    EXPECT_TRUE(torch::equal(logits_of(m, in), before));
    // The A matrices are not zero (kaiming-uniform): only B starts at zero.
    const auto params = lora_parameters(*m);
    ASSERT_FALSE(params.empty());
    EXPECT_GT(params[0].abs().sum().item<double>(), 0);
    EXPECT_LE(params[0].abs().max().item<double>(), 1.0 / std::sqrt(64.0) + 1e-6);
    EXPECT_EQ(params[1].abs().sum().item<double>(), 0);
  }
}

TEST(LoraTest, AdapterShapesFollowTargetsOnTheFusedProjections) {
  torch::manual_seed(1);
  CausalLM m(llama_arch(), 0);
  LoraOptions o;
  o.rank = 8;
  o.targets = {"k_proj", "up_proj", "down_proj"};
  ASSERT_TRUE(attach_lora(*m, o).is_ok());
  const auto f = lora_footprint(*m);
  // k: 8 * (64 + 32); up: 8 * (64 + 96); down: 8 * (96 + 64); per layer, 2 layers.
  EXPECT_EQ(f.adapter_parameters, 2 * 8 * ((64 + 32) + (64 + 96) + (96 + 64)));
  EXPECT_EQ(f.adapter_bytes, f.adapter_parameters * 4);
  EXPECT_EQ(f.quantized_bytes, 0);
  CausalLM g(gpt2_arch(), 0);
  LoraOptions bad;
  bad.targets = {"q_proj"};
  const Status s = attach_lora(*g, bad);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("q_proj"), std::string::npos);
  EXPECT_NE(s.message().find("c_attn"), std::string::npos);
  EXPECT_FALSE(has_lora(*g));
}

TEST(LoraTest, OnlyAdapterTensorsReceiveGradients) {
  for (std::int64_t ckpt : {0, 1}) {
    for (const auto& arch : {llama_arch(), gpt2_arch()}) {
      torch::manual_seed(2);
      CausalLM m(arch, ckpt);
      LoraOptions o;
      o.rank = 4;
      o.dropout = 0.1;
      ASSERT_TRUE(attach_lora(*m, o).is_ok());
      randomise_b(m);
      m->train();
      const ModelInput in = sample_input();
      logits_of(m, in).pow(2).mean().backward();
      for (const auto& p : m->named_parameters()) {
        const bool adapter = p.key().rfind("lora.", 0) == 0;
        EXPECT_EQ(p.value().requires_grad(), adapter) << p.key();
        EXPECT_EQ(p.value().grad().defined(), adapter) << p.key() << " ckpt " << ckpt;
        if (adapter && p.value().grad().defined()) {
          EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0) << p.key() << " ckpt " << ckpt;
        }
      }
    }
  }
}

// modules_to_save: the embedding and the head train beside the adapters
// (the embedding's rows of the tokens seen only), in the weights' dtype;
// a tied matrix trains once; the rest stays frozen. Names outside the
// family's, and a tied matrix named once, are refused.
TEST(LoraTest, ModulesToSaveTrainTheEmbeddingAndTheHeadWhole) {
  for (const auto& arch : {llama_arch(), gpt2_arch()}) {
    SCOPED_TRACE(dsl::to_string(arch.family));
    torch::manual_seed(2);
    CausalLM m(arch, 1);
    m->to(torch::kBFloat16);
    LoraOptions o;
    o.rank = 4;
    const std::vector<std::string> names = dsl::whole_module_names(arch.family);
    o.modules_to_save = {names[0], names[1]};
    ASSERT_TRUE(attach_lora(*m, o).is_ok());
    const std::vector<Tensor> whole = whole_module_parameters(*m);
    ASSERT_EQ(whole.size(), arch.tie_embeddings ? 1u : 2u);
    m->train();
    ModelInput in = sample_input();
    in.input_ids = in.input_ids.remainder(100);  // rows 100 and above are never seen
    logits_of(m, in).to(torch::kFloat32).pow(2).mean().backward();
    for (const auto& p : m->named_parameters()) {
      const bool trained =
          p.key().rfind("lora.", 0) == 0 ||
          std::any_of(whole.begin(), whole.end(), [&](const Tensor& w) { return w.is_same(p.value()); });
      EXPECT_EQ(p.value().grad().defined(), trained) << p.key();
    }
    const Tensor embedding_grad = m->embedding_weight().grad();
    EXPECT_EQ(embedding_grad.scalar_type(), torch::kBFloat16);
    EXPECT_GT(embedding_grad.slice(0, 0, 100).abs().sum().item<double>(), 0);
    // Tied, the head's gradient reaches every row of the one matrix.
    const double unseen = embedding_grad.slice(0, 100).abs().sum().item<double>();
    if (arch.tie_embeddings) {
      EXPECT_GT(unseen, 0);
    } else {
      EXPECT_EQ(unseen, 0);
      EXPECT_GT(m->lm_head_weight().grad().abs().sum().item<double>(), 0);
    }
  }
  CausalLM tied(gpt2_arch(), 0);
  LoraOptions once;
  once.modules_to_save = {"wte"};
  const Status s = attach_lora(*tied, once);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("ties wte and lm_head"), std::string::npos) << s.message();
  CausalLM llama(llama_arch(), 0);
  LoraOptions wrong;
  wrong.modules_to_save = {"wte"};
  const Status w = attach_lora(*llama, wrong);
  EXPECT_FALSE(w.is_ok());
  EXPECT_NE(w.message().find("valid: embed_tokens, lm_head"), std::string::npos) << w.message();
}

TEST(LoraTest, MergedWeightsGiveTheSameOutputs) {
  for (const auto& arch : {llama_arch(), gpt2_arch()}) {
    for (bool subset : {false, true}) {
      torch::manual_seed(3);
      CausalLM m(arch, 0);
      LoraOptions o;
      o.rank = 4;
      o.alpha = 8;
      if (subset) o.targets = arch.family == dsl::ModelFamily::kGpt2 ? std::vector<std::string>{"c_proj"}
                                                                       : std::vector<std::string>{"v_proj", "gate_proj"};
      ASSERT_TRUE(attach_lora(*m, o).is_ok());
      randomise_b(m);
      m->eval();
      const ModelInput in = sample_input();
      const torch::Tensor unmerged = logits_of(m, in).detach();
      ASSERT_TRUE(merge_lora(*m, torch::kFloat32).is_ok());
      EXPECT_FALSE(has_lora(*m));
      for (const auto& p : m->named_parameters()) EXPECT_EQ(p.key().rfind("lora.", 0), std::string::npos);
      const torch::Tensor merged = logits_of(m, in).detach();
      EXPECT_TRUE(torch::allclose(merged, unmerged, 1e-4, 1e-5)) << (merged - unmerged).abs().max().item<double>();
      // And the adapters did change the model (the test can fail).
      torch::manual_seed(3);
      CausalLM base(arch, 0);
      base->eval();
      EXPECT_FALSE(torch::allclose(logits_of(base, in), merged, 1e-4, 1e-5));
    }
  }
}

// Both bases: NF4 with fp32 scales and with double-quantised ones.
TEST(QloraTest, QuantisedBaseMatchesADequantisedReferenceAndFreesDenseWeights) {
  // Mixtral: the experts in NF4 too, one expert dequantised at a time.
  for (const auto& [base, scales] : {std::pair{dsl::Quantization::kNf4Double, Nf4Scales::kDoubleQuantized},
                                     std::pair{dsl::Quantization::kNf4, Nf4Scales::kFp32}})
    for (const auto& arch : {llama_arch(), gpt2_arch(), mixtral_arch()}) {
      SCOPED_TRACE(std::string(dsl::to_string(arch.family)) + " over " + dsl::to_string(base));
      torch::manual_seed(4);
      CausalLM m(arch, 0);
      torch::manual_seed(4);
      CausalLM ref(arch, 0);
      LoraOptions o;
      o.rank = 4;
      o.base = base;
      ASSERT_TRUE(attach_lora(*m, o).is_ok());
      randomise_b(m);
      // The reference: the same weights dequantised into dense parameters,
      // with the same adapters: merging m's copy gives exactly that model.
      LoraOptions plain = o;
      plain.base = dsl::Quantization::kNone;
      for (std::size_t l = 0; l < 2; ++l) {
        for (Projection p : {Projection::kQkv, Projection::kO, Projection::kUp, Projection::kDown}) {
          if (!ref->projection_weight(l, p).defined()) continue;  // a mixture has no shared MLP
          EXPECT_EQ(m->projection_weight(l, p).numel(), 0);
          auto q = quantize_nf4(ref->projection_weight(l, p), scales);
          ASSERT_TRUE(q.is_ok());
          torch::NoGradGuard ng;
          ref->projection_weight(l, p).copy_(dequantize_nf4(*q, torch::kFloat32));
        }
        for (bool up : {true, false}) {
          if (!arch.moe()) continue;
          EXPECT_EQ(m->experts_weight(l, up).numel(), 0);
          Tensor& w = ref->experts_weight(l, up);
          auto q = quantize_nf4(w.reshape({w.size(0) * w.size(1), w.size(2)}), scales);
          ASSERT_TRUE(q.is_ok());
          torch::NoGradGuard ng;
          w.copy_(dequantize_nf4(*q, torch::kFloat32).view(w.sizes()));
        }
      }
      ASSERT_TRUE(attach_lora(*ref, plain).is_ok());
      {
        torch::NoGradGuard ng;
        const auto a = lora_parameters(*m), b = lora_parameters(*ref);
        ASSERT_EQ(a.size(), b.size());
        for (std::size_t i = 0; i < a.size(); ++i)
          b[i].copy_(a[i]);
      }
      const auto f = lora_footprint(*m);
      // 0.5 + 1/64 + 4/(64*256) and 0.5 + 4/64 bytes a parameter, and the
      // padding of a last partial block.
      EXPECT_LE(static_cast<double>(f.quantized_bytes) / static_cast<double>(f.quantized_parameters),
                base == dsl::Quantization::kNf4 ? 0.57 : 0.55);
      if (arch.moe()) {  // every expert's weights are among the quantised ones
        EXPECT_GE(f.quantized_parameters, arch.layers * arch.experts * 3 * arch.hidden * arch.intermediate);
      }
      m->eval();
      ref->eval();
      const ModelInput in = sample_input();
      const torch::Tensor y = logits_of(m, in), yr = logits_of(ref, in);
      EXPECT_TRUE(torch::allclose(y, yr, 1e-4, 1e-5)) << (y - yr).abs().max().item<double>();
      // Gradients reach adapters through the NF4 layers' input gradients.
      m->train();
      logits_of(m, in).pow(2).mean().backward();
      for (const auto& t : lora_parameters(*m)) {
        ASSERT_TRUE(t.grad().defined());
        EXPECT_GT(t.grad().abs().sum().item<double>(), 0);
      }
      m->eval();
      ASSERT_TRUE(merge_lora(*m, torch::kFloat32).is_ok());
      EXPECT_TRUE(torch::allclose(logits_of(m, in), yr, 1e-4, 1e-5));
      if (arch.moe()) {
        EXPECT_EQ(m->experts_weight(0, true).sizes(), ref->experts_weight(0, true).sizes());
      }
    }
}

// A folder whose modules_to_save do not fit the model is refused naming the
// file and what differs: other modules than the attached ones, or a tied
// matrix's two copies (PEFT trains them apart) that differ.
TEST(LoraTest, ModulesToSaveThatDoNotFitTheModelAreRefused) {
  tailor::testing::TempDir dir;
  torch::manual_seed(5);
  CausalLM m(gpt2_arch(), 0);
  LoraOptions o;
  o.rank = 4;
  o.modules_to_save = {"wte", "lm_head"};
  ASSERT_TRUE(attach_lora(*m, o).is_ok());
  const std::string out = dir.file("whole");
  ASSERT_TRUE(save_peft_adapter(*m, out, "tiny-base").is_ok());
  std::ifstream cfg_in(out + "/adapter_config.json");
  EXPECT_EQ(nlohmann::json::parse(cfg_in)["modules_to_save"], nlohmann::json::array({"wte", "lm_head"}));

  CausalLM plain(gpt2_arch(), 0);
  LoraOptions adapters_only = o;
  adapters_only.modules_to_save.clear();
  ASSERT_TRUE(attach_lora(*plain, adapters_only).is_ok());
  Status s = load_peft_adapter(*plain, out);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find(
                "adapter_config.json: modules_to_save [\"lm_head\",\"wte\"] differs from the adapters attached ([])"),
            std::string::npos)
      << s.message();

  // The head's copy moved away from the embedding's.
  auto file = io::SafetensorsFile::open(out + "/adapter_model.safetensors");
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  std::vector<Tensor> keep;
  std::vector<io::TensorToWrite> tensors;
  for (const io::TensorView& v : file->tensors()) {
    Tensor t = torch::empty(v.shape, torch::kFloat32);
    std::memcpy(t.data_ptr(), v.data.data(), v.data.size());
    if (v.name == "base_model.model.lm_head.weight") t.add_(0.5);
    keep.push_back(t);
    tensors.push_back({v.name, v.dtype, v.shape,
                       std::span<const std::byte>(static_cast<const std::byte*>(t.data_ptr()), t.nbytes())});
  }
  ASSERT_TRUE(io::write_safetensors(dir.file("moved.safetensors"), tensors).is_ok());
  std::filesystem::rename(dir.file("moved.safetensors"), out + "/adapter_model.safetensors");
  CausalLM tied(gpt2_arch(), 0);
  ASSERT_TRUE(attach_lora(*tied, o).is_ok());
  s = load_peft_adapter(*tied, out);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("adapter_model.safetensors: base_model.model.transformer.wte.weight differs from "
                             "base_model.model.lm_head.weight, which this model ties to it (one matrix)"),
            std::string::npos)
      << s.message();
}

TEST(LoraTest, PeftFilesRoundTripWithPeftNames) {
  tailor::testing::TempDir dir;
  for (const auto& arch : {llama_arch(), gpt2_arch()}) {
    torch::manual_seed(5);
    CausalLM m(arch, 0);
    LoraOptions o;
    o.rank = 4;
    o.alpha = 16;
    ASSERT_TRUE(attach_lora(*m, o).is_ok());
    randomise_b(m);
    const std::string out = dir.file(arch.family == dsl::ModelFamily::kGpt2 ? "gpt2/adapter" : "llama/adapter");
    ASSERT_TRUE(save_peft_adapter(*m, out, "tiny-base").is_ok());
    EXPECT_FALSE(std::filesystem::exists(out + ".tmp"));

    auto file = io::SafetensorsFile::open(out + "/adapter_model.safetensors");
    ASSERT_TRUE(file.is_ok()) << file.status().message();
    const bool gpt2 = arch.family == dsl::ModelFamily::kGpt2;
    const std::string a_name = gpt2 ? "base_model.model.transformer.h.1.mlp.c_proj.lora_A.weight"
                                    : "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
    const std::string b_name = gpt2 ? "base_model.model.transformer.h.1.mlp.c_proj.lora_B.weight"
                                    : "base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight";
    const io::TensorView* a = file->find(a_name);
    const io::TensorView* b = file->find(b_name);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(a->shape, (std::vector<std::int64_t>{4, gpt2 ? 256 : 64}));        // (r, in)
    EXPECT_EQ(b->shape, (std::vector<std::int64_t>{gpt2 ? 64 : 32, 4}));          // (out, r)
    EXPECT_EQ(a->dtype, io::DType::kF32);
    EXPECT_EQ(file->tensors().size(), lora_parameters(*m).size());

    std::ifstream cfg_in(out + "/adapter_config.json");
    const auto cfg = nlohmann::json::parse(cfg_in);
    EXPECT_EQ(cfg["peft_type"], "LORA");
    EXPECT_EQ(cfg["r"], 4);
    EXPECT_EQ(cfg["lora_alpha"], 16.0);
    EXPECT_EQ(cfg["fan_in_fan_out"], gpt2);
    EXPECT_EQ(cfg["target_modules"].size(), gpt2 ? 3u : 7u);

    // Loading into a differently initialised model restores every tensor and the scale.
    torch::manual_seed(6);
    CausalLM m2(arch, 0);
    LoraOptions o2 = o;
    o2.alpha = 4;
    ASSERT_TRUE(attach_lora(*m2, o2).is_ok());
    const Status loaded = load_peft_adapter(*m2, out);
    ASSERT_TRUE(loaded.is_ok()) << loaded.message();
    const auto p1 = lora_parameters(*m), p2 = lora_parameters(*m2);
    for (std::size_t i = 0; i < p1.size(); ++i) EXPECT_TRUE(torch::equal(p1[i], p2[i])) << i;
    // Same base (seed 5 vs 6 differ), so compare through merged deltas: both
    // merge the same B A scale into their own base.
    m->eval();
    m2->eval();
    torch::manual_seed(6);
    CausalLM base2(arch, 0);
    LoraOptions o3 = o;
    ASSERT_TRUE(attach_lora(*base2, o3).is_ok());
    {
      torch::NoGradGuard ng;
      const auto p3 = lora_parameters(*base2);
      for (std::size_t i = 0; i < p1.size(); ++i) p3[i].copy_(p1[i]);
    }
    base2->eval();
    const ModelInput in = sample_input();
    EXPECT_TRUE(torch::allclose(logits_of(m2, in), logits_of(base2, in), 1e-5, 1e-6));

    // A rank mismatch is refused with the file's name.
    torch::manual_seed(6);
    CausalLM m3(arch, 0);
    LoraOptions o4 = o;
    o4.rank = 2;
    ASSERT_TRUE(attach_lora(*m3, o4).is_ok());
    const Status bad = load_peft_adapter(*m3, out);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.message().find("adapter_config.json"), std::string::npos) << bad.message();
  }
}

}  // namespace
}  // namespace tailor::runner
