#include "runner/data/prompt_completion.h"

#include <algorithm>
#include <string>

namespace tailor::runner::data {

PromptCompletion encode_prompt_completion(const Tokenizer& tok, std::string_view prompt, std::string_view completion) {
  PromptCompletion out;
  out.ids = tok.encode(std::string(prompt) + std::string(completion));
  const std::vector<std::int32_t> alone = tok.encode(prompt);
  const auto ends = std::mismatch(alone.begin(), alone.end(), out.ids.begin(), out.ids.end()).first;
  out.prompt_tokens = static_cast<std::size_t>(ends - alone.begin());
  out.prompt_alone = alone.size();
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
