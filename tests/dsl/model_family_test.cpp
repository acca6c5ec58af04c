#include <gtest/gtest.h>

#include <map>
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
  a.kv_heads = family_info(f).key_kv_heads ? 2 : 4;
  a.vocab = 300;
  a.max_seq_len = 512;
  a.tie_embeddings = f == ModelFamily::kGpt2;
  a.rope_theta = family_info(f).key_rope_theta ? 500000.0 : 10000.0;
  a.norm_eps = 1e-5;
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
    EXPECT_EQ(back.parameter_count(), a.parameter_count()) << f.name;
  }
}

TEST(ModelFamilyTest, UnknownTypesAndWrongValuesAreErrorsNamingTheFileAndKey) {
  ModelArch a;
  std::vector<std::string> errors;
  EXPECT_FALSE(arch_from_hf_config(R"({"model_type": "bert"})", "/m/config.json", a, errors));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("model_type \"bert\" is not supported; expected llama, gpt2, mistral or qwen2"),
            std::string::npos)
      << errors[0];
  errors.clear();
  EXPECT_FALSE(arch_from_hf_config(R"({"model_type": "llama", "hidden_size": "big"})", "/m/config.json", a, errors));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("hidden_size is not an integer"), std::string::npos) << errors[0];
  errors.clear();
  EXPECT_FALSE(arch_from_hf_config("[1]", "/m/config.json", a, errors));
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
}

}  // namespace
}  // namespace tailor::dsl
