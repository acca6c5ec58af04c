// A chat template as Ollama's TEMPLATE: a Go text/template over .Messages
// that writes what the chat template writes, for a Modelfile beside a GGUF
// export. Ollama cannot run Jinja, so the template is not translated
// statement by statement: it is rendered on marker conversations, cut into
// the text it writes around each role's message (a per-role layout: what
// opens and closes a system, user and assistant turn, the generation
// prompt, a default system turn), and that layout is written as Go. The
// layout is then rendered on real conversations (with and without a system
// message, one to three turns, ending on an open assistant turn) and must
// equal the chat template's rendering byte for byte, or the template is
// refused with the conversation that differs.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "runner/data/chat_template.h"

namespace tailor::runner::data {

struct OllamaTemplateOptions {
  ChatJson variables = ChatJson::object();  // bos_token, eos_token...: as the runner renders the template
  std::string bos;                          // the BOS token's text
  // llama.cpp writes BOS before the prompt (the GGUF's add_bos_token), so
  // the Go template leaves out the one the chat template starts with.
  bool add_bos = false;
};

struct OllamaTemplate {
  std::string text;                // the Go template
  std::vector<std::string> stops;  // the end of an assistant turn, the start of a user turn (PARAMETER stop)
  // Where Ollama's rendering can differ from the chat template's (messages
  // the layout does not cover), in words.
  std::vector<std::string> notes;
};

// InvalidArgument, saying why, when the template is not a per-role layout
// (it raises on a plain conversation, writes a turn's text otherwise than
// given, rewrites earlier turns as the conversation grows, or renders one
// of the checked conversations otherwise than the layout does).
Result<OllamaTemplate> ollama_template(const ChatTemplate& chat, const OllamaTemplateOptions& options);

}  // namespace tailor::runner::data
