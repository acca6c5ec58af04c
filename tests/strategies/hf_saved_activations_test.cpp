// The hf runtime profile's activation terms against what transformers and
// PEFT (in .venv) keep for backward: saved_activations_reference.py runs
// the blocks of a small Llama under torch's saved-tensor hooks and bf16
// autocast (as the Trainer runs a bf16 model with bf16=True) and counts
// the bytes a layer keeps per token; the memory model, given the same
// block, must count the same: Llama's block and Qwen3's (RMSNorm on each
// head of q and k).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "dsl/catalog.h"
#include "strategies/memory_model.h"
#include "strategies/runtime_profile.h"
#include "tests/strategies/layer_bytes.h"
#include "tests/testing/python_scripts.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/text_file.h"

namespace tailor::strategies {
namespace {

struct Block {
  const char* lora;  // "qv", "all" (every linear) or "none" (a full fine-tune)
  std::int64_t kv_heads;
  const char* family = "llama";  // or "qwen3" (q_norm and k_norm)
};

// The script's block: hidden 256, 8 heads, MLP 688, LoRA r8, no dropout.
double model_bytes_per_token_per_hidden(const Block& block) {
  const bool qwen3 = std::string(block.family) == "qwen3";
  dsl::ModelArch a = dsl::Catalog::builtin().find_model(qwen3 ? "qwen3-0.6b" : "llama-2-7b")->arch;
  a.hidden = 256, a.intermediate = 688, a.heads = 8, a.kv_heads = block.kv_heads, a.vocab = 1024;
  a.head_size = qwen3 ? 32 : 0;
  MemoryInput in;
  apply(runtime_profile(dsl::Runtime::kHf), in);
  in.strategy.precision = Precision::kBf16;
  in.strategy.attention = Attention::kMemoryEfficient;
  if (std::string(block.lora) != "none") {
    in.strategy.adapter = Adapter::kLora;
    in.strategy.lora_rank = 8;
    if (std::string(block.lora) == "qv") in.lora_targets = {"q_proj", "v_proj"};
  }
  return layer_bytes_per_token_per_hidden(a, in);
}

class HfSavedActivationsTest : public ::testing::TestWithParam<Block> {};

TEST_P(HfSavedActivationsTest, TheHfProfileKeepsWhatTransformersAndPeftSave) {
  const Block block = GetParam();
  testing::TempDir dir;
  const std::string out = dir.file("saved.json");
  ASSERT_TRUE(
      testing::run_python_script(std::string(TAILOR_SOURCE_DIR) + "/tests/strategies/saved_activations_reference.py",
                                 "--autocast --family " + std::string(block.family) + " --lora " + block.lora +
                                     " --kv-heads " + std::to_string(block.kv_heads) + " --out " + out,
                                 dir.file("python.log")));
  const nlohmann::json measured = nlohmann::json::parse(testing::read_text(out));
  const double model = model_bytes_per_token_per_hidden(block);
  std::printf("%s, %s, LoRA %s, %lld K/V heads: measured %.3f, model %.3f B per token per hidden unit a layer\n",
              measured["stack"].get<std::string>().c_str(), block.family, block.lora,
              static_cast<long long>(block.kv_heads), measured["bytes_per_token_per_hidden"].get<double>(), model);
  // Exact but for the per-token statistics the model rounds (fp32 inverse
  // RMS and logsumexp): well under 0.1%.
  EXPECT_NEAR(model, measured["bytes_per_token_per_hidden"].get<double>(), 0.05);
}

INSTANTIATE_TEST_SUITE_P(Blocks, HfSavedActivationsTest,
                         ::testing::Values(Block{"qv", 8}, Block{"qv", 2}, Block{"all", 8}, Block{"none", 8},
                                           Block{"qv", 2, "qwen3"}, Block{"none", 2, "qwen3"}),
                         [](const ::testing::TestParamInfo<Block>& param) {
                           return std::string(param.param.family) + "_" + param.param.lora + "_kv" +
                                  std::to_string(param.param.kv_heads);
                         });

}  // namespace
}  // namespace tailor::strategies
