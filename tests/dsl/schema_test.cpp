#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "dsl/catalog.h"
#include "dsl/spec_fields.h"

namespace tailor::dsl {
namespace {

TEST(SchemaTest, DescribesEverySectionAndRejectsUnknownKeys) {
  const auto schema = nlohmann::json::parse(job_spec_json_schema());
  EXPECT_EQ(schema["$schema"], "https://json-schema.org/draft/2020-12/schema");
  EXPECT_EQ(schema["additionalProperties"], false);
  for (const char* section : {"model", "data", "training", "strategy", "resources", "checkpoint"}) {
    ASSERT_TRUE(schema["properties"].contains(section)) << section;
    EXPECT_EQ(schema["properties"][section]["additionalProperties"], false) << section;
  }
  EXPECT_EQ(schema["required"], nlohmann::json::array({"apiVersion", "kind"}));
}

TEST(SchemaTest, StrategyKnobsAcceptAuto) {
  const auto schema = nlohmann::json::parse(job_spec_json_schema());
  const auto& precision = schema["properties"]["strategy"]["properties"]["precision"];
  ASSERT_TRUE(precision.contains("anyOf"));
  EXPECT_EQ(precision["anyOf"][0]["enum"], nlohmann::json::array({"fp32", "bf16", "fp16", "pure-bf16"}));
  EXPECT_EQ(precision["anyOf"][1]["const"], "auto");
  EXPECT_FALSE(precision["description"].get<std::string>().empty());
}

TEST(SchemaTest, OnLongExampleIsTruncateOrDrop) {
  const auto schema = nlohmann::json::parse(job_spec_json_schema());
  const auto& on_long = schema["properties"]["data"]["properties"]["on_long_example"];
  EXPECT_EQ(on_long["enum"], nlohmann::json::array({"truncate", "drop"}));
  EXPECT_NE(on_long["description"].get<std::string>().find("truncated to no trained token is dropped"),
            std::string::npos);
}

TEST(SchemaTest, EveryPropertyHasADescription) {
  const auto schema = nlohmann::json::parse(job_spec_json_schema());
  std::vector<std::pair<std::string, const nlohmann::json*>> todo = {{"", &schema}};
  int checked = 0;
  while (!todo.empty()) {
    auto [path, node] = todo.back();
    todo.pop_back();
    if (!node->contains("properties")) continue;
    for (const auto& [key, prop] : (*node)["properties"].items()) {
      EXPECT_TRUE(prop.contains("description")) << path + "." + key;
      ++checked;
      todo.emplace_back(path + "." + key, &prop);
    }
  }
  EXPECT_GT(checked, 50);
}

// Editors and the web UI suggest the catalog's names from the schema; the
// plain schema names none (a spec's catalog may differ).
TEST(SchemaTest, ACatalogsNamesAreTheExamplesOfPresetAndGpuModel) {
  const Catalog& catalog = Catalog::builtin();
  const auto schema = nlohmann::json::parse(job_spec_json_schema(&catalog));
  const auto& preset = schema["properties"]["model"]["properties"]["preset"];
  const auto& gpu = schema["properties"]["resources"]["properties"]["gpu_model"];
  ASSERT_EQ(preset["examples"].size(), catalog.models().size());
  for (std::size_t i = 0; i < catalog.models().size(); ++i) EXPECT_EQ(preset["examples"][i], catalog.models()[i].name);
  ASSERT_EQ(gpu["examples"].size(), catalog.gpus().size());
  for (std::size_t i = 0; i < catalog.gpus().size(); ++i) EXPECT_EQ(gpu["examples"][i], catalog.gpus()[i].key);
  EXPECT_NE(std::find(preset["examples"].begin(), preset["examples"].end(), "llama-2-7b"), preset["examples"].end());
  EXPECT_EQ(preset["type"], "string");

  const auto plain = nlohmann::json::parse(job_spec_json_schema());
  EXPECT_FALSE(plain["properties"]["model"]["properties"]["preset"].contains("examples"));
  EXPECT_FALSE(plain["properties"]["resources"]["properties"]["gpu_model"].contains("examples"));
}

}  // namespace
}  // namespace tailor::dsl
