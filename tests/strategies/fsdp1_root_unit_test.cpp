// RuntimeQuirks::root_unit_gathered against torch's FSDP1 (in .venv):
// fsdp1_root_unit_reference.py wraps a small transformers Llama on two gloo
// ranks as accelerate does (a unit per decoder layer; under LoRA, PEFT's
// policy) and records what each unit holds gathered at the end of forward.
// The root, and only the root, is whole there, freed by the end of
// backward, and its bytes are the model's term: the embedding, the final
// norm and an untied head. And RuntimeQuirks::held_checkpoints: reentrant
// checkpointing around the FSDP units (transformers 4.x's placement) keeps
// every recomputed layer input and its gradient to the end of backward.
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

// The script's record, made once for both tests (about 10 s).
const nlohmann::json& reference() {
  static const nlohmann::json m = [] {
    testing::TempDir dir;
    const std::string out = dir.file("units.json");
    if (!testing::run_python_script(std::string(TAILOR_SOURCE_DIR) + "/tests/strategies/fsdp1_root_unit_reference.py",
                                    "--out " + out, dir.file("python.log"))) {
      ADD_FAILURE() << "fsdp1_root_unit_reference.py failed: " << testing::read_text(dir.file("python.log"));
      return nlohmann::json::object();
    }
    return nlohmann::json::parse(testing::read_text(out));
  }();
  return m;
}

TEST(Fsdp1RootUnitTest, OnlyTheRootStaysGatheredThroughForwardAndItHoldsTheModelsBytes) {
  const nlohmann::json& m = reference();
  ASSERT_TRUE(m.contains("cases"));
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

// Checkpointed around each unit, reentrant, every layer's recomputed input
// and its gradient are alive when backward reaches the embedding: 2 x the
// layers x b*s*h*2 bytes in bf16, the model's held term. Not reentrant, or
// checkpointed inside the unit as the venv's transformers does, none are.
TEST(Fsdp1RootUnitTest, ReentrantCheckpointsAroundFrozenUnitsHoldEveryInputAndItsGradient) {
  const nlohmann::json& m = reference();
  ASSERT_TRUE(m.contains("cases"));
  const std::int64_t layers = m["layers"],
                     input = m["tokens"].get<std::int64_t>() * m["hidden"].get<std::int64_t>() * 2;
  const nlohmann::json& held = m["cases"]["around_units_reentrant"];
  std::printf(
      "torch %s FSDP1, LoRA, reentrant checkpoints around the units: %d of %d inputs alive at the "
      "embedding, %d with gradients, %lld B (2 x layers x tokens x hidden x 2 B: %lld)\n",
      m["torch"].get<std::string>().c_str(), held["alive"].get<int>(), held["recomputed"].get<int>(),
      held["with_grad"].get<int>(), held["bytes"].get<long long>(), static_cast<long long>(2 * layers * input));
  EXPECT_EQ(held["recomputed"], layers);
  EXPECT_EQ(held["alive"], layers);
  EXPECT_EQ(held["with_grad"], layers);
  EXPECT_EQ(held["bytes"], 2 * layers * input);
  EXPECT_EQ(m["cases"]["around_units_non_reentrant"]["alive"], 0);
  EXPECT_EQ(m["cases"]["transformers"]["recomputed"], layers) << "transformers recomputes each layer";
  EXPECT_EQ(m["cases"]["transformers"]["alive"], 0);
  // The hf profile models the venv's transformers: nothing held.
  EXPECT_FALSE(runtime_profile(dsl::Runtime::kHf).quirks.held_checkpoints);
}

}  // namespace
}  // namespace tailor::strategies
