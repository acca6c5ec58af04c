#include "strategies/plan_document.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>

#include "dsl/spec_loader.h"

namespace tailor::strategies {
namespace {

TEST(PlanDocumentTest, HasTheDocumentedSchema) {
  const auto loaded = dsl::load_job_spec(
      (std::filesystem::path(TAILOR_SOURCE_DIR) / "configs/examples/llama2-7b-qlora-24gb.yaml").string());
  ASSERT_TRUE(loaded.ok());
  Hardware hw;
  hw.gpus = *parse_gpus_flag("1x24GiB", dsl::Catalog::builtin());
  hw.host_memory = Bytes::gib(64);
  hw.cpu = cpu_device(hw.host_memory);
  const Plan plan = plan_job(*loaded.spec, hw);
  const auto j = nlohmann::json::parse(plan_to_json(plan, *loaded.spec));
  EXPECT_EQ(j["schema_version"], kPlanSchemaVersion);
  EXPECT_EQ(j["fits"], plan.fits);
  // Prompt/completion pairs: packed whole, long ones truncated (the default).
  EXPECT_EQ(j["job"]["packing"], "whole-examples");
  EXPECT_EQ(j["job"]["packing_description"], "whole examples, first-fit decreasing");
  EXPECT_EQ(j["job"]["on_long_example"], "truncate");
  for (const char* k : {"precision", "gradient_checkpointing", "micro_batch_size", "gradient_accumulation_steps",
                        "adapter", "lora_rank", "quantization", "optimizer", "zero_stage", "offload", "num_gpus"}) {
    EXPECT_TRUE(j["strategy"].contains(k)) << k;
  }
  std::int64_t sum = 0;
  const std::vector<std::string> components = {"weights",        "gradients", "optimizer_states", "master_weights",
                                               "adapter",        "activations", "logits",         "overhead"};
  for (const std::string& k : components) {
    ASSERT_TRUE(j["memory"]["per_gpu"].contains(k)) << k;
    sum += j["memory"]["per_gpu"][k].get<std::int64_t>();
  }
  // Readers (the web UI) take the components, in order and with their
  // words, from the document.
  std::vector<std::string> listed;
  for (const auto& c : j["memory"]["components"]) {
    listed.push_back(c["key"].get<std::string>());
    EXPECT_FALSE(c["label"].get<std::string>().empty()) << c;
  }
  EXPECT_EQ(listed, components);
  // The measured terms the estimate counts, each with its component and
  // source, as the estimate recorded them.
  ASSERT_TRUE(j["memory"]["corrections"].is_array());
  ASSERT_EQ(j["memory"]["corrections"].size(), plan.chosen.memory.corrections.size());
  for (std::size_t i = 0; i < plan.chosen.memory.corrections.size(); ++i) {
    const auto& c = j["memory"]["corrections"][i];
    const CorrectionTerm& t = plan.chosen.memory.corrections[i];
    EXPECT_EQ(c["key"], correction_info(t.id).key);
    EXPECT_NE(std::find(components.begin(), components.end(), c["component"].get<std::string>()), components.end())
        << c;
    EXPECT_EQ(c["bytes"].get<std::int64_t>(), t.bytes.count()) << c;
    EXPECT_FALSE(c["source"].get<std::string>().empty()) << c;
  }
  EXPECT_EQ(j["memory"]["per_gpu"]["total"].get<std::int64_t>(), sum);
  EXPECT_EQ(j["memory"]["budget_per_gpu"].get<std::int64_t>(), plan.budget_per_device.count());
  EXPECT_TRUE(j["memory"].contains("host_total"));
  EXPECT_GT(j["throughput"]["tokens_per_second"].get<double>(), 0);
  EXPECT_GT(j["throughput"]["step_seconds"].get<double>(), 0);
  ASSERT_GE(j["decisions"].size(), 2u);
  EXPECT_TRUE(j["decisions"][0].contains("question") && j["decisions"][0].contains("answer") &&
              j["decisions"][0].contains("action"));
  EXPECT_FALSE(j["alternatives"].empty());
  EXPECT_TRUE(j["alternatives"][0].contains("why"));
  EXPECT_EQ(j["strategy"]["micro_batch_size"].get<int>() * j["strategy"]["gradient_accumulation_steps"].get<int>(), 32);
  // The embedded resolved spec loads back into the same job.
  const auto again = dsl::load_job_spec_text(j["spec"].dump(), "<plan spec>", "/");
  ASSERT_TRUE(again.ok()) << again.diagnostics.to_string();
  EXPECT_EQ(again.spec->name, loaded.spec->name);
  EXPECT_EQ(again.spec->data.train, loaded.spec->data.train);
  EXPECT_EQ(again.spec->model.arch.parameter_count(), loaded.spec->model.arch.parameter_count());
}

// Activation offloading is in the document only where the plan does it,
// and the embedded spec keeps the pin that asked for it.
TEST(PlanDocumentTest, NamesActivationOffloadWhereThePlanOffloads) {
  dsl::LoadOptions opts;
  const std::string path =
      (std::filesystem::path(TAILOR_SOURCE_DIR) / "configs/examples/llama2-7b-qlora-24gb.yaml").string();
  Hardware hw;
  hw.gpus = *parse_gpus_flag("1x24GiB", dsl::Catalog::builtin());
  hw.host_memory = Bytes::gib(64);
  hw.cpu = cpu_device(hw.host_memory);
  const auto plain = dsl::load_job_spec(path);
  ASSERT_TRUE(plain.ok());
  const auto p = nlohmann::json::parse(plan_to_json(plan_job(*plain.spec, hw), *plain.spec));
  EXPECT_FALSE(p["strategy"].contains("activation_offload"));
  EXPECT_FALSE(p["spec"]["strategy"].contains("activation_offload"));
  opts.overrides = {"strategy.activation_offload=true", "strategy.gradient_checkpointing=true"};
  const auto pinned = dsl::load_job_spec(path, opts);
  ASSERT_TRUE(pinned.ok()) << pinned.diagnostics.to_string();
  const auto q = nlohmann::json::parse(plan_to_json(plan_job(*pinned.spec, hw), *pinned.spec));
  EXPECT_EQ(q["strategy"]["activation_offload"], true);
  EXPECT_EQ(q["spec"]["strategy"]["activation_offload"], true);
  EXPECT_GT(q["memory"]["host_total"].get<std::int64_t>(), 0);
}

}  // namespace
}  // namespace tailor::strategies
