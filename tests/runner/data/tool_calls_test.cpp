// Tool calls read from a reply (runner/data/tool_calls.h): which real chat
// templates write Hermes' blocks, and vLLM's hermes parser's reading of a
// reply, its arguments as Python's json.dumps(..., ensure_ascii=False)
// writes them (checked against transformers and Python end to end by
// chat_completions_test.cpp).
#include "runner/data/tool_calls.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace tailor::runner::data {
namespace {

std::string template_text(const std::string& name) {
  std::ifstream in(std::filesystem::path(TAILOR_SOURCE_DIR) / "tests/runner/data/chat_templates" / name);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_FALSE(text.str().empty()) << name;
  return text.str();
}

TEST(ToolCallsTest, TheTemplatesThatWriteHermesBlocksOfJsonAreTold) {
  for (const char* hermes :
       {"llamacpp_NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
        "llamacpp_NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "llamacpp_Qwen-Qwen2.5-7B-Instruct.jinja",
        "llamacpp_Qwen-QwQ-32B.jinja", "llamacpp_Qwen-Qwen3-0.6B.jinja", "trl_qwen2_5.jinja", "trl_qwen3.jinja"}) {
    EXPECT_EQ(tool_call_format_of(template_text(hermes)), ToolCallFormat::kHermes) << hermes;
  }
  // Other blocks (GLM's <arg_key>, Qwen 3.5's and Nemotron's <function=>),
  // Llama 3's bare JSON, Mistral's [TOOL_CALLS], and no tools at all.
  for (const char* other :
       {"trl_glm4moe.jinja", "trl_nemotron_3_nano.jinja", "trl_qwen3_5_think.jinja", "trl_qwen3_6.jinja",
        "llamacpp_ByteDance-Seed-OSS.jinja", "llamacpp_meta-llama-Llama-3.1-8B-Instruct.jinja",
        "llamacpp_Mistral-Small-3.2-24B-Instruct-2506.jinja", "chujiezheng_chatml.jinja"}) {
    EXPECT_EQ(tool_call_format_of(template_text(other)), ToolCallFormat::kNone) << other;
  }
  EXPECT_STREQ(to_string(ToolCallFormat::kHermes), "hermes");
}

TEST(ToolCallsTest, CallsAreReadAsVllmsHermesParserReadsThem) {
  const auto h = ToolCallFormat::kHermes;
  // No block: the text is the content.
  ReadToolCalls plain = read_tool_calls(h, "It is sunny.");
  EXPECT_TRUE(plain.calls.empty());
  EXPECT_EQ(plain.content, "It is sunny.");

  // The text before the first block is the content; what lies between
  // blocks is dropped; the last block may be unclosed; the arguments are
  // Python's json.dumps of them: ", " and ": ", keys in their order,
  // non-ASCII as it is.
  ReadToolCalls two = read_tool_calls(
      h,
      "Let me look.\n<tool_call>\n {\"name\": \"f\", \"arguments\":{\"z\":1,\"a\":[1.5,true,null],\"c\":\"東京\"}}\n"
      "</tool_call> and <tool_call>{\"arguments\": \"x\", \"name\": \"g\"}");
  ASSERT_EQ(two.calls.size(), 2u);
  EXPECT_EQ(two.content, "Let me look.\n");
  EXPECT_EQ(two.calls[0].name, "f");
  EXPECT_EQ(two.calls[0].arguments, "{\"z\": 1, \"a\": [1.5, true, null], \"c\": \"東京\"}");
  EXPECT_EQ(two.calls[1].name, "g");
  EXPECT_EQ(two.calls[1].arguments, "\"x\"");

  // Nothing before the first block: no content.
  ReadToolCalls bare = read_tool_calls(h, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>");
  ASSERT_EQ(bare.calls.size(), 1u);
  EXPECT_EQ(bare.calls[0].arguments, "{}");
  EXPECT_FALSE(bare.content.has_value());

  // A block that is not a call makes the whole reply text, as vLLM does.
  for (const std::string bad :
       {"a<tool_call>{\"name\": \"f\"}</tool_call>", "a<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>",
        "a<tool_call>[1]</tool_call>", "a<tool_call>{\"name\": \"f\", \"arguments\": {</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call><tool_call>oops</tool_call>"}) {
    ReadToolCalls r = read_tool_calls(h, bad);
    EXPECT_TRUE(r.calls.empty()) << bad;
    EXPECT_EQ(r.content, bad);
  }
  // Without a format nothing is read.
  EXPECT_TRUE(read_tool_calls(ToolCallFormat::kNone, "<tool_call>{\"name\": \"f\", \"arguments\": {}}").calls.empty());
}

TEST(ToolCallsTest, AStreamHoldsBackWhatMayOpenACall) {
  const auto h = ToolCallFormat::kHermes;
  EXPECT_EQ(tool_call_tag_prefix(h, "abc<tool"), 5u);
  EXPECT_EQ(tool_call_tag_prefix(h, "abc<"), 1u);
  EXPECT_EQ(tool_call_tag_prefix(h, "<tool_call"), 10u);
  EXPECT_EQ(tool_call_tag_prefix(h, "abc<b"), 0u);
  EXPECT_EQ(tool_call_tag_prefix(h, ""), 0u);
  EXPECT_EQ(tool_call_tag_prefix(ToolCallFormat::kNone, "abc<tool"), 0u);
  EXPECT_EQ(tool_call_start(h, "ab<tool_call>"), 2u);
  EXPECT_EQ(tool_call_start(h, "ab<tool_cal"), std::string::npos);
}

}  // namespace
}  // namespace tailor::runner::data
