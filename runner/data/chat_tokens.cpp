#include "runner/data/chat_tokens.h"

#include <algorithm>

#include "core/text.h"
#include "dsl/chat_template_source.h"

namespace tailor::runner::data {
namespace {

// A turn's text in the marker rendering: letters and digits only, so that
// trimming, stripping and escaping leave it as it is.
std::string marker(std::size_t turn) { return "TailorTurn" + std::to_string(turn) + "Zq"; }
constexpr std::string_view kMarkerStart = "TailorTurn";

// Where each marker landed in the marker rendering: the template's own
// text between them.
struct Skeleton {
  std::vector<std::string> fixed;     // n + 1 pieces of the template's own text
  std::vector<std::size_t> turns;     // the turn of each of the n markers, in order
};

Skeleton split_markers(const std::string& text, std::size_t turns) {
  Skeleton out;
  std::size_t from = 0, pos = 0;
  while ((pos = text.find(kMarkerStart, pos)) != std::string::npos) {
    std::size_t end = pos + kMarkerStart.size(), turn = 0;
    bool digits = false;
    while (end < text.size() && text[end] >= '0' && text[end] <= '9') {
      turn = turn * 10 + static_cast<std::size_t>(text[end++] - '0');
      digits = true;
    }
    if (!digits || text.compare(end, 2, "Zq") != 0 || turn >= turns) {
      ++pos;
      continue;
    }
    out.fixed.push_back(text.substr(from, pos - from));
    out.turns.push_back(turn);
    pos = from = end + 2;
  }
  out.fixed.push_back(text.substr(from));
  return out;
}

std::string_view trim_view(std::string_view s, bool left, bool right) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  if (left) {
    const auto b = s.find_first_not_of(kSpace);
    s.remove_prefix(b == std::string_view::npos ? s.size() : b);
  }
  if (right) {
    const auto e = s.find_last_not_of(kSpace);
    s = s.substr(0, e == std::string_view::npos ? 0 : e + 1);
  }
  return s;
}

// One turn's text in the real rendering, and the template's text after it.
struct TurnText {
  std::size_t begin = 0, end = 0;  // the turn's text
  std::size_t after_end = 0;       // the end of the template's text after it (the next turn's start)
};

std::string turn_name(const ChatJson& messages, std::size_t k) {
  return "turn " + std::to_string(k) + " (" + messages[k].value("role", std::string("?")) + ")";
}

Status unaligned(const ChatJson& messages, std::size_t k, const std::string& why) {
  return Status::invalid_argument(
      "the chat template's output for " + turn_name(messages, k) + " cannot be located (" + why +
      "): the template rewrites that turn's text; use a template with {% generation %} blocks (data.chat_template; "
      "TRL ships such versions of common templates) or data.train_on: all");
}

// Aligns the real rendering with the marker rendering's pieces.
Result<std::vector<TurnText>> align(const std::string& real, const Skeleton& sk, const ChatJson& messages) {
  std::vector<TurnText> out(messages.size(), TurnText{std::string::npos, std::string::npos, std::string::npos});
  if (sk.turns.empty()) return out;  // no turn's text written as it is given
  if (real.compare(0, sk.fixed[0].size(), sk.fixed[0]) != 0) {
    return unaligned(messages, sk.turns[0], "the template writes other text before it when the turns' texts change");
  }
  std::size_t pos = sk.fixed[0].size();
  for (std::size_t j = 0; j < sk.turns.size(); ++j) {
    const std::size_t k = sk.turns[j];
    const std::string& next = sk.fixed[j + 1];
    const bool last = j + 1 == sk.turns.size();
    auto fits = [&](std::size_t end) {
      if (end > real.size() || real.compare(end, next.size(), next) != 0) return false;
      return !last || end + next.size() == real.size();
    };
    std::size_t end = std::string::npos;
    const auto& content = messages[k]["content"];
    if (content.is_string()) {
      const std::string_view c = content.get_ref<const std::string&>();
      // The text as written or as the template trims it, where the
      // template's next text follows it.
      for (const std::string_view v : {c, trim_view(c, true, true), trim_view(c, true, false), trim_view(c, false, true)}) {
        if (real.compare(pos, v.size(), v) == 0 && fits(pos + v.size())) {
          end = pos + v.size();
          break;
        }
      }
    }
    if (end == std::string::npos) {
      if (last) {
        if (real.size() >= pos + next.size() && fits(real.size() - next.size())) end = real.size() - next.size();
      } else if (!next.empty()) {
        end = real.find(next, pos);
      }
    }
    if (end == std::string::npos) return unaligned(messages, k, "the template's text after it is not found");
    if (out[k].begin != std::string::npos) return unaligned(messages, k, "its text is written twice");
    out[k] = TurnText{pos, end, end + next.size()};
    pos = end + next.size();
  }
  return out;
}

// Each turn's text in `rendered` (npos where the template does not write
// it as given), found by rendering `input` again with markers for texts.
Result<std::vector<TurnText>> find_turns(const ChatSetup& setup, const ChatInput& input, const std::string& rendered) {
  const ChatJson& messages = input.messages;
  ChatInput marked = input;
  for (std::size_t k = 0; k < marked.messages.size(); ++k) {
    auto& m = marked.messages[k];
    if (m.contains("content") && m["content"].is_string()) {
      if (m["content"].get_ref<const std::string&>().find(kMarkerStart) != std::string::npos) {
        return Status::invalid_argument(turn_name(messages, k) + " contains \"" + std::string(kMarkerStart) +
                                        "\", which Tailor uses to find turns; use a template with "
                                        "{% generation %} blocks");
      }
      m["content"] = marker(k);
    }
  }
  TAILOR_ASSIGN_OR_RETURN(RenderedChat skeleton_text, setup.chat_template.render(marked));
  return align(rendered, split_markers(skeleton_text.text, messages.size()), messages);
}

// A dsl::DataRecord's conversation as the template's input.
Result<ChatInput> chat_input(const ChatSetup& setup, std::string_view conversation) {
  ChatJson record;
  try {
    record = ChatJson::parse(conversation);
  } catch (const ChatJson::exception& e) {
    return Status::internal(std::string("a conversation record is not JSON: ") + e.what());
  }
  ChatInput input;
  input.messages = std::move(record["messages"]);
  if (record.contains("tools")) input.tools = std::move(record["tools"]);
  input.variables = setup.variables;
  return input;
}

bool is_assistant(const ChatJson& m) { return m.value("role", std::string()) == "assistant"; }

}  // namespace

Result<ChatSetup> load_chat_setup(const dsl::DataSpec& data, const std::string& model_path) {
  TAILOR_ASSIGN_OR_RETURN(dsl::ChatTemplateSource source, dsl::find_chat_template(data, model_path));
  auto parsed = ChatTemplate::parse(source.text);
  if (!parsed.is_ok()) return parsed.status().prefixed(source.origin);
  ChatSetup out{std::move(parsed).value(), std::move(source.text), source.origin, ChatJson::object(), data.train_on,
                data.train_on_eos};
  for (const auto& [name, text] : source.special_tokens) out.variables[name] = text;
  return out;
}

Result<std::string> render_conversation(const ChatSetup& setup, std::string_view conversation,
                                        bool add_generation_prompt) {
  TAILOR_ASSIGN_OR_RETURN(ChatInput input, chat_input(setup, conversation));
  input.add_generation_prompt = add_generation_prompt;
  TAILOR_ASSIGN_OR_RETURN(RenderedChat rendered, setup.chat_template.render(input));
  return std::move(rendered.text);
}

Result<ChatExample> tokenize_chat(const ChatSetup& setup, const Tokenizer& tok, std::string_view conversation) {
  TAILOR_ASSIGN_OR_RETURN(const ChatInput input, chat_input(setup, conversation));
  TAILOR_ASSIGN_OR_RETURN(RenderedChat real, setup.chat_template.render(input));
  ChatExample out;
  out.text = std::move(real.text);
  const ChatJson& messages = input.messages;

  // Trained bytes, and for assistant turns the bytes after them in which
  // the end-of-turn token is looked for.
  struct Trained {
    std::size_t begin, end;
    std::size_t eos_search_end;  // == end: no end-of-turn added
  };
  std::vector<Trained> spans;
  if (setup.train_on == dsl::TrainOn::kAll) {
    spans.push_back({0, out.text.size(), out.text.size()});
  } else if (!real.generation_spans.empty()) {
    out.generation_markers = true;
    for (const auto& g : real.generation_spans) {
      if (g.end_bytes > g.begin_bytes) spans.push_back({g.begin_bytes, g.end_bytes, g.end_bytes});
    }
    if (setup.train_on == dsl::TrainOn::kLastAssistant && !spans.empty()) spans.erase(spans.begin(), spans.end() - 1);
  } else {
    TAILOR_ASSIGN_OR_RETURN(const std::vector<TurnText> turns, find_turns(setup, input, out.text));
    std::vector<std::size_t> assistants;
    for (std::size_t k = 0; k < messages.size(); ++k) {
      if (is_assistant(messages[k])) assistants.push_back(k);
    }
    if (setup.train_on == dsl::TrainOn::kLastAssistant && !assistants.empty()) {
      assistants.erase(assistants.begin(), assistants.end() - 1);
    }
    for (std::size_t i = 0; i < assistants.size(); ++i) {
      const std::size_t k = assistants[i];
      const TurnText& t = turns[k];
      if (t.begin == std::string::npos) {
        const bool text = messages[k].contains("content") && messages[k]["content"].is_string();
        return Status::invalid_argument(
            turn_name(messages, k) + (text ? ": the chat template does not write this turn's text as it is given"
                                           : ": an assistant turn without text (tool calls only, or a list of parts)") +
            ", so what to train cannot be found; use a template with {% generation %} blocks or data.train_on: all");
      }
      const bool eos = setup.train_on_eos == dsl::TrainOnEos::kTurn ||
                       (setup.train_on_eos == dsl::TrainOnEos::kLast && i + 1 == assistants.size());
      spans.push_back({t.begin, t.end, eos ? t.after_end : t.end});
    }
  }

  TAILOR_ASSIGN_OR_RETURN(EncodedText encoded, tok.encode_with_offsets(out.text));
  out.ids = std::move(encoded.ids);
  out.trained.assign(out.ids.size(), 0);
  const auto& offsets = encoded.offsets;
  for (Trained s : spans) {
    std::size_t end = s.end;
    if (s.eos_search_end > s.end) {
      // The first special token the template writes after the turn's text.
      for (std::size_t i = 0; i < offsets.size(); ++i) {
        if (offsets[i].first >= s.end && offsets[i].first < s.eos_search_end && tok.is_special(out.ids[i])) {
          end = offsets[i].second;
          break;
        }
      }
      if (end == s.end) ++out.turns_without_eos;
    }
    if (end <= s.begin) continue;
    for (std::size_t i = 0; i < offsets.size(); ++i) {
      if (offsets[i].first < end && offsets[i].second > s.begin) out.trained[i] = 1;
    }
    out.trained_text.emplace_back(s.begin, end);
  }
  if (!out.trained.empty()) out.trained[0] = 0;  // nothing predicts the first token
  if (std::find(out.trained.begin(), out.trained.end(), 1) == out.trained.end()) {
    return Status::invalid_argument(out.generation_markers
                                        ? "the chat template's {% generation %} blocks wrap no text of this conversation"
                                        : "no token of this conversation is trained");
  }
  return out;
}

Result<std::vector<std::pair<std::size_t, std::size_t>>> locate_turn_texts(const ChatSetup& setup,
                                                                          std::string_view conversation,
                                                                          const std::string& rendered) {
  TAILOR_ASSIGN_OR_RETURN(const ChatInput input, chat_input(setup, conversation));
  TAILOR_ASSIGN_OR_RETURN(const std::vector<TurnText> turns, find_turns(setup, input, rendered));
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (const TurnText& t : turns) out.emplace_back(t.begin, t.end);
  return out;
}

}  // namespace tailor::runner::data
