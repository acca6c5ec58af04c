// Tool calls in a model's reply, read as vLLM's parser for the format the
// model's chat template writes them in. Two formats are read:
// - Hermes' (Nous Research's Hermes 2 Pro and 3, Qwen 2.5 to 3, QwQ): each
//   call a JSON object {"name": ..., "arguments": ...} between <tool_call>
//   and </tool_call>, as vLLM's `hermes` parser reads it
//   (vllm/entrypoints/openai/tool_parsers/hermes_tool_parser.py);
// - Llama 3.1 to 3.3's bare JSON: {"name": ..., "parameters": ...} objects
//   in the text, as vLLM's `llama3_json` parser reads them
//   (vllm/tool_parsers/llama_tool_parser.py, the JSON-decoder version).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tailor::runner::data {

enum class ToolCallFormat { kNone, kHermes, kLlama3Json };

// The format `template_source` writes assistants' tool calls in: Hermes'
// where it writes <tool_call> blocks of JSON; Llama 3's where it writes
// '{"name": "' + the call's name + '"parameters": ' and the arguments;
// kNone for every other (other block syntaxes, such as GLM's <arg_key> and
// Qwen 3.5's <function=...>, Mistral's [TOOL_CALLS], or no tool calls).
ToolCallFormat tool_call_format_of(std::string_view template_source);

// "hermes", "llama3_json" (vLLM's parsers' names), or "none".
const char* to_string(ToolCallFormat f);

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text, as Python's json.dumps(..., ensure_ascii=False) writes it
};

struct ReadToolCalls {
  std::vector<ToolCall> calls;         // empty: the reply is text only
  std::optional<std::string> content;  // the text (before the first call); nullopt where that is empty
};

// The calls in `text`, a reply's decoded text, as vLLM reads them.
// Hermes: each <tool_call> block up to its </tool_call> (the last may be
// unclosed, to the end of the text), each a JSON object with a string
// "name" and an "arguments" value; the text before the first block is the
// content. Llama 3: each JSON object that opens at a "{" outside the
// objects read before it (one that opens right where the one before it
// closes is skipped, as vLLM skips it), each with a string "name" and an
// "arguments" or else "parameters" value; the text around them is dropped.
// Where any block or object is not a call, the whole text is the content,
// as in a reply without calls.
ReadToolCalls read_tool_calls(ToolCallFormat f, const std::string& text);

// For a stream, given the whole reply so far: the longest end of `text`
// that may begin a call (so is held back until the next text says); 0 for
// kNone.
std::size_t tool_call_tag_prefix(ToolCallFormat f, std::string_view text);

// For a stream, given the whole reply so far: where its calls begin, or
// npos. Hermes: the first <tool_call>. Llama 3: 0 where the reply begins
// with "{" or <|python_tag|> (vLLM streams any other reply as text).
std::size_t tool_call_start(ToolCallFormat f, std::string_view text);

}  // namespace tailor::runner::data
