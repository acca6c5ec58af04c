// Text generation with a CausalLM over a KV cache (model.h): the prompt in
// one forward, then one token per forward, each chosen greedily or sampled
// (temperature, then top-k, then top-p, as transformers' warpers apply
// them) from a seeded generator; stops at a stop id or the length limit.
// One sequence at a time (batch 1). Adapters apply through the model's
// projection hook, unmerged.
// Not here: beam search, repetition penalties, speculative decoding.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "runner/torch/model.h"

namespace tailor::runner {

struct SamplingOptions {
  std::int64_t max_new_tokens = 256;  // >= 1
  double temperature = 0;             // 0: greedy (argmax); > 0: logits / temperature, sampled
  double top_p = 1.0;                 // (0, 1]: sample from the smallest set of tokens whose probability reaches it
  std::int64_t top_k = 0;             // 0: every token; else the k most likely
  std::uint64_t seed = 0;             // the sampler's generator (same seed, same tokens on the same device)
  std::vector<std::int32_t> stop_ids; // generation ends after producing one of these (it is kept)
  // transformers' RepetitionPenaltyLogitsProcessor (Keskar et al. 2019,
  // CTRL, Eq. 3 as transformers applies it): each token of the prompt or
  // generated so far has its logit divided by it where positive, multiplied
  // where negative. 1 is off; > 0.
  double repetition_penalty = 1.0;
  // OpenAI's penalties (its API reference's "frequency and presence
  // penalties"): logit[j] -= c[j] * frequency_penalty + (c[j] > 0) *
  // presence_penalty, c[j] the times token j was generated so far (the
  // prompt not counted, as vLLM counts). 0 is off; each in [-2, 2].
  double presence_penalty = 0;
  double frequency_penalty = 0;
  bool penalised() const { return repetition_penalty != 1.0 || presence_penalty != 0 || frequency_penalty != 0; }
};

// InvalidArgument naming the option and its range; max_new_tokens must be
// at least `min_new_tokens` (0 where only the prompt is scored).
Status check_sampling(const SamplingOptions& o, std::int64_t min_new_tokens = 1);

// What to score besides generating: log-probabilities are the log-softmax
// of the model's logits in fp32, before any penalty or temperature (what
// OpenAI's completions report as logprobs; vLLM's raw log-probabilities).
struct Scoring {
  bool prompt = false;     // each prompt token after the first, given those before it
  bool generated = false;  // each generated token
  std::int64_t top = 0;    // the most likely alternatives kept at each scored position
};

struct TokenScore {
  float logprob = 0;                                // of the token that came
  std::vector<std::pair<std::int32_t, float>> top;  // Scoring::top of them, most likely first
};

struct Generated {
  std::vector<std::int32_t> ids;  // the new tokens, a final stop id included
  bool stopped = false;           // true: a stop id ended it; false: max_new_tokens or the context did
  double prompt_seconds = 0;      // the prompt's forward, the first token chosen
  double decode_seconds = 0;      // every token after the first
  std::vector<TokenScore> prompt_scores;  // Scoring::prompt: prompt.size() - 1, for prompt[1..]
  std::vector<TokenScore> scores;         // Scoring::generated: one per id
};

// Generates after `prompt` (ids, at least one) with `model` on its device
// and dtype, at most min(max_new_tokens, context - prompt) tokens where
// context is the arch's max_seq_len; max_new_tokens may be 0 when the
// prompt is scored (the prompt may then fill the context). `on_token` sees
// each new id as it is chosen and may return false to stop early.
// InvalidArgument when the prompt is empty, holds ids outside the
// vocabulary, or leaves no room to generate (saying how many tokens each);
// check_sampling's errors. LibTorch errors become Internal, except
// c10::OutOfMemoryError, which is rethrown (a training run turns it into its
// out-of-memory outcome).
Result<Generated> generate(CausalLM& model, const std::vector<std::int32_t>& prompt, const SamplingOptions& options,
                           const std::function<bool(std::int32_t)>& on_token = {}, const Scoring& scoring = {});

}  // namespace tailor::runner
