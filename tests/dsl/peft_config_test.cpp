#include "dsl/peft_config.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "tests/testing/temp_dir.h"

namespace tailor::dsl {
namespace {

using tailor::testing::TempDir;

// An adapter folder whose adapter_config.json is `json`.
std::string adapter(const TempDir& dir, const std::string& name, const std::string& json) {
  dir.write(name + "/adapter_config.json", json);
  return dir.file(name);
}

TEST(PeftConfigTest, ACausalAndASequenceClassifiersAdapterAreRead) {
  TempDir dir;
  auto causal = read_peft_config_file(adapter(dir, "causal", R"({"peft_type": "LORA", "task_type": "CAUSAL_LM",
      "r": 8, "lora_alpha": 16, "target_modules": ["v_proj", "q_proj"], "base_model_name_or_path": "/m/base",
      "modules_to_save": null, "bias": "none", "use_rslora": false})"));
  ASSERT_TRUE(causal.is_ok()) << causal.status().to_string();
  EXPECT_EQ(causal->rank, 8);
  EXPECT_EQ(causal->alpha, 16);
  EXPECT_EQ(causal->targets, (std::vector<std::string>{"q_proj", "v_proj"}));  // sorted
  EXPECT_EQ(causal->base_model, "/m/base");
  EXPECT_FALSE(causal->sequence_classifier);
  EXPECT_TRUE(causal->modules_to_save.empty());
  // A causal language model's embedding and head trained whole: read
  // sorted, once each (checked against the family where they are used).
  auto whole = read_peft_config_file(adapter(dir, "whole", R"({"peft_type": "LORA", "task_type": "CAUSAL_LM",
      "r": 8, "lora_alpha": 16, "modules_to_save": ["lm_head", "embed_tokens", "lm_head"]})"));
  ASSERT_TRUE(whole.is_ok()) << whole.status().to_string();
  EXPECT_EQ(whole->modules_to_save, (std::vector<std::string>{"embed_tokens", "lm_head"}));
  // As PEFT writes a SEQ_CLS adapter: the score (and "classifier") saved whole.
  auto classifier = read_peft_config_file(adapter(dir, "seq", R"({"peft_type": "LORA", "task_type": "SEQ_CLS",
      "r": 4, "lora_alpha": 8, "target_modules": "all-linear", "modules_to_save": ["score", "classifier", "score"]})"));
  ASSERT_TRUE(classifier.is_ok()) << classifier.status().to_string();
  EXPECT_TRUE(classifier->sequence_classifier);
  EXPECT_TRUE(classifier->targets.empty());
}

TEST(PeftConfigTest, WhatTailorsAdaptersDoNotComputeIsRefusedNamingTheFileAndKey) {
  TempDir dir;
  const std::string ok = R"("r": 8, "lora_alpha": 16)";
  const std::map<std::string, std::string> refused = {
      {R"({"peft_type": "IA3", )" + ok + "}", "peft_type: \"IA3\" is not built"},
      {R"({"use_dora": true, )" + ok + "}", "use_dora: true is not built"},
      {R"({"bias": "all", )" + ok + "}", "bias: \"all\" is not built"},
      {R"({"modules_to_save": "lm_head", )" + ok + "}", "modules_to_save: expected a list of module names"},
      {R"({"task_type": "SEQ_CLS", "modules_to_save": ["lm_head"], )" + ok + "}", "modules_to_save"},
      {R"({"rank_pattern": {"q_proj": 4}, )" + ok + "}", "rank_pattern: per-module ranks"},
      {R"({"target_modules": ".*proj", )" + ok + "}", "target_modules: a regular expression is not built"},
      {R"({"r": 0, "lora_alpha": 16})", "r: expected a positive integer"},
      {R"({"r": 8})", "lora_alpha: expected a number"},
      {"[1, 2]", "not a JSON object"},
  };
  int n = 0;
  for (const auto& [json, named] : refused) {
    const std::string folder = adapter(dir, "a" + std::to_string(n++), json);
    const auto got = read_peft_config_file(folder);
    ASSERT_FALSE(got.is_ok()) << json;
    EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument) << json;
    EXPECT_NE(got.status().message().find(folder + "/adapter_config.json"), std::string::npos)
        << got.status().message();
    EXPECT_NE(got.status().message().find(named), std::string::npos) << got.status().message();
  }
  const auto missing = read_peft_config_file(dir.file("none"));
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("not a PEFT adapter folder"), std::string::npos);
}

}  // namespace
}  // namespace tailor::dsl
