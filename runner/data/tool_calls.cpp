#include "runner/data/tool_calls.h"

#include <nlohmann/json.hpp>

#include "runner/data/chat_template.h"

namespace tailor::runner::data {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";

bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

}  // namespace

ToolCallFormat tool_call_format_of(std::string_view source) {
  // The JSON object's key, as a template writes it inside a string literal
  // ('"name": "') or escaped inside a double-quoted one (\"name\").
  const bool json_calls = contains(source, "\"name\"") || contains(source, "\\\"name\\\"");
  if (contains(source, kOpen) && json_calls && !contains(source, "<arg_key>") && !contains(source, "<function=")) {
    return ToolCallFormat::kHermes;
  }
  return ToolCallFormat::kNone;
}

const char* to_string(ToolCallFormat f) { return f == ToolCallFormat::kHermes ? "hermes" : "none"; }

ReadToolCalls read_tool_calls(ToolCallFormat f, const std::string& text) {
  ReadToolCalls text_only;
  text_only.content = text;
  const std::size_t first = tool_call_start(f, text);
  if (first == std::string::npos) return text_only;
  ReadToolCalls out;
  std::size_t at = first;
  while (at != std::string::npos) {
    const std::size_t body = at + kOpen.size();
    const std::size_t close = text.find(kClose, body);
    const std::string json_text = text.substr(body, close == std::string::npos ? std::string::npos : close - body);
    // Python's json.loads: whitespace around the value is allowed.
    ChatJson call = ChatJson::parse(json_text, nullptr, /*allow_exceptions=*/false);
    if (call.is_discarded() || !call.is_object() || !call.contains("name") || !call["name"].is_string() ||
        !call.contains("arguments")) {
      return text_only;
    }
    auto arguments = python_json_dumps(call["arguments"]);
    if (!arguments.is_ok()) return text_only;
    out.calls.push_back({call["name"].get<std::string>(), std::move(arguments).value()});
    at = close == std::string::npos ? std::string::npos : text.find(kOpen, close + kClose.size());
  }
  if (first > 0) out.content = text.substr(0, first);
  return out;
}

std::size_t tool_call_tag_prefix(ToolCallFormat f, std::string_view text) {
  if (f == ToolCallFormat::kNone) return 0;
  for (std::size_t n = std::min(text.size(), kOpen.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == kOpen.substr(0, n)) return n;
  }
  return 0;
}

std::size_t tool_call_start(ToolCallFormat f, std::string_view text) {
  return f == ToolCallFormat::kNone ? std::string_view::npos : text.find(kOpen);
}

}  // namespace tailor::runner::data
