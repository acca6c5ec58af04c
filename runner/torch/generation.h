// Text generation with a CausalLM over a KV cache (model.h): the prompt in
// one forward, then one token per forward, each chosen greedily or sampled
// (temperature, then top-k, top-p and min-p, as transformers' warpers apply
// them) from a seeded generator, after the logit biases and the penalties;
// stops at a stop id or the length limit. One sequence alone, or several
// together (generate_batch(): one forward per step for all of them).
// Adapters apply through the model's projection hook, unmerged.
// Not here: beam search, speculative decoding.
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
  // transformers' MinPLogitsWarper (Nguyen et al. 2024, "min-p sampling"):
  // after top-p, tokens less likely than min_p times the most likely one
  // are dropped. [0, 1]; 0 is off.
  double min_p = 0;
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
  // OpenAI's logit_bias: added to a token's logit before the penalties (as
  // transformers' sequence_bias of one-token sequences comes before its
  // repetition penalty). Each bias in [-100, 100], each id in the
  // vocabulary (generate() checks that).
  std::vector<std::pair<std::int32_t, double>> logit_bias;
  bool penalised() const { return repetition_penalty != 1.0 || presence_penalty != 0 || frequency_penalty != 0; }
};

// InvalidArgument naming the option and its range; max_new_tokens must be
// at least `min_new_tokens` (0 where only the prompt is scored).
Status check_sampling(const SamplingOptions& o, std::int64_t min_new_tokens = 1);

// The distribution a sampled token is drawn from, given one row of logits
// (V, fp32, on the CPU) already biased and penalised: the kept tokens, most
// likely first, with their probabilities renormalised to sum to 1.
// Temperature must be > 0.
struct Candidates {
  torch::Tensor ids;    // (K) int64
  torch::Tensor probs;  // (K) fp32
};
Candidates sampling_candidates(const torch::Tensor& logits, const SamplingOptions& o);

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

// InvalidArgument when `prompt` is empty, holds ids outside the model's
// vocabulary, or leaves no room for a new token (for none when
// `max_new_tokens` is 0, which scores the prompt only), saying how many
// tokens each.
Status check_prompt(const CausalLM& model, const std::vector<std::int32_t>& prompt, std::int64_t max_new_tokens);

// A prompt's forward pass done before generate() is called for it: its
// keys and values in a cache of one row with room for its new tokens (a
// view of the batch's cache), the logits of its last position (V, fp32 on
// the CPU, before any penalty), and, when its Scoring asked, its tokens
// scored.
struct Prefill {
  KvCache cache;
  torch::Tensor last_logits;
  Scoring scoring;                        // what was scored (generated: not read)
  std::vector<TokenScore> prompt_scores;  // scoring.prompt: prompt.size() - 1, for prompt[1..]
};

// The forward passes of `prompts` (each checked by check_prompt), several in
// one pass: rows right-padded to the longest, so that a prompt's positions,
// which attend only to earlier ones, see nothing of the padding; each row's
// cache has room for min(max_new_tokens, context - its length) more. The
// head runs over the rows it is needed for (each prompt's last position;
// every position where `scoring.prompt`) 256 at a time across the prompts,
// so that a pass reads the head's weights once per 256 rows rather than
// once or twice per prompt. Equal to each prompt's own pass up to the order
// of floating-point sums. Errors as generate()'s.
Result<std::vector<Prefill>> prefill(CausalLM& model, const std::vector<std::vector<std::int32_t>>& prompts,
                                     std::int64_t max_new_tokens, const Scoring& scoring = {});

// Prompts grouped for prefill(): indices into `lengths` (each prompt's
// tokens), shortest first, as many to a group as keep its rows times its
// longest prompt plus `new_tokens` within `max_positions` (a prompt longer
// than that alone) and its padding within kPrefillPadding tokens plus a
// quarter of its prompts' own. A pass streams every weight once whatever
// its rows, which short prompts together share, while padding costs what
// the tokens it stands for would: on the 2-core CPU, 64 prompts of 8-40
// tokens score 2.0x faster 16 to a request than one a request, 32-256
// tokens 1.07x; padded to the longest of 16, the latter were 9% slower
// than one a request (bench/completions_batch.sh).
inline constexpr std::int64_t kPrefillPadding = 256;
std::vector<std::vector<std::size_t>> prefill_groups(const std::vector<std::int64_t>& lengths, std::int64_t new_tokens,
                                                     std::int64_t max_positions);

// Generates after `prompt` (ids, at least one) with `model` on its device
// and dtype, at most min(max_new_tokens, context - prompt) tokens where
// context is the arch's max_seq_len; max_new_tokens may be 0 when the
// prompt is scored (the prompt may then fill the context). `on_token` sees
// each new id as it is chosen, with its score under Scoring::generated
// (null otherwise), and may return false to stop early.
// InvalidArgument when the prompt is empty, holds ids outside the
// vocabulary, or leaves no room to generate (saying how many tokens each);
// check_sampling's errors. LibTorch errors become Internal, except
// c10::OutOfMemoryError, which is rethrown (a training run turns it into its
// out-of-memory outcome).
// `prefilled`, when given, is prefill()'s pass of this very prompt, made
// with at least options.max_new_tokens of room and the same prompt scoring;
// generation writes its cache beyond the prompt only, so the pass may
// serve again. Without it, generate() makes one.
using TokenSink = std::function<bool(std::int32_t id, const TokenScore* score)>;
Result<Generated> generate(CausalLM& model, const std::vector<std::int32_t>& prompt, const SamplingOptions& options,
                           const TokenSink& on_token = {}, const Scoring& scoring = {}, Prefill* prefilled = nullptr);

// One generation of generate_batch(): its prompt (checked as generate()
// checks it), its options, its prompt's prefill() pass, made with at least
// its max_new_tokens of room and the batch's prompt scoring (read, never
// written below its length, so one pass serves several sequences: a
// prompt's n choices), and what sees each new id (generate()'s on_token).
struct Sequence {
  const std::vector<std::int32_t>* prompt = nullptr;
  SamplingOptions options;
  const Prefill* prefilled = nullptr;
  TokenSink on_token;
};

// Several generations together: each step is one forward of every
// unfinished sequence, its rows at their own lengths
// (CausalLMImpl::decode_step), so that a step reads the weights once for
// all of them; each sequence's tokens are chosen from its own logits with
// its own options and generator, as generate() would choose them alone (up
// to the order of floating-point sums). A sequence that ends leaves the
// batch: its row is dropped from the batch's cache once a quarter of the
// rows have ended. Results in the sequences' order; errors as generate()'s,
// for the first sequence at fault. The batch's cache holds every row's
// prompt and new tokens, so callers bound rows times positions.
Result<std::vector<Generated>> generate_batch(CausalLM& model, const std::vector<Sequence>& sequences,
                                              const Scoring& scoring = {});

}  // namespace tailor::runner
