#include "runner/data/ollama_template.h"

#include <cstddef>
#include <utility>

namespace tailor::runner::data {
namespace {

// The text a chat template writes around each role's message.
struct Layout {
  // Written before the first message unless that is a system message: BOS,
  // a default system turn (Qwen 2.5's "You are Qwen..."), a date header.
  std::string preamble;
  std::string system_open, system_close;  // a system turn of its own
  // The system text inside the first user turn instead (Llama 2's
  // <<SYS>> block, Gemma 3's blank line).
  bool fold_system = false;
  bool system_refused = false;  // the template raises on a system message
  std::string fold_open, fold_close;
  std::string user_open, user_close;
  std::string assistant_open, assistant_close;
  std::string assistant_open_last;  // opening the conversation's last message, a reply Ollama continues
  std::string generation;           // after the last message when it is not the assistant's
  // The BOS the chat template starts with is llama.cpp's to write.
  bool strip_bos = false;
  std::string bos;
};

struct Message {
  std::string role, content;
};

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Status refuse(const std::string& why) {
  return Status::invalid_argument("the chat template has no Ollama template: " + why);
}

ChatJson to_json(const std::vector<Message>& messages) {
  ChatJson out = ChatJson::array();
  for (const Message& m : messages)
    out.push_back({{"role", m.role}, {"content", m.content}});
  return out;
}

Result<std::string> render(const ChatTemplate& chat, const ChatJson& variables, const std::vector<Message>& messages,
                           bool generation_prompt) {
  ChatInput in;
  in.messages = to_json(messages);
  in.add_generation_prompt = generation_prompt;
  in.variables = variables;
  TAILOR_ASSIGN_OR_RETURN(RenderedChat out, chat.render(in));
  return std::move(out.text);
}

// `text` without the BOS it starts with, where llama.cpp writes that BOS.
std::string without_bos(const Layout& l, const std::string& text) {
  return l.strip_bos && starts_with(text, l.bos) ? text.substr(l.bos.size()) : text;
}

// Whether a user turn's opening carries a BOS of its own (Llama 2 writes
// one per turn), so the Go template leaves out only the first.
bool user_bos_per_turn(const Layout& l) { return l.strip_bos && l.preamble.empty() && starts_with(l.user_open, l.bos); }

// What the Go template of write_go() writes for `messages`, in C++: the
// rendering the checks compare with the chat template's. Ollama asks for
// generation after a user turn and continues an assistant turn that ends
// the conversation.
std::string render_layout(const Layout& l, const std::vector<Message>& messages) {
  std::string out;
  const bool system_first = !messages.empty() && messages.front().role == "system";
  if (!messages.empty() && (!system_first || l.fold_system)) out += without_bos(l, l.preamble);
  std::string system;
  bool first = true;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const Message& m = messages[i];
    const bool last = i + 1 == messages.size();
    if (m.role == "system") {
      if (l.fold_system) {
        system = m.content;
      } else {
        out += without_bos(l, l.system_open) + m.content + l.system_close;
      }
    } else if (m.role == "user") {
      out += first && user_bos_per_turn(l) ? l.user_open.substr(l.bos.size()) : l.user_open;
      if (!system.empty()) {
        out += l.fold_open + system + l.fold_close;
        system.clear();
      }
      out += m.content + l.user_close;
      if (last) out += l.generation;
      first = false;
    } else if (m.role == "assistant") {
      out += (last ? l.assistant_open_last : l.assistant_open) + m.content;
      if (!last) out += l.assistant_close;
      first = false;
    }
  }
  return out;
}

// Literal text in a Go template: "{{" is the one sequence Go reads, and a
// "{" that ends the text would make one with the action written after it.
std::string go_literal(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, 2, "{{") == 0) {
      out += "{{ \"{{\" }}";
      ++i;
    } else if (text[i] == '{' && i + 1 == text.size()) {
      out += "{{ \"{\" }}";
    } else {
      out += text[i];
    }
  }
  return out;
}

// render_layout() as Go. Each literal is followed by an action without a
// "-" (which would trim the literal's trailing newline); a line break of the
// template's own comes after an action, before a "{{-" that removes it.
std::string write_go(const Layout& l) {
  const std::string preamble = go_literal(without_bos(l, l.preamble));
  const bool per_turn_bos = user_bos_per_turn(l);
  std::string t;
  if (l.fold_system) t += "{{- $system := \"\" }}\n";
  if (per_turn_bos) t += "{{- $first := true }}\n";
  t += "{{- range $i, $_ := .Messages }}\n";
  t += "{{- $last := eq (len (slice $.Messages $i)) 1 }}\n";
  if (!preamble.empty()) {
    t += l.fold_system ? "{{- if eq $i 0 }}" : "{{- if and (eq $i 0) (ne .Role \"system\") }}";
    t += preamble + "{{ end }}\n";
  }
  if (l.fold_system) {
    t += "{{- if eq .Role \"system\" }}{{ $system = .Content }}{{ end }}\n";
  } else {
    t += "{{- if eq .Role \"system\" }}" + go_literal(without_bos(l, l.system_open)) + "{{ .Content }}" +
         go_literal(l.system_close) + "{{ end }}\n";
  }
  t += "{{- if eq .Role \"user\" }}";
  if (per_turn_bos) {
    t += "{{ if not $first }}" + go_literal(l.bos) + "{{ end }}" + go_literal(l.user_open.substr(l.bos.size()));
  } else {
    t += go_literal(l.user_open);
  }
  if (l.fold_system) {
    t += "{{ if $system }}" + go_literal(l.fold_open) + "{{ $system }}" + go_literal(l.fold_close) +
         "{{ $system = \"\" }}{{ end }}";
  }
  t += "{{ .Content }}" + go_literal(l.user_close);
  if (!l.generation.empty()) t += "{{ if $last }}" + go_literal(l.generation) + "{{ end }}";
  if (per_turn_bos) t += "{{ $first = false }}";
  t += "{{ end }}\n";
  t += "{{- if eq .Role \"assistant\" }}";
  if (l.assistant_open_last == l.assistant_open) {
    t += go_literal(l.assistant_open);
  } else {
    t += "{{ if $last }}" + go_literal(l.assistant_open_last) + "{{ else }}" + go_literal(l.assistant_open) +
         "{{ end }}";
  }
  t += "{{ .Content }}";
  if (!l.assistant_close.empty()) t += "{{ if not $last }}" + go_literal(l.assistant_close) + "{{ end }}";
  if (per_turn_bos) t += "{{ $first = false }}";
  t += "{{ end }}\n";
  t += "{{- end }}";
  return t;
}

std::string trimmed(const std::string& s) {
  const std::size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// The one place `marker` sits in `text` at or after `from`; npos when it is
// missing or written twice.
std::size_t find_once(const std::string& text, const std::string& marker, std::size_t from = 0) {
  const std::size_t at = text.find(marker, from);
  if (at == std::string::npos || text.find(marker, at + 1) != std::string::npos) return std::string::npos;
  return at;
}

// The layout, from renderings of marker conversations.
Result<Layout> derive(const ChatTemplate& chat, const OllamaTemplateOptions& o) {
  const std::string user1 = "TailorUserOne", assistant1 = "TailorAssistantOne", user2 = "TailorUserTwo",
                    system1 = "TailorSystemOne";
  auto at = [&](const std::vector<Message>& m, bool gen) -> Result<std::string> {
    auto r = render(chat, o.variables, m, gen);
    if (!r.is_ok()) return refuse("it raises on a plain conversation: " + r.status().message());
    return r;
  };
  Layout l;
  l.bos = o.bos;
  // Some templates end a conversation rendered without the generation
  // prompt with EOS (Phi-3.5): a trailer Ollama, which always asks for one
  // or continues the last turn, never writes. Cut from every rendering.
  std::string trailer;
  TAILOR_ASSIGN_OR_RETURN(std::string one, at({{"user", user1}}, false));
  TAILOR_ASSIGN_OR_RETURN(const std::string asked, at({{"user", user1}}, true));
  if (!starts_with(asked, one)) {
    const std::string eos = o.variables.value("eos_token", ChatJson("")).is_string()
                                ? o.variables.value("eos_token", ChatJson("")).get<std::string>()
                                : "";
    if (eos.empty() || !ends_with(one, eos) || !starts_with(asked, one.substr(0, one.size() - eos.size()))) {
      return refuse("its generation prompt is not written after the conversation");
    }
    trailer = eos;
    one.resize(one.size() - eos.size());
  }
  auto conversation = [&](const std::vector<Message>& m) -> Result<std::string> {
    TAILOR_ASSIGN_OR_RETURN(std::string text, at(m, false));
    if (!ends_with(text, trailer)) return refuse("it ends a conversation otherwise than with " + trailer);
    text.resize(text.size() - trailer.size());
    return text;
  };
  const std::size_t u = find_once(one, user1);
  if (u == std::string::npos) return refuse("it does not write a user's message once, as given");
  const std::string head = one.substr(0, u);
  l.user_close = one.substr(u + user1.size());

  l.generation = asked.substr(one.size());

  // A reply that ends the conversation: Qwen 3 writes an empty thinking
  // block into the turns after the last user message only.
  TAILOR_ASSIGN_OR_RETURN(const std::string two, conversation({{"user", user1}, {"assistant", assistant1}}));
  if (!starts_with(two, one)) return refuse("an assistant's reply changes what it wrote before the reply");
  const std::string reply = two.substr(one.size());
  const std::size_t a = find_once(reply, assistant1);
  if (a == std::string::npos) return refuse("it does not write an assistant's message once, as given");
  l.assistant_open_last = reply.substr(0, a);
  l.assistant_close = reply.substr(a + assistant1.size());

  // The same reply followed by a user turn.
  TAILOR_ASSIGN_OR_RETURN(const std::string three,
                          conversation({{"user", user1}, {"assistant", assistant1}, {"user", user2}}));
  if (!starts_with(three, one)) return refuse("a reply changes what it wrote before the reply");
  const std::string next = three.substr(one.size());
  const std::size_t a2 = find_once(next, assistant1);
  const std::size_t u2 = a2 == std::string::npos ? a2 : find_once(next, user2, a2);
  if (u2 == std::string::npos || next.substr(u2 + user2.size()) != l.user_close) {
    return refuse("it writes a second user turn otherwise than the first");
  }
  l.assistant_open = next.substr(0, a2);
  const std::string closing = next.substr(a2 + assistant1.size(), u2 - a2 - assistant1.size());
  if (!starts_with(closing, l.assistant_close)) {
    return refuse("it closes a reply otherwise when the conversation goes on");
  }
  const std::string user_open = closing.substr(l.assistant_close.size());
  l.user_open = user_open;
  if (!ends_with(head, l.user_open)) return refuse("it opens the first user turn otherwise than the next ones");
  l.preamble = head.substr(0, head.size() - l.user_open.size());

  auto with_system = render(chat, o.variables, {{"system", system1}, {"user", user1}}, false);
  if (with_system.is_ok()) {
    if (!ends_with(*with_system, trailer)) return refuse("it ends a conversation otherwise than with " + trailer);
    with_system->resize(with_system->size() - trailer.size());
  }
  if (!with_system.is_ok()) {
    // Gemma 2 refuses system messages; Gemma 3, its successor, writes one at
    // the head of the first user turn with a blank line after it.
    l.system_refused = true;
    l.fold_system = true;
    l.fold_close = "\n\n";
  } else {
    const std::string& text = *with_system;
    const std::size_t s = find_once(text, system1);
    const std::size_t su = s == std::string::npos ? s : find_once(text, user1, s);
    if (su == std::string::npos || text.substr(su + user1.size()) != l.user_close) {
      return refuse("it does not write a system message once, before the user's, as given");
    }
    const std::string before = text.substr(0, s), between = text.substr(s + system1.size(), su - s - system1.size());
    if (ends_with(between, l.user_open)) {
      l.system_open = before;
      l.system_close = between.substr(0, between.size() - l.user_open.size());
    } else if (before.size() >= l.preamble.size() + l.user_open.size() && starts_with(before, l.preamble) &&
               before.compare(l.preamble.size(), l.user_open.size(), l.user_open) == 0) {
      l.fold_system = true;
      l.fold_open = before.substr(l.preamble.size() + l.user_open.size());
      l.fold_close = between;
    } else {
      return refuse("it writes a system message neither as a turn of its own nor at the head of the first user turn");
    }
  }
  l.strip_bos = o.add_bos && !o.bos.empty() && starts_with(one, o.bos);
  return l;
}

struct Check {
  std::vector<Message> messages;
  bool continued = false;  // ends on an assistant turn that Ollama continues
};

// Conversations the layout must render as the chat template does.
std::vector<Check> checks(const Layout& l) {
  // Text a template could rewrite: blank lines, indentation, quotes,
  // braces, tags, accents.
  const Message system{"system", "You are a helpful assistant.\n\nAnswer briefly."};
  const Message u1{"user", "Hello! How are you?"}, a1{"assistant", "Fine, thanks.\n\n  And you? \"ok\""},
      u2{"user", "Name {three} <colours>."}, a2{"assistant", "Red, green and blue: été, 色."},
      u3{"user", "Why is the sky blue?\n\n\nTell me."};
  std::vector<Check> out = {{{u1}}, {{u1, a1, u2}}, {{u1, a1, u2, a2, u3}}, {{u1, a1}, true}};
  if (!l.system_refused) {
    out.push_back({{system, u1}});
    out.push_back({{system, u1, a1, u2}});
    out.push_back({{system, u1, a1}, true});
  }
  return out;
}

// An excerpt on one line: line breaks and tabs as \n and \t.
std::string visible(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out += c;
    }
  }
  return out;
}

std::string describe(const std::vector<Message>& messages) {
  std::string out;
  for (const Message& m : messages)
    out += (out.empty() ? "" : ", ") + m.role;
  return out;
}

Status check_layout(const ChatTemplate& chat, const OllamaTemplateOptions& o, const Layout& l) {
  for (const Check& c : checks(l)) {
    auto text = render(chat, o.variables, c.messages, !c.continued);
    if (!text.is_ok())
      return refuse("it raises on a conversation of " + describe(c.messages) + ": " + text.status().message());
    std::string want = without_bos(l, *text);
    if (c.continued) {
      // Ollama leaves a last assistant turn open; the chat template closes
      // it. Compared up to the end of that turn's text.
      const std::size_t end = want.rfind(c.messages.back().content);
      if (end == std::string::npos) return refuse("it does not write the last assistant message as given");
      want.resize(end + c.messages.back().content.size());
    }
    const std::string got = render_layout(l, c.messages);
    if (got != want) {
      std::size_t d = 0;
      while (d < got.size() && d < want.size() && got[d] == want[d])
        ++d;
      return refuse("a conversation of " + describe(c.messages) +
                    " renders otherwise than a per-role layout writes it (from byte " + std::to_string(d) + ": \"" +
                    visible(want.substr(d, 40)) + "\" against \"" + visible(got.substr(d, 40)) + "\")");
    }
  }
  return Status::ok();
}

}  // namespace

Result<OllamaTemplate> ollama_template(const ChatTemplate& chat, const OllamaTemplateOptions& options) {
  TAILOR_ASSIGN_OR_RETURN(Layout l, derive(chat, options));
  TAILOR_RETURN_IF_ERROR(check_layout(chat, options, l));
  OllamaTemplate out;
  out.text = write_go(l);
  for (const std::string& stop : {trimmed(l.assistant_close), trimmed(without_bos(l, l.user_open))}) {
    if (!stop.empty() && stop != trimmed(l.bos)) out.stops.push_back(stop);
  }
  if (l.system_refused) {
    out.notes.push_back(
        "the chat template refuses a system message; the Ollama template writes one at the head of the first user "
        "turn, followed by a blank line (as Gemma 3's template does)");
  }
  const std::string padded = "  Tailor padded message  ";
  auto spaced = render(chat, options.variables, {{"user", padded}}, false);
  if (spaced.is_ok() && spaced->find(padded) == std::string::npos) {
    out.notes.push_back(
        "the chat template trims each message's text, which a Go template cannot: a message that begins or ends "
        "with spaces or line breaks is written with them");
  }
  out.notes.push_back(
      "system, user and assistant messages are written as training wrote them; tool calls, tool results and a "
      "system message after the first turn are not covered");
  return out;
}

}  // namespace tailor::runner::data
