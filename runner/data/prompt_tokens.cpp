#include "runner/data/prompt_tokens.h"

namespace tailor::runner::data {

std::vector<std::int32_t> text_prompt_ids(const Tokenizer& tok, const std::string& text) {
  std::vector<std::int32_t> ids;
  if (tok.bos_id() >= 0) ids.push_back(tok.bos_id());
  const auto body = tok.encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

Result<std::vector<std::int32_t>> conversation_prompt_ids(const ChatSetup& chat, const Tokenizer& tok,
                                                          const std::string& conversation) {
  TAILOR_ASSIGN_OR_RETURN(const std::string text,
                          render_conversation(chat, conversation, /*add_generation_prompt=*/true));
  return tok.encode(text);
}

Result<std::vector<std::int32_t>> user_turn_prompt_ids(const ChatSetup& chat, const Tokenizer& tok,
                                                       const std::string& text) {
  ChatJson conversation = {{"messages", ChatJson::array({{{"role", "user"}, {"content", text}}})}};
  return conversation_prompt_ids(chat, tok, conversation.dump());
}

std::optional<std::int32_t> template_end_of_turn(const ChatSetup& chat, const Tokenizer& tok) {
  const std::string reply = "Tailor end-of-turn probe";
  const ChatJson conversation = {{"messages", ChatJson::array({{{"role", "user"}, {"content", "Hello"}},
                                                               {{"role", "assistant"}, {"content", reply}}})}};
  auto text = render_conversation(chat, conversation.dump(), /*add_generation_prompt=*/false);
  if (!text.is_ok()) return std::nullopt;
  const std::size_t at = text->rfind(reply);
  if (at == std::string::npos) return std::nullopt;
  auto encoded = tok.encode_with_offsets(*text);
  if (!encoded.is_ok()) return std::nullopt;
  for (std::size_t i = 0; i < encoded->ids.size(); ++i) {
    if (encoded->offsets[i].first < at + reply.size()) continue;
    if (tok.is_special(encoded->ids[i])) return encoded->ids[i];
  }
  return std::nullopt;
}

}  // namespace tailor::runner::data
