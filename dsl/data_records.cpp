#include "dsl/data_records.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/text.h"
#include "core/units.h"
#include "dsl/chat_records.h"
#include "dsl/conversation_json.h"
#include "dsl/owned_fd.h"
#include "dsl/spec_fields.h"
#include "dsl/table_records.h"

namespace tailor::dsl {
namespace {

using Json = nlohmann::ordered_json;  // conversations keep their keys' order, as Python reads them

std::string_view drop_utf8_bom(std::string_view s) {
  if (s.substr(0, 3) == "\xEF\xBB\xBF") s.remove_prefix(3);
  return s;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The first character that is not JSON whitespace, or '\0'.
char first_char(std::string_view s) {
  for (char c : s) {
    if (!is_space(c)) return c;
  }
  return '\0';
}

// Calls fn(line_number, line) for each line, 1-based, without its "\n" or a
// trailing "\r"; stops at the first non-ok Status and returns it.
template <class Fn>
Status for_each_line(std::string_view text, Fn&& fn) {
  std::int64_t number = 0;
  while (!text.empty()) {
    const auto end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    TAILOR_RETURN_IF_ERROR(fn(++number, line));
  }
  return Status::ok();
}

// A status that stops a walk early without being an error.
Status stop_walk() { return Status::cancelled("enough records"); }
bool is_stop(const Status& s) { return s.code() == StatusCode::kCancelled && s.message() == "enough records"; }

// nlohmann's message reads "[json.exception.parse_error.101] parse error at
// line 1, column 12: syntax error ..."; the position is already in ours.
// Its "last read" echoes the token so far, which for an unterminated string
// can be a whole megabyte line: cut it.
std::string parse_reason(const Json::parse_error& e) {
  std::string_view what = e.what();
  if (const auto col = what.find("column "); col != std::string_view::npos) {
    if (const auto colon = what.find(": ", col); colon != std::string_view::npos) {
      what.remove_prefix(colon + 2);
    }
  }
  constexpr std::size_t kMaxReason = 200;
  if (what.size() > kMaxReason) return std::string(what.substr(0, kMaxReason)) + "...";
  return std::string(what);
}

// Parses `text`, which starts at `line` of the file. A syntax error is
// reported at its own line and column.
Result<Json> parse_json(std::string_view text, const std::string& path, std::int64_t line) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    // e.byte is 1-based; past the end for a truncated value.
    const std::size_t at = std::min<std::size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
    std::int64_t l = line;
    std::size_t line_start = 0;
    for (std::size_t i = 0; i < at; ++i) {
      if (text[i] == '\n') {
        ++l;
        line_start = i + 1;
      }
    }
    return Status::invalid_argument(path + ":" + std::to_string(l) + ":" + std::to_string(at - line_start + 1) +
                                    ": not valid JSON: " + parse_reason(e));
  }
}

// Why a record lacks `name`, for a user who has data of another shape:
// conversations and preference pairs are named as such, and the fields the
// record has are listed.
std::string missing_field(const Json& obj, const std::string& name) {
  std::string why = "missing field " + quote(name);
  for (const char* turns : {"messages", "conversations", "conversation"}) {
    const auto it = obj.find(turns);
    if (it != obj.end() && it->is_array()) {
      const bool sharegpt = !it->empty() && (*it)[0].is_object() && (*it)[0].contains("from");
      return why + ": this record is a conversation (" + quote(turns) + ", a list of turns): set data.chat: " +
             (sharegpt ? "sharegpt" : "messages") + " to train on it with the model's chat template";
    }
  }
  if (obj.contains("instruction") && obj.contains("output")) {
    return why + ": this record is an Alpaca example (\"instruction\", \"output\"): set data.chat: alpaca";
  }
  if (obj.contains("chosen") && obj.contains("rejected")) {
    return why + ": this record is a preference pair (\"chosen\", \"rejected\"): set training.method: dpo to "
                 "train on it";
  }
  if (obj.contains("completion") && obj.contains("label")) {
    return why +
           ": this record is an unpaired KTO example (\"completion\", \"label\"): set training.method: kto "
           "and data.label_field: label to train on it";
  }
  std::vector<std::string> keys;
  constexpr std::size_t kMaxKeys = 8;
  for (auto it = obj.begin(); it != obj.end() && keys.size() < kMaxKeys; ++it) keys.push_back(quote(it.key()));
  if (obj.empty()) return why + " (the record is empty)";
  return why + " (the record has " + join(keys, ", ") + (obj.size() > kMaxKeys ? ", ..." : "") + ")";
}

// The string in obj[name], or an error after `where` ("path:line: ").
Result<std::string_view> string_field(const Json& obj, const std::string& name, const std::string& where) {
  const auto it = obj.find(name);
  if (it == obj.end()) return Status::invalid_argument(where + missing_field(obj, name));
  if (!it->is_string()) {
    return Status::invalid_argument(where + "field " + quote(name) + " must be a string, got " + it->type_name());
  }
  return std::string_view(it->get_ref<const std::string&>());
}

// Serialized conversations of a conversational pair (data.chat: messages),
// kept while its record is delivered.
struct PairConversations {
  std::string prompt, chosen, rejected;
};

// A conversational pair, as TRL reads one: `prompt` a list of turns (or a
// string, a user turn) and the completions lists of turns after it; without
// a prompt field, chosen and rejected are whole conversations and the prompt
// is the turns they share (an assistant turn ending that run goes with the
// completions). Each side is checked as a conversation of data.chat.
// obj[name] as a list of turns, or an error after `where`.
Result<Json> turns_field(const Json& obj, const std::string& name, const std::string& where) {
  const auto it = obj.find(name);
  if (it == obj.end()) return Status::invalid_argument(where + "missing field " + quote(name));
  if (!it->is_array()) {
    return Status::invalid_argument(where + "field " + quote(name) +
                                    " must be a list of turns (data.chat: messages), got " + it->type_name());
  }
  return *it;
}

// A conversational prompt field: a list of turns, or a string (one user
// turn), as TRL reads it.
Result<Json> prompt_turns(const Json& p, const DataSpec& spec, const std::string& where) {
  if (p.is_array()) return p;
  if (p.is_string()) {
    Json prompt = Json::array();
    prompt.push_back(Json{{chat_field(spec, "role"), "user"}, {chat_field(spec, "content"), p}});
    return prompt;
  }
  return Status::invalid_argument(where + "field " + quote(spec.prompt_field) +
                                  " must be a list of turns or a string, got " + p.type_name());
}

// The record of the prompt's turns then the completion's, with the
// record's tools, serialized and checked as a conversation of data.chat.
Result<std::string> whole_conversation(const Json& obj, const DataSpec& spec, const Json& prompt,
                                       const Json& completion, const std::string& where) {
  Json record = Json::object();
  Json turns = prompt;
  for (const Json& t : completion)
    turns.push_back(t);
  record[chat_field(spec, "messages")] = std::move(turns);
  if (const auto t = obj.find(chat_field(spec, "tools")); t != obj.end()) record[chat_field(spec, "tools")] = *t;
  return conversation_of(record, spec, where);
}

// A serialized whole conversation without the turns after its first
// `prompt_turns` (the prompt as that side reads it).
std::string prompt_only(const std::string& whole, std::size_t prompt_turns) {
  Json prompt = Json::parse(whole);
  Json& turns = prompt["messages"];
  turns.erase(turns.begin() + static_cast<std::ptrdiff_t>(prompt_turns), turns.end());
  return prompt.dump();
}

Status read_conversation_pair(const Json& obj, const DataSpec& spec, const std::string& where, PairConversations& out) {
  Json prompt = Json::array();
  TAILOR_ASSIGN_OR_RETURN(Json chosen, turns_field(obj, spec.chosen_field, where));
  TAILOR_ASSIGN_OR_RETURN(Json rejected, turns_field(obj, spec.rejected_field, where));
  if (const auto p = obj.find(spec.prompt_field); p != obj.end()) {
    TAILOR_ASSIGN_OR_RETURN(prompt, prompt_turns(*p, spec, where));
  } else {
    std::size_t shared = 0;
    while (shared < chosen.size() && shared < rejected.size() && chosen[shared] == rejected[shared]) ++shared;
    if (shared > 0 && shared < chosen.size() && chosen[shared - 1].value(chat_field(spec, "role"), "") == "assistant") {
      --shared;
    }
    prompt = Json(chosen.begin(), chosen.begin() + static_cast<std::ptrdiff_t>(shared));
    chosen = Json(chosen.begin() + static_cast<std::ptrdiff_t>(shared), chosen.end());
    rejected = Json(rejected.begin() + static_cast<std::ptrdiff_t>(std::min(shared, rejected.size())), rejected.end());
  }
  if (chosen.empty() || rejected.empty()) {
    return Status::invalid_argument(where + "field " + quote(chosen.empty() ? spec.chosen_field : spec.rejected_field) +
                                    " has no turn after the prompt: a pair needs two completions");
  }
  if (chosen == rejected) {
    return Status::invalid_argument(where + "the chosen and rejected completions are identical: the pair teaches nothing");
  }
  // Each side as a conversation of data.chat (roles, contents, a turn to train).
  TAILOR_ASSIGN_OR_RETURN(out.chosen, whole_conversation(obj, spec, prompt, chosen, where + spec.chosen_field + ": "));
  TAILOR_ASSIGN_OR_RETURN(out.rejected,
                          whole_conversation(obj, spec, prompt, rejected, where + spec.rejected_field + ": "));
  out.prompt = prompt_only(out.chosen, prompt.size());
  return Status::ok();
}

// kto's label (data.label_field): true or false, or the numbers 1 and 0 (a
// 0/1 column), as TRL's KTOTrainer reads its "label" column.
Status read_label(const Json& obj, const DataSpec& spec, const std::string& where, DataRecord& record) {
  const auto it = obj.find(spec.label_field);
  if (it == obj.end()) {
    return Status::invalid_argument(where + "missing field " + quote(spec.label_field) +
                                    " (data.label_field: every completion needs its label, true or false)");
  }
  if (it->is_boolean()) {
    record.desirable = it->get<bool>();
    return Status::ok();
  }
  if (it->is_number() && (*it == 0 || *it == 1)) {
    record.desirable = *it == 1;
    return Status::ok();
  }
  return Status::invalid_argument(where + "field " + quote(spec.label_field) +
                                  " must be true or false (or 1 or 0), got " +
                                  (it->is_number() ? it->dump() : std::string(it->type_name())));
}

// A labelled completion (kto with data.label_field) of strings: the
// completion in `chosen`. An empty completion teaches nothing: a bad record.
Status read_labelled_completion(const Json& obj, const DataSpec& spec, const std::string& where, DataRecord& record) {
  if (const auto it = obj.find(spec.completion_field); it != obj.end() && it->is_array()) {
    return Status::invalid_argument(where + "field " + quote(spec.completion_field) +
                                    " is a conversation: set data.chat: messages to read labelled completions as "
                                    "conversations, rendered with the chat template");
  }
  TAILOR_ASSIGN_OR_RETURN(record.prompt, string_field(obj, spec.prompt_field, where));
  TAILOR_ASSIGN_OR_RETURN(record.chosen, string_field(obj, spec.completion_field, where));
  if (record.chosen.empty()) {
    return Status::invalid_argument(where + "field " + quote(spec.completion_field) +
                                    " is empty: a labelled completion needs text");
  }
  return read_label(obj, spec, where, record);
}

// A conversational labelled completion, as TRL reads one: `prompt` a list
// of turns (or a string, a user turn) and the completion the turns after
// it; `out.chosen` the whole conversation, `out.prompt` its prompt.
Status read_labelled_conversation(const Json& obj, const DataSpec& spec, const std::string& where,
                                  PairConversations& out) {
  TAILOR_ASSIGN_OR_RETURN(const Json completion, turns_field(obj, spec.completion_field, where));
  const auto p = obj.find(spec.prompt_field);
  if (p == obj.end()) return Status::invalid_argument(where + missing_field(obj, spec.prompt_field));
  TAILOR_ASSIGN_OR_RETURN(const Json prompt, prompt_turns(*p, spec, where));
  if (completion.empty()) {
    return Status::invalid_argument(where + "field " + quote(spec.completion_field) +
                                    " has no turn: a labelled completion needs one");
  }
  TAILOR_ASSIGN_OR_RETURN(out.chosen,
                          whole_conversation(obj, spec, prompt, completion, where + spec.completion_field + ": "));
  out.prompt = prompt_only(out.chosen, prompt.size());
  return Status::ok();
}

// A preference pair's three strings into `record`. A pair that cannot teach
// anything (an empty completion, the same completion twice) is an error
// like a missing field, so on_bad_record decides.
Status read_preference_pair(const Json& obj, const DataSpec& spec, const std::string& where, DataRecord& record) {
  for (const std::string* name : {&spec.chosen_field, &spec.rejected_field}) {
    const auto it = obj.find(*name);
    if (it != obj.end() && it->is_array()) {
      return Status::invalid_argument(where + "field " + quote(*name) +
                                      " is a conversation: set data.chat: messages to read preference pairs as "
                                      "conversations, rendered with the chat template");
    }
  }
  TAILOR_ASSIGN_OR_RETURN(record.prompt, string_field(obj, spec.prompt_field, where));
  TAILOR_ASSIGN_OR_RETURN(record.chosen, string_field(obj, spec.chosen_field, where));
  TAILOR_ASSIGN_OR_RETURN(record.rejected, string_field(obj, spec.rejected_field, where));
  for (const auto& [name, text] : {std::pair{&spec.chosen_field, record.chosen},
                                   std::pair{&spec.rejected_field, record.rejected}}) {
    if (text.empty()) return Status::invalid_argument(where + "field " + quote(*name) + " is empty: a pair needs two completions");
  }
  if (record.chosen == record.rejected) {
    return Status::invalid_argument(where + "the chosen and rejected completions are identical: the pair teaches "
                                            "nothing");
  }
  return Status::ok();
}

// A reward pair's margin (data.margin_field): a finite JSON number, as
// TRL's RewardTrainer makes a float tensor of its "margin" column.
Status read_margin(const Json& obj, const DataSpec& spec, const std::string& where, DataRecord& record) {
  if (spec.margin_field.empty()) return Status::ok();
  const auto it = obj.find(spec.margin_field);
  if (it == obj.end()) {
    return Status::invalid_argument(where + "missing field " + quote(spec.margin_field) +
                                    " (data.margin_field: every pair needs its margin)");
  }
  if (!it->is_number()) {
    return Status::invalid_argument(where + "field " + quote(spec.margin_field) + " must be a number, got " +
                                    it->type_name());
  }
  record.margin = it->get<double>();
  if (!std::isfinite(record.margin)) {
    return Status::invalid_argument(where + "field " + quote(spec.margin_field) + " is not a finite number");
  }
  return Status::ok();
}

// The record of a parsed JSON value, `where` its place ("path:line" or a
// table's row). A record that cannot be read goes to `skip` when
// data.on_bad_record says skip (and skip is given), else it is the error.
Status deliver_object(const Result<Json>& parsed, std::int64_t number, const std::string& where_text,
                      const DataSpec& spec, const DataRecordFn& fn, const DataSkipFn& skip) {
  DataRecord record;
  record.line = number;
  record.where = where_text;
  std::string conversation;
  PairConversations pair;
  const Status read = [&]() -> Status {
    if (!parsed.is_ok()) return parsed.status();
    const Json& obj = *parsed;
    const std::string where = where_text + ": ";
    if (!obj.is_object()) return Status::invalid_argument(where + "expected a JSON object, got " + obj.type_name());
    if (is_chat(spec) && !spec.preference) {
      TAILOR_ASSIGN_OR_RETURN(conversation, conversation_of(obj, spec, where));
      record.conversation = conversation;
    } else if (is_labelled(spec) && is_chat(spec)) {
      TAILOR_RETURN_IF_ERROR(read_labelled_conversation(obj, spec, where, pair));
      record.prompt = pair.prompt;
      record.chosen = pair.chosen;
      return read_label(obj, spec, where, record);
    } else if (is_labelled(spec)) {
      return read_labelled_completion(obj, spec, where, record);
    } else if (spec.preference && is_chat(spec)) {
      TAILOR_RETURN_IF_ERROR(read_conversation_pair(obj, spec, where, pair));
      record.prompt = pair.prompt;
      record.chosen = pair.chosen;
      record.rejected = pair.rejected;
      return read_margin(obj, spec, where, record);
    } else if (spec.preference) {
      TAILOR_RETURN_IF_ERROR(read_preference_pair(obj, spec, where, record));
      return read_margin(obj, spec, where, record);
    } else if (!spec.prompt_field.empty()) {
      TAILOR_ASSIGN_OR_RETURN(record.prompt, string_field(obj, spec.prompt_field, where));
      TAILOR_ASSIGN_OR_RETURN(record.text, string_field(obj, spec.completion_field, where));
    } else {
      TAILOR_ASSIGN_OR_RETURN(record.text, string_field(obj, spec.field, where));
    }
    return Status::ok();
  }();
  if (!read.is_ok()) {
    if (skip && spec.on_bad_record == OnBadRecord::kSkip) {
      skip(read);
      return Status::ok();
    }
    return read;
  }
  return fn(record);
}

// The record of one JSON value (a line or an array element) at `line`.
Status deliver_json(std::string_view text, std::int64_t line, const std::string& path, const DataSpec& spec,
                    const DataRecordFn& fn, const DataSkipFn& skip) {
  return deliver_object(parse_json(text, path, line), line, path + ":" + std::to_string(line), spec, fn, skip);
}

// Walks a top-level JSON array element by element without building it
// whole: each element's text (and the line it starts on) goes to `element`,
// which parses it alone. Only strings and nesting are tracked here; what is
// not valid JSON inside an element is the element parser's to report. With
// `prefix`, `s` is the start of a larger file: the walk stops, without an
// error, at the element that runs past its end.
template <class Fn>
Status for_each_array_element(std::string_view s, const std::string& path, Fn&& element, bool prefix = false) {
  std::size_t pos = 0;
  std::int64_t line = 1;
  auto skip_space = [&] {
    while (pos < s.size() && is_space(s[pos])) line += s[pos++] == '\n' ? 1 : 0;
  };
  auto at = [&](std::int64_t l) { return path + ":" + std::to_string(l) + ": "; };
  skip_space();
  if (pos == s.size() || s[pos] != '[') return Status::invalid_argument(at(line) + "expected a JSON array");
  ++pos;
  skip_space();
  if (pos < s.size() && s[pos] == ']') {
    ++pos;
  } else {
    for (;;) {
      const std::size_t start = pos;
      const std::int64_t start_line = line;
      int depth = 0;
      bool in_string = false;
      for (; pos < s.size(); ++pos) {
        const char c = s[pos];
        if (c == '\n') ++line;
        if (in_string) {
          if (c == '\\') {
            ++pos;  // an escaped character, whatever it is
          } else if (c == '"') {
            in_string = false;
          }
        } else if (c == '"') {
          in_string = true;
        } else if (c == '{' || c == '[') {
          ++depth;
        } else if (c == '}' || c == ']') {
          if (depth == 0) break;
          --depth;
        } else if (c == ',' && depth == 0) {
          break;
        }
      }
      if (pos >= s.size()) {
        if (prefix) return stop_walk();
        return Status::invalid_argument(at(start_line) + "the JSON array is not closed (no ']' after this element)");
      }
      std::string_view text = s.substr(start, pos - start);
      while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
      TAILOR_RETURN_IF_ERROR(element(text, start_line));
      if (s[pos++] == ']') break;
      skip_space();
      if (prefix && pos == s.size()) return stop_walk();
    }
  }
  skip_space();
  if (pos != s.size()) return Status::invalid_argument(at(line) + "text after the JSON array's closing ']'");
  return Status::ok();
}

// Whether `s` (starting with '[') is one whole JSON array of objects, for
// the hint to a jsonl file that is one.
bool is_json_array(std::string_view s) {
  int objects = 0;
  const Status st = for_each_array_element(s, "", [&](std::string_view text, std::int64_t) {
    if (text.empty() || text.front() != '{') return Status::invalid_argument("");
    return ++objects == 100 ? stop_walk() : Status::ok();
  });
  return (st.is_ok() || is_stop(st)) && objects > 0;
}

Status jsonl_records(std::string_view text, const std::string& path, const DataSpec& spec, const DataRecordFn& fn,
                     const DataSkipFn& skip) {
  return for_each_line(text, [&](std::int64_t number, std::string_view line) -> Status {
    if (trim(line).empty()) return Status::ok();
    return deliver_json(line, number, path, spec, fn, skip);
  });
}

Status text_records(std::string_view text, const std::string& path, const DataRecordFn& fn) {
  std::string paragraph;
  std::int64_t first_line = 0;
  auto flush = [&]() -> Status {
    if (paragraph.empty()) return Status::ok();
    DataRecord r;
    r.line = first_line;
    const std::string where = path + ":" + std::to_string(first_line);
    r.where = where;
    r.text = paragraph;
    Status st = fn(r);
    paragraph.clear();
    return st;
  };
  TAILOR_RETURN_IF_ERROR(for_each_line(text, [&](std::int64_t number, std::string_view line) -> Status {
    if (trim(line).empty()) return flush();
    if (paragraph.empty()) {
      first_line = number;
    } else {
      paragraph += '\n';
    }
    paragraph += line;
    return Status::ok();
  }));
  return flush();
}

}  // namespace

Status for_each_record(std::string_view bytes, const std::string& path, const DataSpec& spec,
                       const DataRecordFn& fn, std::int64_t max_records, const DataSkipFn& skip) {
  if (spec.preference && !has_records_of_fields(spec.format)) {
    return Status::invalid_argument(path + ": preference pairs are read from jsonl, json, parquet or arrow files, not " +
                                    std::string(to_string(spec.format)));
  }
  if (!spec.preference && spec.prompt_field.empty() != spec.completion_field.empty()) {
    return Status::invalid_argument(
        "data: prompt_field and completion_field must be set together (got prompt_field=" +
        quote(spec.prompt_field) + ", completion_field=" + quote(spec.completion_field) + ")");
  }
  if (spec.prompt_field.empty() && spec.field.empty()) return Status::invalid_argument("data: field must not be empty");
  if (is_chat(spec) && !has_records_of_fields(spec.format)) {
    return Status::invalid_argument(path + ": chat data (data.chat: " + to_string(spec.chat) +
                                    ") is read from jsonl, json, parquet or arrow files, not " + to_string(spec.format));
  }
  std::int64_t delivered = 0;
  const DataRecordFn counted = [&](const DataRecord& r) -> Status {
    TAILOR_RETURN_IF_ERROR(fn(r));
    return max_records > 0 && ++delivered >= max_records ? stop_walk() : Status::ok();
  };
  const std::string_view text = drop_utf8_bom(bytes);
  Status st;
  switch (spec.format) {
    case DataFormat::kText:
      st = text_records(text, path, counted);
      break;
    case DataFormat::kJsonl:
      if (first_char(text) == '[' && is_json_array(text)) {
        return Status::invalid_argument(path + ":1: this file is a JSON array, not JSON Lines: convert it with `jq -c '.[]' " +
                                        path + " > " + path + "l`, or set data.format: json");
      }
      st = jsonl_records(text, path, spec, counted, skip);
      break;
    case DataFormat::kJson:
      if (first_char(text) == '[') {
        st = for_each_array_element(text, path, [&](std::string_view element, std::int64_t line) {
          return deliver_json(element, line, path, spec, counted, skip);
        });
      } else {
        st = jsonl_records(text, path, spec, counted, skip);
      }
      break;
    case DataFormat::kTokens:
      return Status::invalid_argument(path + ": a tokens file has ids, not records");
    case DataFormat::kParquet:
    case DataFormat::kArrow:
      return Status::internal(path + ": tables are read by for_each_table_record (dsl/table_records.h)");
  }
  return is_stop(st) ? Status::ok() : st;
}

Status deliver_record_json(std::string_view json, std::int64_t number, const std::string& where,
                           const DataSpec& spec, const DataRecordFn& fn, const DataSkipFn& skip) {
  const auto parse = [&]() -> Result<Json> {
    try {
      return Json::parse(json);
    } catch (const Json::parse_error& e) {
      return Status::invalid_argument(where + ": not valid JSON: " + parse_reason(e));
    }
  };
  return deliver_object(parse(), number, where, spec, fn, skip);
}

namespace {

// Up to `limit` bytes of `fd` from `offset` appended to `out`; the count read
// (short only at the end of the file).
Result<std::size_t> read_at(int fd, std::uint64_t offset, std::size_t limit, std::string& out,
                            const std::string& path) {
  const std::size_t before = out.size();
  out.resize(before + limit);
  std::size_t got = 0;
  while (got < limit) {
    const ssize_t n = ::pread(fd, out.data() + before + got, limit - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      out.resize(before);
      return Status::io_error(path + ": cannot be read: " + std::strerror(errno));
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  out.resize(before + got);
  return got;
}

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a regular file";
}

// Records counted without being parsed, reading the file a chunk at a time:
// lines with content (jsonl, JSON Lines) or paragraphs (text). A count,
// not a check: the bytes are not validated.
Result<std::int64_t> count_line_records(int fd, DataFormat format, const std::string& path) {
  constexpr std::size_t kChunk = 1u << 20;
  std::int64_t n = 0;
  bool line_has_content = false, in_paragraph = false;
  auto end_line = [&] {
    if (format == DataFormat::kText) {
      if (line_has_content && !in_paragraph) ++n;
      in_paragraph = line_has_content;
    } else if (line_has_content) {
      ++n;
    }
    line_has_content = false;
  };
  std::string chunk;
  for (std::uint64_t offset = 0;; offset += chunk.size()) {
    chunk.clear();
    TAILOR_ASSIGN_OR_RETURN(const std::size_t got, read_at(fd, offset, kChunk, chunk, path));
    if (got == 0) break;
    // Line by line with memchr: a line's content is looked for only until
    // its first non-space byte, so the scan runs at memchr's speed.
    for (std::size_t i = 0; i < chunk.size();) {
      const void* found = std::memchr(chunk.data() + i, '\n', chunk.size() - i);
      const std::size_t end = found ? static_cast<std::size_t>(static_cast<const char*>(found) - chunk.data()) : chunk.size();
      for (std::size_t j = i; j < end && !line_has_content; ++j) {
        line_has_content = std::isspace(static_cast<unsigned char>(chunk[j])) == 0;
      }
      if (found == nullptr) break;  // the line goes on in the next chunk
      end_line();
      i = end + 1;
    }
  }
  end_line();
  return n;
}

}  // namespace

Result<DataFileFacts> check_data_file(const std::string& path, const DataSpec& spec) {
  if (is_table(spec.format)) return check_table_data(path, spec);
  DataFileFacts facts;
  facts.path = path;
  facts.format = spec.format;
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return Status::not_found(path + ": does not exist");
    return Status::io_error(path + ": cannot be read: " + std::strerror(errno));
  }
  // Never opened unless regular: opening a FIFO would wait for a writer.
  if (!S_ISREG(st.st_mode)) return Status::invalid_argument(path + ": is " + kind_of(st.st_mode) + ", not a data file");
  const OwnedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) return Status::io_error(path + ": cannot be read: " + std::strerror(errno));
  struct stat opened{};
  if (::fstat(fd.get(), &opened) != 0) return Status::io_error(path + ": cannot be read: " + std::strerror(errno));
  if (!S_ISREG(opened.st_mode)) {  // swapped between stat and open
    return Status::invalid_argument(path + ": is " + kind_of(opened.st_mode) + ", not a data file");
  }
  facts.bytes = static_cast<std::uint64_t>(opened.st_size);
  // One byte more than the limit tells a whole file from a head. The buffer
  // is the file's size where that is less (tailord checks every submission:
  // a 16 MiB buffer each time would make its heap grow), read on past it
  // should the file have grown since fstat.
  std::string head;
  const std::size_t most = kCheckWholeBytes + 1;
  const std::size_t first = static_cast<std::size_t>(std::min<std::uint64_t>(facts.bytes + 1, most));
  TAILOR_ASSIGN_OR_RETURN(std::size_t got, read_at(fd.get(), 0, first, head, path));
  if (got == first && first < most) {
    TAILOR_ASSIGN_OR_RETURN(const std::size_t more, read_at(fd.get(), got, most - got, head, path));
    got += more;
  }
  head.shrink_to_fit();
  if (got == 0) return Status::invalid_argument(path + ": is empty");
  const bool whole = got <= kCheckWholeBytes;
  if (!whole) head.resize(kCheckWholeBytes);
  if (spec.format == DataFormat::kTokens) {
    if (facts.bytes % 4 != 0) {
      return Status::invalid_argument(path + ": size " + std::to_string(facts.bytes) +
                                      " bytes is not a multiple of 4 (expected little-endian int32 ids)");
    }
    facts.records = static_cast<std::int64_t>(facts.bytes / 4);
    const std::size_t ids = head.size() / 4;
    for (std::size_t i = 0; i < ids; ++i) {
      // Only the sign bit matters, in the last byte of a little-endian id.
      if ((static_cast<unsigned char>(head[4 * i + 3]) & 0x80) != 0) {
        return Status::invalid_argument(path + ": token " + std::to_string(i) + " (byte " + std::to_string(4 * i) +
                                        "): negative id");
      }
    }
    facts.checked = static_cast<std::int64_t>(ids);
    facts.all_checked = whole;
    return facts;
  }
  const std::string_view text = drop_utf8_bom(head);
  facts.json_array = spec.format == DataFormat::kJson && first_char(text) == '[';
  std::string_view checked = head;
  if (!whole && !facts.json_array) {
    // Only whole lines: the record cut at the head's end is not checked.
    const auto last = checked.rfind('\n');
    checked = last == std::string_view::npos ? std::string_view() : checked.substr(0, last + 1);
  }
  std::int64_t with_content = 0;
  const DataSkipFn skipped = [&](const Status& why) {
    if (facts.skipped++ == 0) facts.first_skipped = why.message();
  };
  auto seen = [&](const DataRecord& r) {
    ++facts.checked;
    if (!r.prompt.empty() || !r.text.empty() || !r.conversation.empty() || !r.chosen.empty()) ++with_content;
    return Status::ok();
  };
  if (!whole && facts.json_array) {
    const Status walked = for_each_array_element(
        drop_utf8_bom(checked), path,
        [&](std::string_view element, std::int64_t line) {
          TAILOR_RETURN_IF_ERROR(deliver_json(element, line, path, spec, seen, skipped));
          return facts.checked >= kCheckedRecords ? stop_walk() : Status::ok();
        },
        /*prefix=*/true);
    if (!walked.is_ok() && !is_stop(walked)) return walked;
  } else {
    TAILOR_RETURN_IF_ERROR(for_each_record(checked, path, spec, seen, whole ? 0 : kCheckedRecords, skipped));
  }
  if (whole) {
    facts.records = facts.checked;
    facts.all_checked = true;
    if (with_content == 0) {
      return Status::invalid_argument(path + ": no documents (" +
                                      (facts.checked == 0
                                           ? std::string("only blank lines")
                                           : "all " + group_thousands(facts.checked) + " records are empty") +
                                      ")");
    }
  } else if (!facts.json_array && facts.bytes <= kCountBytes) {
    TAILOR_ASSIGN_OR_RETURN(facts.records, count_line_records(fd.get(), spec.format, path));
    facts.all_checked = facts.records == facts.checked;
  }
  return facts;
}

std::string describe(const DataFileFacts& facts) {
  const std::string size = Bytes(static_cast<std::int64_t>(facts.bytes)).to_string();
  if (facts.records < 0) return "records not counted, " + size;
  const bool tokens = facts.format == DataFormat::kTokens;
  const std::string count =
      group_thousands(facts.records) + (tokens ? " token" : " record") + (facts.records == 1 ? "" : "s");
  std::string out = (facts.json_array ? "JSON array of " + count : count) + ", " + size;
  if (facts.skipped > 0) {
    out += "; " + group_thousands(facts.skipped) + " bad record" + (facts.skipped == 1 ? "" : "s") +
           " skipped (data.on_bad_record: skip; first: " + facts.first_skipped + ")";
  }
  return out;
}

}  // namespace tailor::dsl
