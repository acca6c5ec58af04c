#include "runner/data/chat_template.h"

#include <utility>

#include "runner/data/jinja/text.h"

namespace tailor::runner::data {
namespace {

using jinja::Value;

constexpr int kMaxJsonDepth = 256;

Result<Value> to_value(const ChatJson& j, int depth) {
  if (depth > kMaxJsonDepth) return Status::invalid_argument("nested more than " + std::to_string(kMaxJsonDepth) + " levels deep");
  switch (j.type()) {
    case ChatJson::value_t::null: return Value(jinja::None{});
    case ChatJson::value_t::boolean: return Value(j.get<bool>());
    case ChatJson::value_t::number_integer: return Value(static_cast<std::int64_t>(j.get<std::int64_t>()));
    case ChatJson::value_t::number_unsigned: {
      const auto u = j.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(INT64_MAX)) return Status::invalid_argument("integer " + std::to_string(u) + " is out of range");
      return Value(static_cast<std::int64_t>(u));
    }
    case ChatJson::value_t::number_float: return Value(j.get<double>());
    case ChatJson::value_t::string: {
      const auto& s = j.get_ref<const std::string&>();
      if (!jinja::is_valid_utf8(s)) return Status::invalid_argument("a string is not valid UTF-8");
      return Value(s);
    }
    case ChatJson::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) {
        TAILOR_ASSIGN_OR_RETURN(Value v, to_value(e, depth + 1));
        items.push_back(std::move(v));
      }
      return Value::list(std::move(items));
    }
    case ChatJson::value_t::object: {
      Value d = Value::dict();
      for (const auto& [k, e] : j.items()) {
        if (!jinja::is_valid_utf8(k)) return Status::invalid_argument("a key is not valid UTF-8");
        TAILOR_ASSIGN_OR_RETURN(Value v, to_value(e, depth + 1));
        d.as_dict()->append(Value(k), std::move(v));
      }
      return d;
    }
    default: return Status::invalid_argument("binary values are not supported");
  }
}

// transformers' _alias_reasoning_fields: the first non-null of
// reasoning_content, thinking, reasoning becomes {"thinking": r, **message,
// "reasoning_content": r}, key order included.
ChatJson alias_reasoning(const ChatJson& message) {
  static const char* const kFields[] = {"reasoning_content", "thinking", "reasoning"};
  const ChatJson* reasoning = nullptr;
  for (const char* f : kFields) {
    auto it = message.find(f);
    if (it != message.end() && !it->is_null()) {
      reasoning = &*it;
      break;
    }
  }
  if (reasoning == nullptr) return message;
  ChatJson out = ChatJson::object();
  out["thinking"] = *reasoning;
  for (const auto& [k, v] : message.items()) out[k] = v;
  out["reasoning_content"] = *reasoning;
  return out;
}

}  // namespace

Result<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  TAILOR_ASSIGN_OR_RETURN(jinja::Template t, jinja::Template::parse(source, "chat template"));
  return ChatTemplate(std::move(t));
}

Result<RenderedChat> ChatTemplate::render(const ChatInput& input, const jinja::RenderLimits& limits) const {
  if (!input.messages.is_array()) return Status::invalid_argument("chat template: messages must be a JSON array");
  if (!input.variables.is_object()) return Status::invalid_argument("chat template: variables must be a JSON object");
  ChatJson messages = ChatJson::array();
  for (const auto& m : input.messages) {
    if (!m.is_object()) return Status::invalid_argument("chat template: each message must be a JSON object, got " + m.dump());
    messages.push_back(alias_reasoning(m));
  }
  jinja::DictObj vars;
  auto add = [&](const std::string& name, const ChatJson& j) -> Status {
    Result<Value> v = to_value(j, 0);
    if (!v.is_ok()) return v.status().prefixed("chat template: " + name);
    vars.set(Value(name), std::move(v).value());
    return Status::ok();
  };
  // The caller's variables first, so the fixed names below win, as
  // transformers passes them explicitly.
  for (const auto& [k, v] : input.variables.items()) TAILOR_RETURN_IF_ERROR(add(k, v));
  TAILOR_RETURN_IF_ERROR(add("messages", messages));
  TAILOR_RETURN_IF_ERROR(add("tools", input.tools));
  TAILOR_RETURN_IF_ERROR(add("documents", input.documents));
  vars.set(Value("add_generation_prompt"), Value(input.add_generation_prompt));
  TAILOR_ASSIGN_OR_RETURN(jinja::RenderOutput out, template_.render(vars, limits));
  return RenderedChat{std::move(out.text), std::move(out.generation_spans)};
}

Result<RenderedChat> render_chat_template(std::string_view source, const ChatInput& input) {
  TAILOR_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::parse(source));
  return t.render(input);
}

Result<std::string> python_json_dumps(const ChatJson& j) {
  TAILOR_ASSIGN_OR_RETURN(const Value v, to_value(j, 0));
  return jinja::to_json(v, jinja::JsonOptions{});
}

}  // namespace tailor::runner::data
