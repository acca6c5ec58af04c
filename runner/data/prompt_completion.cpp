#include "runner/data/prompt_completion.h"

#include <algorithm>
#include <string>

namespace tailor::runner::data {

PromptCompletion encode_prompt_completion(const Tokenizer& tok, std::string_view prompt, std::string_view completion) {
  return encode_prompt_completion(tok, tok.encode(prompt), prompt, completion);
}

PromptCompletion encode_prompt_completion(const Tokenizer& tok, const std::vector<std::int32_t>& prompt_ids,
                                          std::string_view prompt, std::string_view completion) {
  PromptCompletion out;
  out.ids = tok.encode(std::string(prompt) + std::string(completion));
  const auto ends = std::mismatch(prompt_ids.begin(), prompt_ids.end(), out.ids.begin(), out.ids.end()).first;
  out.prompt_tokens = static_cast<std::size_t>(ends - prompt_ids.begin());
  out.prompt_alone = prompt_ids.size();
  return out;
}

std::size_t byte_of_id(const Tokenizer& tok, std::string_view prompt, std::string_view completion,
                       const PromptCompletion& pc, std::size_t k) {
  // The prompt's own ids spell the prompt.
  if (k == pc.prompt_alone || k >= pc.ids.size()) return prompt.size();
  const auto offsets = tok.encode_with_offsets(std::string(prompt) + std::string(completion));
  if (!offsets.is_ok() || offsets->offsets.size() != pc.ids.size()) return prompt.size();
  return std::min<std::size_t>(offsets->offsets[k].first, prompt.size());
}

}  // namespace tailor::runner::data
