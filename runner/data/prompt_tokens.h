// Prompts for generation as token ids, framed as training framed its data:
// plain text after the tokenizer's BOS, or a conversation rendered with the
// chat template and its generation prompt, encoded whole (as transformers'
// apply_chat_template(add_generation_prompt=True) does). And the token the
// template ends an assistant turn with, at which generation stops.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "runner/data/chat_tokens.h"
#include "runner/data/tokenizer.h"

namespace tailor::runner::data {

std::vector<std::int32_t> text_prompt_ids(const Tokenizer& tok, const std::string& text);

// `conversation`: {"messages": [...], "tools": ...} as a chat data record.
// The template's errors.
Result<std::vector<std::int32_t>> conversation_prompt_ids(const ChatSetup& chat, const Tokenizer& tok,
                                                          const std::string& conversation);

// `text` as one user turn.
Result<std::vector<std::int32_t>> user_turn_prompt_ids(const ChatSetup& chat, const Tokenizer& tok,
                                                       const std::string& text);

// The first special token the template writes after an assistant turn's
// text (<|im_end|>, <|eot_id|>, <end_of_turn>), found on a rendering of a
// two-turn conversation; nullopt when it writes none (or raises on it).
std::optional<std::int32_t> template_end_of_turn(const ChatSetup& chat, const Tokenizer& tok);

}  // namespace tailor::runner::data
