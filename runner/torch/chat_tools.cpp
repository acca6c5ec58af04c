#include "runner/torch/chat_tools.h"

namespace tailor::runner::openai {
namespace {

constexpr const char* kConstrained =
    "needs the reply constrained to a call (constrained decoding), which is not built; ask with "
    "tool_choice \"auto\" (the model chooses) or \"none\"";

std::optional<Problem> check_tool(const Json& tool, const std::string& at) {
  if (!tool.is_object() || !tool.contains("type") || tool["type"] != "function") {
    return Problem{"tools", at + ": expected {\"type\": \"function\", \"function\": {...}}"};
  }
  for (auto it = tool.begin(); it != tool.end(); ++it) {
    if (it.key() != "type" && it.key() != "function") {
      return Problem{"tools", at + "." + it.key() + ": not a field of a tool (type, function)"};
    }
  }
  if (!tool.contains("function") || !tool["function"].is_object()) {
    return Problem{"tools", at + ".function: expected an object {name, description, parameters}"};
  }
  const Json& f = tool["function"];
  if (!f.contains("name") || !f["name"].is_string() || f["name"].get_ref<const std::string&>().empty()) {
    return Problem{"tools", at + ".function.name: expected a non-empty string"};
  }
  for (auto it = f.begin(); it != f.end(); ++it) {
    const std::string& key = it.key();
    const std::string field = at + ".function." + key;
    if (key == "name") continue;
    if (key == "description" && !it->is_string()) return Problem{"tools", field + ": expected a string"};
    if (key == "parameters" && !it->is_object()) return Problem{"tools", field + ": expected a JSON Schema object"};
    if (key == "strict" && !it->is_boolean()) return Problem{"tools", field + ": expected true or false"};
    if (key != "description" && key != "parameters" && key != "strict") {
      return Problem{"tools", field + ": not a field of a function (name, description, parameters, strict)"};
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<Problem> read_tools(const Json& request, data::ToolCallFormat template_format, Json& record,
                                  data::ToolCallFormat& read) {
  read = data::ToolCallFormat::kNone;
  const bool has_tools = request.contains("tools") && !request["tools"].is_null();
  if (has_tools) {
    const Json& tools = request["tools"];
    if (!tools.is_array()) return Problem{"tools", "tools: expected a list of {\"type\": \"function\", ...}"};
    for (std::size_t i = 0; i < tools.size(); ++i) {
      if (auto bad = check_tool(tools[i], "tools[" + std::to_string(i) + "]")) return bad;
    }
  }
  const bool some_tools = has_tools && !request["tools"].empty();
  std::string choice = some_tools ? "auto" : "none";
  if (request.contains("tool_choice") && !request["tool_choice"].is_null()) {
    const Json& c = request["tool_choice"];
    if (c.is_object()) return Problem{"tool_choice", "tool_choice: a named function " + std::string(kConstrained)};
    if (!c.is_string()) {
      return Problem{"tool_choice",
                     "tool_choice: expected \"none\", \"auto\", \"required\" or {\"type\": \"function\", ...}"};
    }
    choice = c.get<std::string>();
    if (choice == "required") return Problem{"tool_choice", "tool_choice: \"required\" " + std::string(kConstrained)};
    if (choice != "none" && choice != "auto") {
      return Problem{"tool_choice",
                     "tool_choice: expected \"none\", \"auto\", \"required\" or {\"type\": \"function\", ...}, "
                     "got \"" +
                         choice + "\""};
    }
    if (choice == "auto" && !some_tools) return Problem{"tool_choice", "tool_choice: \"auto\" needs tools"};
  }
  if (!some_tools) return std::nullopt;
  if (choice == "auto") {
    if (template_format == data::ToolCallFormat::kNone) {
      return Problem{"tools",
                     "tools: this model's chat template writes no tool calls in a format that is read "
                     "(Hermes' <tool_call> blocks of JSON, as Qwen 2.5 to 3 and Hermes 2 Pro and 3 "
                     "write them, or Llama 3.1 to 3.3's JSON objects); with tool_choice \"none\" the tools "
                     "still go to the template"};
    }
    read = template_format;
  }
  record["tools"] = request["tools"];
  return std::nullopt;
}

std::optional<Problem> call_arguments_as_values(Json& turn, const std::string& where) {
  if (!turn.is_object() || !turn.contains("tool_calls") || !turn["tool_calls"].is_array()) return std::nullopt;
  Json& calls = turn["tool_calls"];
  for (std::size_t j = 0; j < calls.size(); ++j) {
    if (!calls[j].is_object() || !calls[j].contains("function") || !calls[j]["function"].is_object()) continue;
    Json& f = calls[j]["function"];
    if (!f.contains("arguments") || !f["arguments"].is_string()) continue;
    Json value = Json::parse(f["arguments"].get_ref<const std::string&>(), nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded()) {
      return Problem{"messages", where + ".tool_calls[" + std::to_string(j) + "].function.arguments: not JSON"};
    }
    f["arguments"] = std::move(value);
  }
  return std::nullopt;
}

Json tool_calls_json(const std::vector<data::ToolCall>& calls, bool indexed) {
  Json out = Json::array();
  for (std::size_t i = 0; i < calls.size(); ++i) {
    Json call;
    if (indexed) call["index"] = i;
    call["id"] = new_response_id("call");
    call["type"] = "function";
    call["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    out.push_back(std::move(call));
  }
  return out;
}

}  // namespace tailor::runner::openai
