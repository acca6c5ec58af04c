// RuntimeQuirks::root_unit_gathered against torch's FSDP1 (in .venv):
// fsdp1_root_unit_reference.py wraps a small transformers Llama on two gloo
// ranks as accelerate does (a unit per decoder layer; under LoRA, PEFT's
// policy) and records what each unit holds gathered at the end of forward.
// The root, and only the root, is whole there, freed by the end of
// backward, and its bytes are the model's term: the embedding, the final
// norm and an untied head.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "dsl/catalog.h"
#include "strategies/memory_model.h"
#include "strategies/runtime_profile.h"
#include "tests/testing/python_scripts.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/text_file.h"

namespace tailor::strategies {
namespace {

// The memory model's root term for the script's model (bf16, two ranks).
double model_root_bytes(const nlohmann::json& m, bool tied, bool lora) {
  dsl::ModelArch a = dsl::Catalog::builtin().find_model("llama-2-7b")->arch;
  a.hidden = m["hidden"].get<std::int64_t>();
  a.intermediate = m["intermediate"].get<std::int64_t>();
  a.layers = m["layers"].get<std::int64_t>();
  a.heads = a.kv_heads = m["heads"].get<std::int64_t>();
  a.vocab = m["vocab"].get<std::int64_t>();
  a.tie_embeddings = tied;
  MemoryInput in;
  in.arch = &a;
  in.batch = {1, 16};
  apply(runtime_profile(dsl::Runtime::kHf), in);
  in.strategy.precision = Precision::kPureBf16;
  in.strategy.zero_stage = 3;
  in.strategy.num_gpus = m["world"].get<std::int64_t>();
  if (lora) {
    in.strategy.adapter = Adapter::kLora;
    in.strategy.lora_rank = 4;
    in.lora_targets = {"q_proj", "v_proj"};
  }
  EXPECT_TRUE(in.quirks.root_unit_gathered) << "the hf profile's ZeRO-3 is FSDP1";
  const Bytes with = estimate_memory(in).per_device.overhead;
  in.quirks.root_unit_gathered = false;
  return static_cast<double>((with - estimate_memory(in).per_device.overhead).count());
}

TEST(Fsdp1RootUnitTest, OnlyTheRootStaysGatheredThroughForwardAndItHoldsTheModelsBytes) {
  testing::TempDir dir;
  const std::string out = dir.file("units.json");
  ASSERT_TRUE(
      testing::run_python_script(std::string(TAILOR_SOURCE_DIR) + "/tests/strategies/fsdp1_root_unit_reference.py",
                                 "--out " + out, dir.file("python.log")));
  const nlohmann::json m = nlohmann::json::parse(testing::read_text(out));
  for (const std::string c : {"untied", "tied", "lora"}) {
    SCOPED_TRACE(c);
    const nlohmann::json& units = m["cases"][c];
    double root = -1, others = 0, after_backward = 0;
    for (const nlohmann::json& u : units["end_of_forward"]) {
      if (u["is_root"].get<bool>())
        root = u["bytes"].get<double>();
      else
        others += u["bytes"].get<double>();
    }
    for (const nlohmann::json& u : units["after_backward"])
      after_backward += u["bytes"].get<double>();
    const double model = model_root_bytes(m, c == "tied", c == "lora");
    std::printf(
        "torch %s FSDP1, %s: root gathered at the end of forward %.0f B (model %.0f B), other units %.0f B, "
        "after backward %.0f B\n",
        m["torch"].get<std::string>().c_str(), c.c_str(), root, model, others, after_backward);
    EXPECT_EQ(root, model);
    EXPECT_EQ(others, 0) << "blocks and LoRA leaves are resharded after their forward";
    EXPECT_EQ(after_backward, 0) << "the root is resharded by the end of backward";
  }
}

}  // namespace
}  // namespace tailor::strategies
