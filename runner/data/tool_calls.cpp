#include "runner/data/tool_calls.h"

#include <nlohmann/json.hpp>

#include "runner/data/chat_template.h"

namespace tailor::runner::data {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
// Llama 3's "begin of tool call" token, which a reply may start with.
constexpr std::string_view kPythonTag = "<|python_tag|>";

bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

// A call's name and arguments from a parsed object: nullopt where the name
// is missing or not a string, or `args_key` (then `fallback_key`, if any)
// is missing.
std::optional<ToolCall> call_of(const ChatJson& call, const char* args_key, const char* fallback_key) {
  if (!call.is_object() || !call.contains("name") || !call["name"].is_string()) return std::nullopt;
  const char* key = call.contains(args_key) ? args_key : fallback_key;
  if (key == nullptr || !call.contains(key)) return std::nullopt;
  auto arguments = python_json_dumps(call[key]);
  if (!arguments.is_ok()) return std::nullopt;
  return ToolCall{call["name"].get<std::string>(), std::move(arguments).value()};
}

ReadToolCalls read_hermes(const std::string& text, ReadToolCalls text_only) {
  const std::size_t first = text.find(kOpen);
  if (first == std::string::npos) return text_only;
  ReadToolCalls out;
  std::size_t at = first;
  while (at != std::string::npos) {
    const std::size_t body = at + kOpen.size();
    const std::size_t close = text.find(kClose, body);
    const std::string json_text = text.substr(body, close == std::string::npos ? std::string::npos : close - body);
    // Python's json.loads: whitespace around the value is allowed.
    std::optional<ToolCall> call =
        call_of(ChatJson::parse(json_text, nullptr, /*allow_exceptions=*/false), "arguments", nullptr);
    if (!call) return text_only;
    out.calls.push_back(std::move(*call));
    at = close == std::string::npos ? std::string::npos : text.find(kOpen, close + kClose.size());
  }
  if (first > 0) out.content = text.substr(0, first);
  return out;
}

// Where the object opening at text[open] ends (one past its "}"), or npos
// where it does not close: braces counted outside strings, escapes
// skipped. What lies between is then parsed strictly, so a span that is
// not one JSON object fails as Python's raw_decode fails on it.
std::size_t object_end(std::string_view text, std::size_t open) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = open; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

ReadToolCalls read_llama3_json(const std::string& text, ReadToolCalls text_only) {
  if (!contains(text, kPythonTag) && !contains(text, "{")) return text_only;
  ReadToolCalls out;
  // vLLM skips a "{" at or before the end index of the object read last,
  // an index one past its "}": an object that opens right there is
  // skipped too.
  std::size_t skip_through = 0;
  bool read_one = false;
  for (std::size_t open = text.find('{'); open != std::string::npos; open = text.find('{', open + 1)) {
    if (read_one && open <= skip_through) continue;
    const std::size_t end = object_end(text, open);
    if (end == std::string::npos) return text_only;
    std::optional<ToolCall> call = call_of(
        ChatJson::parse(text.substr(open, end - open), nullptr, /*allow_exceptions=*/false), "arguments", "parameters");
    if (!call) return text_only;
    out.calls.push_back(std::move(*call));
    skip_through = end;
    read_one = true;
  }
  if (out.calls.empty()) return text_only;
  return out;  // no content: the text around the objects is dropped
}

}  // namespace

ToolCallFormat tool_call_format_of(std::string_view source) {
  // The JSON object's key, as a template writes it inside a string literal
  // ('"name": "') or escaped inside a double-quoted one (\"name\").
  const bool json_calls = contains(source, "\"name\"") || contains(source, "\\\"name\\\"");
  if (contains(source, kOpen) && json_calls && !contains(source, "<arg_key>") && !contains(source, "<function=")) {
    return ToolCallFormat::kHermes;
  }
  // Meta's templates write a call as '{"name": "' + tool_call.name + '", '
  // then '"parameters": ' and the arguments through tojson.
  if (contains(source, "'{\"name\": \"' + tool_call.name") && contains(source, "'\"parameters\": '")) {
    return ToolCallFormat::kLlama3Json;
  }
  return ToolCallFormat::kNone;
}

const char* to_string(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kLlama3Json: return "llama3_json";
    case ToolCallFormat::kNone: break;
  }
  return "none";
}

ReadToolCalls read_tool_calls(ToolCallFormat f, const std::string& text) {
  ReadToolCalls text_only;
  text_only.content = text;
  switch (f) {
    case ToolCallFormat::kHermes: return read_hermes(text, std::move(text_only));
    case ToolCallFormat::kLlama3Json: return read_llama3_json(text, std::move(text_only));
    case ToolCallFormat::kNone: break;
  }
  return text_only;
}

std::size_t tool_call_tag_prefix(ToolCallFormat f, std::string_view text) {
  switch (f) {
    case ToolCallFormat::kHermes:
      for (std::size_t n = std::min(text.size(), kOpen.size() - 1); n > 0; --n) {
        if (text.substr(text.size() - n) == kOpen.substr(0, n)) return n;
      }
      return 0;
    case ToolCallFormat::kLlama3Json:
      // Only the reply's beginning can open calls.
      return text.size() < kPythonTag.size() && kPythonTag.substr(0, text.size()) == text ? text.size() : 0;
    case ToolCallFormat::kNone: break;
  }
  return 0;
}

std::size_t tool_call_start(ToolCallFormat f, std::string_view text) {
  switch (f) {
    case ToolCallFormat::kHermes: return text.find(kOpen);
    case ToolCallFormat::kLlama3Json:
      return text.starts_with('{') || text.starts_with(kPythonTag) ? 0 : std::string_view::npos;
    case ToolCallFormat::kNone: break;
  }
  return std::string_view::npos;
}

}  // namespace tailor::runner::data
