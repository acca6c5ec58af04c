// A prompt and its completion as one row's tokens, as TRL's SFTTrainer and
// DPOTrainer tokenize a prompt-completion record: the two texts encoded
// together, the completion starting where those ids leave the prompt's own.
// Encoded apart, a SentencePiece-style tokenizer (Llama 2, Mistral) would
// put its word-start "▁" before a completion that starts mid-line ("4"
// after "2+2=", "Yes." after "Answer:\n"), and the model would learn a
// space that the text does not have.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "runner/data/tokenizer.h"

namespace tailor::runner::data {

struct PromptCompletion {
  std::vector<std::int32_t> ids;  // encode(prompt + completion): no BOS or EOS
  std::size_t prompt_tokens = 0;  // the leading ids it shares with encode(prompt): untrained
  std::size_t prompt_alone = 0;   // encode(prompt)'s length
};

// With a tokenizer that merges across the boundary ("on" + "the" as "o",
// "nt", "he"), the completion starts at the merged token, as TRL's does.
PromptCompletion encode_prompt_completion(const Tokenizer& tok, std::string_view prompt, std::string_view completion);
// The same with encode(prompt) given, for completions that share a prompt
// (a preference pair's two rows): the prompt is encoded once.
PromptCompletion encode_prompt_completion(const Tokenizer& tok, const std::vector<std::int32_t>& prompt_ids,
                                          std::string_view prompt, std::string_view completion);

// Where `pc`'s id `k` (at most prompt_tokens) starts in prompt + completion,
// in bytes: the prompt's end when the ids before it are the prompt's own.
std::size_t byte_of_id(const Tokenizer& tok, std::string_view prompt, std::string_view completion,
                       const PromptCompletion& pc, std::size_t k);

}  // namespace tailor::runner::data
