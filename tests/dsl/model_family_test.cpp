#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <string>

#include "dsl/model_family.h"

namespace tailor::dsl {
namespace {

ModelArch small(ModelFamily f) {
  ModelArch a;
  a.family = f;
  a.layers = 3;
  a.hidden = 64;
  a.intermediate = 176;
  a.heads = 4;
  a.kv_heads = family_info(f).keys.kv_heads ? 2 : 4;
  a.vocab = 300;
  a.max_seq_len = 512;
  a.tie_embeddings = f == ModelFamily::kGpt2;
  a.rope_theta = family_info(f).keys.rope_theta ? 500000.0 : 10000.0;
  a.norm_eps = 1e-5;
  a.head_size = family_info(f).default_head_dim;  // qwen3: 128, wider than hidden / heads
  if (family_info(f).keys.partial_rotary != nullptr) a.partial_rotary_factor = 0.5;  // not gpt_neox's 0.25
  if (family_info(f).keys.experts != nullptr) {
    a.experts = 4;
    a.experts_per_token = 2;
  }
  return a;
}

// The architecture config.json's members `body` describe; problems go to
// `errors`.
ModelArch read(const std::string& body, std::vector<std::string>& errors) {
  ModelArch a;
  arch_from_hf_config("{" + body + "}", "/m/config.json", a, errors);
  return a;
}

TEST(ModelFamilyTest, EveryFamilysConfigJsonReadsBackAsTheSameArchitecture) {
  for (const ModelFamilyInfo& f : model_families()) {
    const ModelArch a = small(f.id);
    ModelArch back;
    std::vector<std::string> errors;
    ASSERT_TRUE(arch_from_hf_config(hf_config_json(a, "bfloat16"), "config.json", back, errors)) << f.name;
    EXPECT_EQ(back.family, a.family) << f.name;
    EXPECT_EQ(back.layers, a.layers) << f.name;
    EXPECT_EQ(back.hidden, a.hidden) << f.name;
    EXPECT_EQ(back.intermediate, a.intermediate) << f.name;
    EXPECT_EQ(back.heads, a.heads) << f.name;
    EXPECT_EQ(back.kv_heads, a.kv_heads) << f.name;
    EXPECT_EQ(back.vocab, a.vocab) << f.name;
    EXPECT_EQ(back.max_seq_len, a.max_seq_len) << f.name;
    EXPECT_EQ(back.tie_embeddings, a.tie_embeddings) << f.name;
    EXPECT_DOUBLE_EQ(back.rope_theta, a.rope_theta) << f.name;
    EXPECT_DOUBLE_EQ(back.norm_eps, a.norm_eps) << f.name;
    EXPECT_EQ(back.head_dim(), a.head_dim()) << f.name;
    EXPECT_EQ(back.rotary_dims(), a.rotary_dims()) << f.name;
    EXPECT_EQ(back.experts, a.experts) << f.name;
    EXPECT_EQ(back.experts_per_token, a.experts_per_token) << f.name;
    EXPECT_DOUBLE_EQ(back.attention_scale(), a.attention_scale()) << f.name;
    EXPECT_DOUBLE_EQ(back.attn_logit_softcap, a.attn_logit_softcap) << f.name;
    EXPECT_DOUBLE_EQ(back.final_logit_softcap, a.final_logit_softcap) << f.name;
    EXPECT_EQ(back.parameter_count(), a.parameter_count()) << f.name;
  }
}

TEST(ModelFamilyTest, UnknownTypesAndWrongValuesAreErrorsNamingTheFileAndKey) {
  ModelArch a;
  std::vector<std::string> errors;
  EXPECT_FALSE(arch_from_hf_config(R"({"model_type": "bert"})", "/m/config.json", a, errors));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("model_type \"bert\" is not supported; expected llama, gpt2, mistral, qwen2, qwen3, "
                           "mixtral, phi3, gemma2, gemma3_text or gpt_neox"),
            std::string::npos)
      << errors[0];
  errors.clear();
  EXPECT_FALSE(arch_from_hf_config(R"({"model_type": "llama", "hidden_size": "big"})", "/m/config.json", a, errors));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("hidden_size is not an integer"), std::string::npos) << errors[0];
  errors.clear();
  EXPECT_FALSE(arch_from_hf_config("[1]", "/m/config.json", a, errors));
}

// What a config.json says that changes the computation is read (RoPE's
// theta in transformers 5's rope_parameters) or refused by name, never
// trained past.
TEST(ModelFamilyTest, WhatChangesTheComputationIsReadOrRefusedByName) {
  const std::string llama =
      R"("model_type": "llama", "num_hidden_layers": 2, "hidden_size": 4096, "num_attention_heads": 32, "vocab_size": 300)";
  std::vector<std::string> errors;
  ModelArch a = read(llama + R"(, "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"})", errors);
  EXPECT_TRUE(errors.empty());
  EXPECT_DOUBLE_EQ(a.rope_theta, 500000.0);
  a = read(llama + R"(, "rope_theta": 10000.0, "rope_parameters": {"rope_theta": 500000.0})", errors);
  EXPECT_DOUBLE_EQ(a.rope_theta, 10000.0);  // the top-level key wins where both are written
  a = read(llama + R"(, "head_dim": 96)", errors);
  EXPECT_TRUE(errors.empty());
  EXPECT_EQ(a.head_dim(), 96);  // not hidden / heads (128): q and o are 32 x 96 wide
  a = read(R"("model_type": "qwen3", "num_hidden_layers": 2, "hidden_size": 1024, "num_attention_heads": 16,
              "vocab_size": 300, "intermediate_size": 3072)",
           errors);
  EXPECT_TRUE(errors.empty());
  EXPECT_EQ(a.head_dim(), 128);  // Qwen3Config's default, not 1024 / 16
  a = read(R"("model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
              "vocab_size": 300, "intermediate_size": 112)",
           errors);
  EXPECT_TRUE(errors.empty());
  EXPECT_EQ(a.experts, 8);  // MixtralConfig's defaults
  EXPECT_EQ(a.experts_per_token, 2);

  const std::map<std::string, std::string> refused = {
      {R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0})", "rope_scaling {\"factor\":8.0,\"rope_type\":\"llama3\"}"},
      {R"("rope_scaling": {"rope_type": "linear", "factor": 0.5})", "rope_scaling {\"factor\":0.5,\"rope_type\":\"linear\"}"},
      {R"("rope_scaling": {"rope_type": "dynamic", "factor": 2.0})", "rope_scaling.rope_type \"dynamic\""},
      {R"("rope_parameters": {"rope_theta": 1e6, "rope_type": "yarn"})", "rope_parameters.rope_type \"yarn\""},
      {R"("partial_rotary_factor": 0.5)", "partial_rotary_factor 0.5"},
      {R"("head_dim": 95)", "head_dim 95"},
      {R"("attention_bias": true)", "attention_bias true"},
      {R"("mlp_bias": true)", "mlp_bias true"},
      {R"("hidden_act": "gelu")", "hidden_act \"gelu\""},
      {R"("attention_dropout": 0.1)", "attention_dropout 0.1"},
      {R"("sliding_window": 4096, "max_position_embeddings": 32768)", "sliding_window 4096"},
  };
  for (const auto& [extra, named] : refused) {
    errors.clear();
    read(llama + ", " + extra, errors);
    ASSERT_EQ(errors.size(), 1u) << extra;
    EXPECT_NE(errors[0].find("/m/config.json"), std::string::npos) << errors[0];
    EXPECT_NE(errors[0].find(named + " is not supported"), std::string::npos) << errors[0];
  }
  const std::string mixtral =
      R"("model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 300, "intermediate_size": 112)";
  const std::map<std::string, std::string> mixtral_refused = {
      {R"("output_router_logits": true)", "output_router_logits true is not supported"},
      {R"("router_jitter_noise": 0.01)", "router_jitter_noise 0.01 is not supported"},
      {R"("num_local_experts": 2, "num_experts_per_tok": 3)", "num_experts_per_tok (3) must be between 1 and num_local_experts (2)"},
  };
  for (const auto& [extra, named] : mixtral_refused) {
    errors.clear();
    read(mixtral + ", " + extra, errors);
    ASSERT_EQ(errors.size(), 1u) << extra;
    EXPECT_NE(errors[0].find(named), std::string::npos) << errors[0];
  }
  // What does not change the computation passes.
  for (const std::string& fine :
       {std::string(R"("sliding_window": null)"), std::string(R"("sliding_window": 4096, "use_sliding_window": false)"),
        std::string(R"("sliding_window": 4096, "max_position_embeddings": 4096)"), std::string(R"("head_dim": 128)"),
        std::string(R"("attention_bias": false, "hidden_act": "silu", "rope_scaling": null)")}) {
    errors.clear();
    read(llama + ", " + fine, errors);
    EXPECT_TRUE(errors.empty()) << fine << ": " << errors.front();
  }
  errors.clear();
  read(R"("model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "activation_function": "gelu")", errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("activation_function \"gelu\" is not supported"), std::string::npos) << errors[0];
}

// GPT-NeoX's rotary fraction is read from where transformers 5 reads it
// (rope_parameters, then Hub configs' rotary_pct, else 0.25), its heads are
// hidden / heads wide, and the sequential residual, dropout, another
// activation and linears without biases are refused by name.
TEST(ModelFamilyTest, GptNeoxRotaryFractionIsReadAndItsVariantsRefusedByName) {
  // pythia-160m's config.json (transformers 4.24).
  const std::string pythia =
      R"("model_type": "gpt_neox", "num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12,
         "intermediate_size": 3072, "vocab_size": 50304, "max_position_embeddings": 2048, "layer_norm_eps": 1e-05,
         "hidden_act": "gelu", "use_parallel_residual": true, "tie_word_embeddings": false)";
  std::vector<std::string> errors;
  ModelArch a = read(pythia + R"(, "rotary_pct": 0.25, "rotary_emb_base": 10000)", errors);
  ASSERT_TRUE(errors.empty()) << errors.front();
  EXPECT_EQ(a.family, ModelFamily::kGptNeox);
  EXPECT_EQ(a.rotary_dims(), 16);  // a quarter of 64
  EXPECT_EQ(a.parameter_count(), 162'322'944);
  a = read(pythia, errors);
  EXPECT_EQ(a.rotary_dims(), 16);  // GPTNeoXConfig's default
  a = read(pythia + R"(, "rotary_pct": 1.0, "rope_parameters": {"rope_theta": 500.0, "partial_rotary_factor": 0.5})",
           errors);
  ASSERT_TRUE(errors.empty()) << errors.front();
  EXPECT_EQ(a.rotary_dims(), 32);  // rope_parameters wins, as transformers 5 reads it
  EXPECT_DOUBLE_EQ(a.rope_theta, 500.0);
  EXPECT_NE(hf_config_json(a, "float32").find(R"("rotary_pct": 0.5)"), std::string::npos);

  const std::map<std::string, std::string> refused = {
      {R"("use_parallel_residual": false)", "use_parallel_residual false"},
      {R"("hidden_dropout": 0.1)", "hidden_dropout 0.1"},
      {R"("attention_bias": false)", "attention_bias false"},
      {R"("hidden_act": "gelu_new")", "hidden_act \"gelu_new\""},
      {R"("head_dim": 32)", "head_dim 32"},
      {R"("rotary_pct": 0)", "rotary_pct 0"},
  };
  for (const auto& [extra, named] : refused) {
    errors.clear();
    std::string body = pythia + ", " + extra;
    if (extra.find("hidden_act") != std::string::npos)
      body = std::regex_replace(pythia, std::regex(R"("hidden_act": "gelu", )"), "") + ", " + extra;
    if (extra.find("use_parallel") != std::string::npos)
      body = std::regex_replace(pythia, std::regex(R"(, "use_parallel_residual": true)"), "") + ", " + extra;
    read(body, errors);
    ASSERT_EQ(errors.size(), 1u) << extra;
    EXPECT_NE(errors[0].find(named + " is not supported"), std::string::npos) << errors[0];
  }
  // Another family's rotary fraction is refused as before.
  errors.clear();
  read(R"("model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 300,
          "rope_parameters": {"rope_theta": 1e4, "partial_rotary_factor": 0.5})",
       errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("partial_rotary_factor 0.5 is not supported"), std::string::npos) << errors[0];
}

// Mistral's, Mixtral's and Qwen's sliding windows are read and written
// back; Qwen's window over only the upper layers is refused by name.
TEST(ModelFamilyTest, SlidingWindowsAreReadWhereTheFamilyHasOne) {
  const std::string dims =
      R"("num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 300, "intermediate_size": 112)";
  std::vector<std::string> errors;
  ModelArch a = read(R"("model_type": "mistral", "sliding_window": 4096, "max_position_embeddings": 32768, )" + dims,
                     errors);
  EXPECT_TRUE(errors.empty());
  EXPECT_EQ(a.sliding_window, 4096);
  a = read(R"("model_type": "mistral", "sliding_window": 4096, "max_position_embeddings": 4096, )" + dims, errors);
  EXPECT_EQ(a.sliding_window, 0);  // as wide as the context: no window
  a = read(R"("model_type": "qwen2", "use_sliding_window": false, "sliding_window": 4096, )" + dims, errors);
  EXPECT_EQ(a.sliding_window, 0);
  a = read(R"("model_type": "qwen2", "use_sliding_window": true, "sliding_window": 16, "max_window_layers": 0, )" + dims,
           errors);
  EXPECT_TRUE(errors.empty());
  EXPECT_EQ(a.sliding_window, 16);

  a = read(R"("model_type": "qwen2", "use_sliding_window": true, "sliding_window": 16, "max_window_layers": 1, )" + dims,
           errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("max_window_layers 1 is not supported"), std::string::npos) << errors[0];
  errors.clear();
  read(R"("model_type": "mistral", "sliding_window": 0, )" + dims, errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("sliding_window 0 is not supported"), std::string::npos) << errors[0];
  errors.clear();

  for (const ModelFamilyInfo& f : model_families()) {
    if (!has_sliding_window(f)) continue;
    ModelArch windowed = small(f.id);
    windowed.sliding_window = 128;
    ModelArch back;
    ASSERT_TRUE(arch_from_hf_config(hf_config_json(windowed, "bfloat16"), "config.json", back, errors)) << f.name;
    EXPECT_EQ(back.sliding_window, 128) << f.name;
  }
  EXPECT_FALSE(has_sliding_window(family_info(ModelFamily::kLlama)));
  EXPECT_FALSE(has_sliding_window(family_info(ModelFamily::kGpt2)));
}

// Gemma 2: what Gemma2Config assumes for absent keys is what Tailor reads
// (null caps are no caps); its caps, score scale and alternating window are
// written back; attention kinds other than its own pattern are refused.
TEST(ModelFamilyTest, Gemma2CapsScalesAndWindowsAreReadAndWrittenBack) {
  const std::string gemma =
      R"("model_type": "gemma2", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 300, "intermediate_size": 112)";
  std::vector<std::string> errors;
  ModelArch a = read(gemma, errors);
  EXPECT_TRUE(errors.empty()) << errors.front();
  EXPECT_DOUBLE_EQ(a.attn_logit_softcap, 50.0);
  EXPECT_DOUBLE_EQ(a.final_logit_softcap, 30.0);
  EXPECT_EQ(a.query_pre_attn_scalar, 256);
  EXPECT_EQ(a.head_dim(), 256);
  EXPECT_EQ(a.max_seq_len, 8192);
  EXPECT_EQ(a.sliding_window, 4096);
  EXPECT_TRUE(a.tie_embeddings);
  EXPECT_EQ(layer_window(a, 0), 4096);
  EXPECT_EQ(layer_window(a, 1), 0);
  EXPECT_DOUBLE_EQ(a.attention_scale(), 1.0 / 16.0);

  a = read(gemma + R"(, "attn_logit_softcapping": null, "final_logit_softcapping": null, "query_pre_attn_scalar": 144,
                      "layer_types": ["full_attention", "full_attention"], "hidden_act": "gelu_pytorch_tanh")",
           errors);
  EXPECT_TRUE(errors.empty()) << errors.front();
  EXPECT_EQ(a.attn_logit_softcap, 0.0);
  EXPECT_EQ(a.final_logit_softcap, 0.0);
  EXPECT_EQ(a.sliding_window, 0);
  EXPECT_DOUBLE_EQ(a.attention_scale(), 1.0 / 12.0);

  const std::map<std::string, std::string> refused = {
      {R"("layer_types": ["full_attention", "sliding_attention"])", "layer_types"},
      {R"("layer_types": ["sliding_attention"])", "layer_types"},
      {R"("use_bidirectional_attention": true)", "use_bidirectional_attention true"},
      {R"("hidden_activation": "gelu")", "hidden_activation \"gelu\""},
      {R"("attn_logit_softcapping": -1)", "attn_logit_softcapping -1"},
      {R"("query_pre_attn_scalar": 0.5)", "query_pre_attn_scalar 0.5"},
  };
  for (const auto& [extra, named] : refused) {
    errors.clear();
    read(gemma + ", " + extra, errors);
    ASSERT_EQ(errors.size(), 1u) << extra;
    EXPECT_NE(errors[0].find(named), std::string::npos) << errors[0];
    EXPECT_NE(errors[0].find("is not supported"), std::string::npos) << errors[0];
  }

  ModelArch g = small(ModelFamily::kGemma2);
  g.attn_logit_softcap = 50;
  g.final_logit_softcap = 30;
  g.query_pre_attn_scalar = 144;
  g.sliding_window = 128;
  const std::string json = hf_config_json(g, "bfloat16");
  EXPECT_NE(json.find(R"("layer_types": [
    "sliding_attention",
    "full_attention",
    "sliding_attention"
  ])"),
            std::string::npos)
      << json;
  ModelArch back;
  errors.clear();
  ASSERT_TRUE(arch_from_hf_config(json, "config.json", back, errors)) << errors.front();
  EXPECT_DOUBLE_EQ(back.attn_logit_softcap, 50);
  EXPECT_DOUBLE_EQ(back.final_logit_softcap, 30);
  EXPECT_EQ(back.query_pre_attn_scalar, 144);
  EXPECT_EQ(back.sliding_window, 128);
}

// Gemma 3 (text): Gemma3TextConfig's defaults where keys are absent; its
// per-kind RoPE as transformers 5 writes it (rope_parameters by attention
// kind) and as Hub configs do (rope_theta, rope_local_base_freq,
// rope_scaling for the global layers); windows on five layers in six.
TEST(ModelFamilyTest, Gemma3RopePerLayerKindAndWindowsAreReadAndWrittenBack) {
  const std::string gemma =
      R"("model_type": "gemma3_text", "num_hidden_layers": 12, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 300, "intermediate_size": 112)";
  std::vector<std::string> errors;
  ModelArch a = read(gemma, errors);
  EXPECT_TRUE(errors.empty()) << errors.front();
  EXPECT_EQ(a.attn_logit_softcap, 0.0);
  EXPECT_EQ(a.final_logit_softcap, 0.0);
  EXPECT_DOUBLE_EQ(a.rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(a.rope_local_theta, 1e4);
  EXPECT_EQ(a.sliding_window, 4096);
  EXPECT_EQ(a.max_seq_len, 131072);
  for (std::int64_t i = 0; i < 12; ++i) EXPECT_EQ(layer_window(a, i) == 0, i == 5 || i == 11) << i;

  a = read(gemma + R"(, "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                                            "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}},
                      "_sliding_window_pattern": 6, "sliding_window": 512, "max_position_embeddings": 256)",
           errors);
  EXPECT_TRUE(errors.empty()) << errors.front();
  EXPECT_EQ(a.rope_scaling.type, RopeScalingType::kLinear);
  EXPECT_DOUBLE_EQ(a.rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(a.rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(a.rope_local_theta, 100.0);
  EXPECT_EQ(a.sliding_window, 512);  // wider than the context, yet the windowed layers stay local

  a = read(gemma + R"(, "rope_theta": 5e5, "rope_local_base_freq": 2e4, "rope_scaling": {"rope_type": "linear", "factor": 4.0},
                      "sliding_window": null)",
           errors);
  EXPECT_TRUE(errors.empty()) << errors.front();
  EXPECT_DOUBLE_EQ(a.rope_theta, 5e5);
  EXPECT_DOUBLE_EQ(a.rope_local_theta, 2e4);
  EXPECT_DOUBLE_EQ(a.rope_scaling.factor, 4.0);
  EXPECT_EQ(a.sliding_window, a.max_seq_len);  // null: the windowed layers see everything

  const std::map<std::string, std::string> refused = {
      {R"("rope_parameters": {"sliding_attention": {"rope_type": "linear", "factor": 2.0}})",
       "rope_parameters.sliding_attention.rope_type \"linear\""},
      {R"("sliding_window_pattern": 2)", "sliding_window_pattern 2"},
      {R"("layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention"])",
       "\"sliding_attention\",\"full_attention\"]"},
      {R"("use_bidirectional_attention": true)", "use_bidirectional_attention true"},
  };
  for (const auto& [extra, named] : refused) {
    errors.clear();
    read(gemma + ", " + extra, errors);
    ASSERT_EQ(errors.size(), 1u) << extra;
    EXPECT_NE(errors[0].find(named + " is not supported"), std::string::npos) << errors[0];
  }

  ModelArch g = small(ModelFamily::kGemma3);
  g.layers = 6;
  g.sliding_window = 64;
  g.rope_local_theta = 123.0;
  g.rope_scaling = {.type = RopeScalingType::kLinear, .factor = 8.0};
  ModelArch back;
  errors.clear();
  ASSERT_TRUE(arch_from_hf_config(hf_config_json(g, "bfloat16"), "config.json", back, errors)) << errors.front();
  EXPECT_DOUBLE_EQ(back.rope_local_theta, 123.0);
  EXPECT_DOUBLE_EQ(back.rope_theta, g.rope_theta);
  EXPECT_EQ(back.rope_scaling.type, RopeScalingType::kLinear);
  EXPECT_EQ(back.sliding_window, 64);
}

// Every linear of a block is a slice of one fused projection, the slices of
// a projection tile it without overlap, and the LoRA targets are their names.
TEST(ModelFamilyTest, LinearsTileTheFusedProjectionsAndNameTheTargets) {
  for (const ModelFamilyInfo& f : model_families()) {
    const ModelArch a = small(f.id);
    std::map<Projection, std::int64_t> next_row;
    std::set<std::string> targets;
    std::int64_t weights = 0;
    for (const LinearLayer& l : block_linears(a)) {
      EXPECT_EQ(l.row_offset, next_row[l.projection]) << f.name << " " << l.module;
      next_row[l.projection] += l.rows;
      targets.insert(l.target);
      weights += l.rows * l.in;
    }
    const std::vector<std::string> names = lora_target_names(f.id);
    EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), targets) << f.name;
    EXPECT_EQ(names.size(), targets.size()) << f.name;
    // The parameter count holds every linear weight of every block.
    EXPECT_GT(a.parameter_count(), a.layers * weights) << f.name;
  }
  EXPECT_EQ(lora_target_names(ModelFamily::kGpt2), (std::vector<std::string>{"c_attn", "c_proj", "c_fc"}));
  EXPECT_EQ(lora_target_names(ModelFamily::kLlama),
            (std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}));
  // A mixture's experts and router are not targets: attention only.
  EXPECT_EQ(lora_target_names(ModelFamily::kMixtral), (std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj"}));
  EXPECT_EQ(lora_target_names(ModelFamily::kGptNeox),
            (std::vector<std::string>{"query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"}));
  // Phi-3's checkpoints hold q/k/v and gate/up as one linear each.
  EXPECT_EQ(lora_target_names(ModelFamily::kPhi3),
            (std::vector<std::string>{"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}));
}

// Llama 3.1's rope_scaling (and transformers 5's rope_parameters) is read,
// with original_max_position_embeddings from the object or the top level,
// and written back as Llama 3.1's config.json has it.
TEST(ModelFamilyTest, RopeScalingIsReadAndWrittenBack) {
  const std::string llama =
      R"("model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 300, "intermediate_size": 112, "max_position_embeddings": 131072)";
  auto read = [&](const std::string& extra) {
    ModelArch a;
    std::vector<std::string> errors;
    EXPECT_TRUE(arch_from_hf_config("{" + llama + ", " + extra + "}", "/m/config.json", a, errors))
        << extra << ": " << (errors.empty() ? "" : errors.front());
    return a;
  };
  ModelArch a = read(R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})");
  EXPECT_EQ(a.rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_DOUBLE_EQ(a.rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(a.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(a.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(a.rope_scaling.original_max_seq_len, 8192);

  ModelArch back;
  std::vector<std::string> errors;
  ASSERT_TRUE(arch_from_hf_config(hf_config_json(a, "bfloat16"), "config.json", back, errors));
  EXPECT_EQ(back.rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_DOUBLE_EQ(back.rope_scaling.factor, 8.0);
  EXPECT_EQ(back.rope_scaling.original_max_seq_len, 8192);

  a = read(R"("original_max_position_embeddings": 4096,
              "rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 32.0})");
  EXPECT_DOUBLE_EQ(a.rope_theta, 500000.0);
  EXPECT_DOUBLE_EQ(a.rope_scaling.factor, 32.0);
  EXPECT_EQ(a.rope_scaling.original_max_seq_len, 4096);

  a = read(R"("rope_scaling": {"type": "linear", "factor": 2.0})");
  EXPECT_EQ(a.rope_scaling.type, RopeScalingType::kLinear);
  EXPECT_DOUBLE_EQ(a.rope_scaling.factor, 2.0);
  ASSERT_TRUE(arch_from_hf_config(hf_config_json(a, "float32"), "config.json", back, errors));
  EXPECT_EQ(back.rope_scaling.type, RopeScalingType::kLinear);
  EXPECT_NE(hf_config_json(a, "float32").find(R"("rope_type": "linear")"), std::string::npos);
}

}  // namespace
}  // namespace tailor::dsl
