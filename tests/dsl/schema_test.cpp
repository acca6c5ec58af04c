#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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

}  // namespace
}  // namespace tailor::dsl
