// Tool calls in a model's reply, read as vLLM's parser for the format the
// model's chat template writes them in. One format is read: Hermes' (Nous
// Research's Hermes 2 Pro and 3, Qwen 2.5 to 3, QwQ), each call a JSON
// object {"name": ..., "arguments": ...} between <tool_call> and
// </tool_call>, as vLLM's `hermes` parser reads it
// (vllm/entrypoints/openai/tool_parsers/hermes_tool_parser.py).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tailor::runner::data {

enum class ToolCallFormat { kNone, kHermes };

// The format `template_source` writes assistants' tool calls in: Hermes'
// where it writes <tool_call> blocks of JSON; kNone for every other (other
// block syntaxes, such as GLM's <arg_key> and Qwen 3.5's <function=...>,
// Llama 3's bare JSON, or no tool calls at all).
ToolCallFormat tool_call_format_of(std::string_view template_source);

// "hermes", or "none".
const char* to_string(ToolCallFormat f);

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text, as Python's json.dumps(..., ensure_ascii=False) writes it
};

struct ReadToolCalls {
  std::vector<ToolCall> calls;         // empty: the reply is text only
  std::optional<std::string> content;  // the text (before the first call); nullopt where that is empty
};

// The calls in `text`, a reply's decoded text, as vLLM reads them: each
// <tool_call> block up to its </tool_call> (the last may be unclosed, to
// the end of the text), each a JSON object with a string "name" and an
// "arguments" value. Any block that is not is no call at all: the whole
// text is then the content, as in a reply without calls.
ReadToolCalls read_tool_calls(ToolCallFormat f, const std::string& text);

// The longest end of `text` that may begin a call's opening tag (so is held
// back from a stream until the next text says); 0 for kNone.
std::size_t tool_call_tag_prefix(ToolCallFormat f, std::string_view text);

// Where `text`'s first call opens, or npos.
std::size_t tool_call_start(ToolCallFormat f, std::string_view text);

}  // namespace tailor::runner::data
