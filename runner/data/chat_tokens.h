// Conversations as training tokens: each rendered whole with the job's chat
// template (chat_template.h), encoded whole (so ids equal transformers'
// apply_chat_template(tokenize=True)), and the trained tokens found on that
// one rendering, never by diffing renders of growing prefixes:
//  - a template with {% generation %} blocks trains what they wrap (as
//    transformers' return_assistant_tokens_mask marks it);
//  - otherwise the conversation is rendered a second time with each turn's
//    text replaced by a marker; the text between markers is the template's
//    own, and aligning it with the real rendering finds each turn's text.
//    An assistant turn trains its text, and with data.train_on_eos the
//    template's text after it up to and including the first special token
//    (<|im_end|>, <|eot_id|>, </s>: the model learns to stop), tool calls
//    written before that token included.
// Characters map to tokens through the tokenizer's offsets: a token is
// trained when any byte of it is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "dsl/job_spec.h"
#include "runner/data/chat_template.h"
#include "runner/data/tokenizer.h"

namespace tailor::runner::data {

struct ChatSetup {
  ChatTemplate chat_template;
  std::string template_text;  // the template's source (token cache key, export)
  std::string origin;         // where it was read from (dsl::find_chat_template)
  ChatJson variables;         // the special tokens' strings the template sees (bos_token, eos_token, ...)
  dsl::TrainOn train_on = dsl::TrainOn::kAssistant;
  dsl::TrainOnEos train_on_eos = dsl::TrainOnEos::kTurn;
};

// The template of dsl::find_chat_template for `data` and the model folder
// (empty: none), parsed. Errors name where the template came from: a
// syntax error as "<file>: chat template 12:5: ...".
Result<ChatSetup> load_chat_setup(const dsl::DataSpec& data, const std::string& model_path);

struct ChatExample {
  std::string text;                    // the rendered conversation
  std::vector<std::int32_t> ids;       // its tokens, no BOS/EOS added (the template writes them)
  std::vector<std::uint8_t> trained;   // 1 where a token is a target; never the first
  // The trained bytes of `text`, [begin, end), in order.
  std::vector<std::pair<std::size_t, std::size_t>> trained_text;
  bool generation_markers = false;     // the template's {% generation %} blocks said what is trained
  // Trained turns after which data.train_on_eos wanted an end-of-turn token
  // and the template wrote no special token (the model would not learn to
  // stop there): `tailor data preview` warns.
  std::int64_t turns_without_eos = 0;
};

// `conversation` is a dsl::DataRecord's: {"messages": [...], "tools": ...}.
// InvalidArgument when the template raises or its output cannot be aligned
// (saying which turn, and that a template with {% generation %} blocks or
// train_on: all avoids it), when an assistant turn to train has no text,
// or when nothing is trained; the tokenizer's encode_with_offsets error.
Result<ChatExample> tokenize_chat(const ChatSetup& setup, const Tokenizer& tok, std::string_view conversation);

// `conversation` (a dsl::DataRecord's) rendered with the template, with
// the generation prompt after it when asked (a preference pair's prompt):
// the template's errors.
Result<std::string> render_conversation(const ChatSetup& setup, std::string_view conversation,
                                        bool add_generation_prompt);

// Each turn's text in `rendered` (tokenize_chat's text of `conversation`)
// as [begin, end) bytes, {npos, npos} for a turn the template does not
// write as given: for counting tokens per role. tokenize_chat's alignment
// errors.
Result<std::vector<std::pair<std::size_t, std::size_t>>> locate_turn_texts(const ChatSetup& setup,
                                                                          std::string_view conversation,
                                                                          const std::string& rendered);

}  // namespace tailor::runner::data
