#include "dsl/chat_records.h"

#include <algorithm>

#include "core/text.h"
#include "dsl/conversation_json.h"

namespace tailor::dsl {

const std::vector<std::pair<std::string, std::string>>& chat_field_defaults(ChatFormat format) {
  static const std::vector<std::pair<std::string, std::string>> none;
  static const std::vector<std::pair<std::string, std::string>> messages = {
      {"messages", "messages"}, {"tools", "tools"}, {"role", "role"}, {"content", "content"}};
  static const std::vector<std::pair<std::string, std::string>> sharegpt = {
      {"conversations", "conversations"}, {"from", "from"}, {"value", "value"}, {"system", "system"}, {"tools", "tools"}};
  static const std::vector<std::pair<std::string, std::string>> alpaca = {
      {"instruction", "instruction"}, {"input", "input"}, {"output", "output"}, {"system", "system"}, {"history", "history"}};
  switch (format) {
    case ChatFormat::kMessages: return messages;
    case ChatFormat::kShareGpt: return sharegpt;
    case ChatFormat::kAlpaca: return alpaca;
    case ChatFormat::kNone: break;
  }
  return none;
}

std::string chat_field(const DataSpec& spec, const std::string& key) {
  if (const auto it = spec.fields.find(key); it != spec.fields.end()) return it->second;
  for (const auto& [k, v] : chat_field_defaults(spec.chat)) {
    if (k == key) return v;
  }
  return key;
}

const std::vector<std::string>& template_roles() {
  static const std::vector<std::string> k = {"system", "developer", "user", "assistant", "tool", "ipython"};
  return k;
}

const std::map<std::string, std::string>& default_sharegpt_roles() {
  static const std::map<std::string, std::string> k = {
      {"human", "user"},          {"user", "user"},          {"gpt", "assistant"},
      {"assistant", "assistant"}, {"model", "assistant"},    {"system", "system"},
      {"tool", "tool"},           {"observation", "tool"},   {"function_response", "tool"}};
  return k;
}

namespace {

using Json = nlohmann::ordered_json;

std::string keys_of(const Json& obj) {
  std::vector<std::string> keys;
  constexpr std::size_t kMaxKeys = 8;
  for (auto it = obj.begin(); it != obj.end() && keys.size() < kMaxKeys; ++it) keys.push_back(quote(it.key()));
  if (keys.empty()) return "the record is empty";
  return "the record has " + join(keys, ", ") + (obj.size() > kMaxKeys ? ", ..." : "");
}

bool is_role(const std::string& r) {
  const auto& roles = template_roles();
  return std::find(roles.begin(), roles.end(), r) != roles.end();
}

// The record's list of turns in `field`, or why not.
Result<const Json*> turns_of(const Json& record, const std::string& field, const char* key, const std::string& where) {
  const auto it = record.find(field);
  if (it == record.end()) {
    return Status::invalid_argument(where + "missing field " + quote(field) + " (" + keys_of(record) +
                                    "; data.fields." + key + " names another)");
  }
  if (!it->is_array()) {
    return Status::invalid_argument(where + "field " + quote(field) + " must be a list of turns, got " +
                                    it->type_name());
  }
  return &*it;
}

// A string field of `obj` that may be absent or null ("" then).
Result<std::string> optional_text(const Json& obj, const std::string& field, const std::string& where) {
  const auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return std::string();
  if (!it->is_string()) {
    return Status::invalid_argument(where + "field " + quote(field) + " must be a string, got " + it->type_name());
  }
  return it->get<std::string>();
}

bool trains_something(const Json& messages, TrainOn train_on) {
  if (train_on == TrainOn::kAll) return !messages.empty();
  return std::any_of(messages.begin(), messages.end(), [](const Json& m) { return m["role"] == "assistant"; });
}

Result<Json> read_messages(const Json& record, const DataSpec& spec, const std::string& where) {
  const std::string role_key = chat_field(spec, "role"), content_key = chat_field(spec, "content");
  TAILOR_ASSIGN_OR_RETURN(const Json* turns, turns_of(record, chat_field(spec, "messages"), "messages", where));
  Json out = Json::array();
  for (std::size_t i = 0; i < turns->size(); ++i) {
    const Json& turn = (*turns)[i];
    const std::string at = where + chat_field(spec, "messages") + "[" + std::to_string(i) + "]: ";
    if (!turn.is_object()) return Status::invalid_argument(at + "a turn must be an object, got " + turn.type_name());
    const auto role = turn.find(role_key);
    if (role == turn.end() || !role->is_string()) {
      return Status::invalid_argument(at + (role == turn.end() ? "missing field " + quote(role_key)
                                                               : "field " + quote(role_key) + " must be a string"));
    }
    const std::string r = role->get<std::string>();
    if (!is_role(r)) {
      std::string hint = "expected one of " + join(template_roles(), ", ");
      if (default_sharegpt_roles().count(r) != 0) hint += "; ShareGPT's roles are read with data.chat: sharegpt";
      return Status::invalid_argument(at + "unknown role " + quote(r) + " (" + hint + ")");
    }
    const auto content = turn.find(content_key);
    if (content == turn.end() && !turn.contains("tool_calls")) {
      return Status::invalid_argument(at + "missing field " + quote(content_key));
    }
    if (content != turn.end() && !content->is_string() && !content->is_null() && !content->is_array()) {
      return Status::invalid_argument(at + "field " + quote(content_key) +
                                      " must be a string, null or a list of parts, got " + content->type_name());
    }
    if (role_key == "role" && content_key == "content") {
      out.push_back(turn);
      continue;
    }
    Json m = Json::object();
    m["role"] = r;
    m["content"] = content == turn.end() ? Json() : *content;
    for (auto it = turn.begin(); it != turn.end(); ++it) {
      if (it.key() != role_key && it.key() != content_key && it.key() != "role" && it.key() != "content") {
        m[it.key()] = it.value();
      }
    }
    out.push_back(std::move(m));
  }
  return out;
}

Result<Json> read_sharegpt(const Json& record, const DataSpec& spec, const std::string& where) {
  const std::string from_key = chat_field(spec, "from"), value_key = chat_field(spec, "value");
  const std::string list = chat_field(spec, "conversations");
  TAILOR_ASSIGN_OR_RETURN(const Json* turns, turns_of(record, list, "conversations", where));
  std::map<std::string, std::string> roles = default_sharegpt_roles();
  for (const auto& [from, role] : spec.roles) roles[from] = role;
  Json out = Json::array();
  TAILOR_ASSIGN_OR_RETURN(const std::string system, optional_text(record, chat_field(spec, "system"), where));
  if (!system.empty()) out.push_back(Json{{"role", "system"}, {"content", system}});
  for (std::size_t i = 0; i < turns->size(); ++i) {
    const Json& turn = (*turns)[i];
    const std::string at = where + list + "[" + std::to_string(i) + "]: ";
    if (!turn.is_object()) return Status::invalid_argument(at + "a turn must be an object, got " + turn.type_name());
    const auto from = turn.find(from_key);
    if (from == turn.end() || !from->is_string()) {
      return Status::invalid_argument(at + (from == turn.end() ? "missing field " + quote(from_key)
                                                               : "field " + quote(from_key) + " must be a string"));
    }
    const auto role = roles.find(from->get<std::string>());
    if (role == roles.end()) {
      std::vector<std::string> known;
      for (const auto& [k, v] : roles) known.push_back(k);
      return Status::invalid_argument(at + "unknown role " + quote(from->get<std::string>()) + " (known: " +
                                      join(known, ", ") + "; data.roles maps others)");
    }
    const auto value = turn.find(value_key);
    if (value == turn.end() || !value->is_string()) {
      return Status::invalid_argument(at + (value == turn.end() ? "missing field " + quote(value_key)
                                                                : "field " + quote(value_key) + " must be a string"));
    }
    if (role->second == "system" && !out.empty()) {
      return Status::invalid_argument(at + "a system turn after the conversation started");
    }
    out.push_back(Json{{"role", role->second}, {"content", *value}});
  }
  return out;
}

Result<Json> read_alpaca(const Json& record, const DataSpec& spec, const std::string& where) {
  const std::string instruction_key = chat_field(spec, "instruction"), output_key = chat_field(spec, "output");
  for (const std::string& key : {instruction_key, output_key}) {
    const auto it = record.find(key);
    if (it == record.end()) return Status::invalid_argument(where + "missing field " + quote(key) + " (" + keys_of(record) + ")");
    if (!it->is_string()) {
      return Status::invalid_argument(where + "field " + quote(key) + " must be a string, got " + it->type_name());
    }
  }
  TAILOR_ASSIGN_OR_RETURN(const std::string input, optional_text(record, chat_field(spec, "input"), where));
  TAILOR_ASSIGN_OR_RETURN(const std::string system, optional_text(record, chat_field(spec, "system"), where));
  Json out = Json::array();
  if (!system.empty()) out.push_back(Json{{"role", "system"}, {"content", system}});
  const std::string history_key = chat_field(spec, "history");
  if (const auto h = record.find(history_key); h != record.end() && !h->is_null()) {
    const std::string bad = where + "field " + quote(history_key) + " must be a list of [instruction, response] pairs";
    if (!h->is_array()) return Status::invalid_argument(bad);
    for (const Json& pair : *h) {
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string() || !pair[1].is_string()) {
        return Status::invalid_argument(bad);
      }
      out.push_back(Json{{"role", "user"}, {"content", pair[0]}});
      out.push_back(Json{{"role", "assistant"}, {"content", pair[1]}});
    }
  }
  // As LLaMA-Factory joins them: the instruction, then the input on its own line.
  std::string prompt = record[instruction_key].get<std::string>();
  if (!input.empty()) prompt += "\n" + input;
  out.push_back(Json{{"role", "user"}, {"content", prompt}});
  out.push_back(Json{{"role", "assistant"}, {"content", record[output_key]}});
  return out;
}

}  // namespace

Result<std::string> conversation_of(const Json& record, const DataSpec& spec, const std::string& where) {
  Json messages;
  switch (spec.chat) {
    case ChatFormat::kMessages: {
      TAILOR_ASSIGN_OR_RETURN(messages, read_messages(record, spec, where));
      break;
    }
    case ChatFormat::kShareGpt: {
      TAILOR_ASSIGN_OR_RETURN(messages, read_sharegpt(record, spec, where));
      break;
    }
    case ChatFormat::kAlpaca: {
      TAILOR_ASSIGN_OR_RETURN(messages, read_alpaca(record, spec, where));
      break;
    }
    case ChatFormat::kNone:
      return Status::internal("conversation_of without data.chat");
  }
  if (!trains_something(messages, spec.train_on)) {
    return Status::invalid_argument(where + (messages.empty() ? "the conversation has no turns"
                                                               : "the conversation has no assistant turn to train"));
  }
  Json out = Json::object();
  out["messages"] = std::move(messages);
  if (spec.chat != ChatFormat::kAlpaca) {
    const std::string tools_key = chat_field(spec, "tools");
    if (const auto t = record.find(tools_key); t != record.end() && !t->is_null()) {
      Json tools = *t;
      if (tools.is_string()) {  // ShareGPT exports keep tools as a JSON string
        try {
          tools = Json::parse(t->get<std::string>());
        } catch (const Json::exception&) {
          return Status::invalid_argument(where + "field " + quote(tools_key) + " is a string that is not JSON");
        }
      }
      if (!tools.is_array()) {
        return Status::invalid_argument(where + "field " + quote(tools_key) + " must be a list of tools, got " +
                                        tools.type_name());
      }
      out["tools"] = std::move(tools);
    }
  }
  return out.dump();
}

}  // namespace tailor::dsl
