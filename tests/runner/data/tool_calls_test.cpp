// Tool calls read from a reply (runner/data/tool_calls.h): which real chat
// templates write Hermes' blocks or Llama 3's JSON, and vLLM's hermes and
// llama3_json parsers' reading of a reply, its arguments as Python's json.dumps(..., ensure_ascii=False)
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
  for (const char* llama :
       {"llamacpp_meta-llama-Llama-3.1-8B-Instruct.jinja", "llamacpp_meta-llama-Llama-3.2-3B-Instruct.jinja",
        "llamacpp_meta-llama-Llama-3.3-70B-Instruct.jinja", "trl_llama3_1.jinja", "trl_llama3_2.jinja"}) {
    EXPECT_EQ(tool_call_format_of(template_text(llama)), ToolCallFormat::kLlama3Json) << llama;
  }
  // Other blocks (GLM's <arg_key>, Qwen 3.5's and Nemotron's <function=>),
  // Mistral's [TOOL_CALLS], Functionary's, Command R's, and no tools at all.
  for (const char* other :
       {"trl_glm4moe.jinja", "trl_nemotron_3_nano.jinja", "trl_qwen3_5_think.jinja", "trl_qwen3_6.jinja",
        "llamacpp_ByteDance-Seed-OSS.jinja", "llamacpp_Mistral-Small-3.2-24B-Instruct-2506.jinja",
        "llamacpp_meetkai-functionary-medium-v3.1.jinja", "llamacpp_meetkai-functionary-medium-v3.2.jinja",
        "llamacpp_CohereForAI-c4ai-command-r-plus-tool_use.jinja", "chujiezheng_chatml.jinja"}) {
    EXPECT_EQ(tool_call_format_of(template_text(other)), ToolCallFormat::kNone) << other;
  }
  EXPECT_STREQ(to_string(ToolCallFormat::kHermes), "hermes");
  EXPECT_STREQ(to_string(ToolCallFormat::kLlama3Json), "llama3_json");
  EXPECT_STREQ(to_string(ToolCallFormat::kNone), "none");
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

TEST(ToolCallsTest, CallsAreReadAsVllmsLlama3JsonParserReadsThem) {
  const auto l = ToolCallFormat::kLlama3Json;
  // No "{": the text is the content.
  ReadToolCalls plain = read_tool_calls(l, "It is sunny.");
  EXPECT_TRUE(plain.calls.empty());
  EXPECT_EQ(plain.content, "It is sunny.");

  // "parameters" (what Meta's templates write) or "arguments" (which wins
  // where both are); objects separated by "; " or by text; the text
  // around them is dropped; the arguments as Python's json.dumps writes
  // them, strings with braces in them kept whole.
  ReadToolCalls two =
      read_tool_calls(l,
                      "{\"name\": \"f\", \"parameters\": {\"z\":1,\"a\":[1.5,{\"b\":null}],\"c\":\"東京 {x}\"}}; "
                      "then {\"parameters\": 1, \"arguments\": \"x\", \"name\": \"g\"} done");
  ASSERT_EQ(two.calls.size(), 2u);
  EXPECT_FALSE(two.content.has_value());
  EXPECT_EQ(two.calls[0].name, "f");
  EXPECT_EQ(two.calls[0].arguments, "{\"z\": 1, \"a\": [1.5, {\"b\": null}], \"c\": \"東京 {x}\"}");
  EXPECT_EQ(two.calls[1].name, "g");
  EXPECT_EQ(two.calls[1].arguments, "\"x\"");

  // vLLM skips a "{" at the index one past the last object's "}": an
  // object written right against the one before is not read, but a "{"
  // inside it is (and, not being a call, makes the reply text).
  ReadToolCalls adjacent =
      read_tool_calls(l, "{\"name\": \"f\", \"parameters\": 1}{\"name\": \"g\", \"parameters\": 2}");
  ASSERT_EQ(adjacent.calls.size(), 1u);
  EXPECT_EQ(adjacent.calls[0].name, "f");
  const std::string nested = "{\"name\": \"f\", \"parameters\": {}}{\"name\": \"g\", \"parameters\": {}}";
  EXPECT_TRUE(read_tool_calls(l, nested).calls.empty());

  // Any object that is not a call, or a "{" that opens no JSON object,
  // makes the whole reply text, as vLLM does.
  for (const std::string bad :
       {"{\"name\": \"f\"}", "{\"name\": 3, \"parameters\": {}}", "{\"parameters\": {}}",
        "{\"name\": \"f\", \"parameters\": {}}; {\"oops\": 1}", "{\"name\": \"f\", \"parameters\": {", "Use {braces}.",
        "{\"name\": \"f\", \"parameters\": {]}", "<|python_tag|>no object"}) {
    ReadToolCalls r = read_tool_calls(l, bad);
    EXPECT_TRUE(r.calls.empty()) << bad;
    EXPECT_EQ(r.content, bad);
  }
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

  // Llama 3: only a reply that begins with "{" (or <|python_tag|>) is
  // calls; vLLM streams any other as text.
  const auto l = ToolCallFormat::kLlama3Json;
  EXPECT_EQ(tool_call_start(l, "{\"na"), 0u);
  EXPECT_EQ(tool_call_start(l, "<|python_tag|>{"), 0u);
  EXPECT_EQ(tool_call_start(l, "Sure: {\"name\""), std::string::npos);
  EXPECT_EQ(tool_call_start(l, " {"), std::string::npos);
  EXPECT_EQ(tool_call_tag_prefix(l, "<|pyth"), 6u);
  EXPECT_EQ(tool_call_tag_prefix(l, "<|pyx"), 0u);
  EXPECT_EQ(tool_call_tag_prefix(l, "Sure"), 0u);
  EXPECT_EQ(tool_call_tag_prefix(l, ""), 0u);
}

}  // namespace
}  // namespace tailor::runner::data
