// What OpenAI's completions and chat completions requests share
// (completions.h, chat_completions.h): the error object, the readers of
// their fields, each naming the field it refuses, and stop sequences.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "runner/torch/completions.h"
#include "runner/torch/generation.h"
#include "runner/torch/inference_model.h"

namespace tailor::runner::openai {

using Json = nlohmann::ordered_json;

// What is wrong with a request: OpenAI's error fields.
struct Problem {
  std::string param;
  std::string message;
};

// {"error": {message, type, param, code}} with `status`.
CompletionReply error_reply(int status, const std::string& type, const std::string& message,
                            const std::string& param = "");
CompletionReply bad_request(const Problem& p);

// A field not in `known` is refused, naming the fields read.
std::optional<Problem> check_known(const Json& j, const std::vector<std::string>& known);
// Absent and null leave `out` as it is.
std::optional<Problem> read_integer(const Json& j, const char* key, std::int64_t lo, std::int64_t hi,
                                    std::int64_t& out);
std::optional<Problem> read_number(const Json& j, const char* key, double& out);
std::optional<Problem> read_bool(const Json& j, const char* key, bool& out);
std::optional<Problem> read_optional_string(const Json& j, const char* key);
// A field Tailor does not implement, accepted only at the value that means "off".
std::optional<Problem> refuse_unless(const Json& j, const char* key, const Json& off, const std::string& why);

// temperature (>= 0), top_p (0, 1], top_k (-1 and 0: every token), seed,
// stop (a string or up to 16 non-empty ones), presence_penalty and
// frequency_penalty ([-2, 2]) and logit_bias (token ids as strings to
// biases in [-100, 100]) with OpenAI's defaults, and vLLM's
// repetition_penalty (> 0, default 1: off) and min_p ([0, 1], default 0:
// off); generation.h applies them.
struct Sampling {
  double temperature = 1.0;
  double top_p = 1.0;
  std::int64_t top_k = 0;
  double min_p = 0;
  double presence_penalty = 0, frequency_penalty = 0, repetition_penalty = 1.0;
  std::vector<std::pair<std::int32_t, double>> logit_bias;
  std::optional<std::uint64_t> seed;
  std::vector<std::string> stop;
};
std::optional<Problem> read_sampling(const Json& j, Sampling& s);

// stream and stream_options ({"include_usage": bool}, only with stream).
std::optional<Problem> read_stream(const Json& j, bool& stream, bool& include_usage);

// n (choices per prompt, 1 to `max`) and best_of (the candidates drawn, n
// to `max`; default n).
std::optional<Problem> read_choices(const Json& j, std::int64_t max, std::int64_t& n, std::int64_t& best_of);
// The seed of choice `k` of a request seeded with `seed`: its choices
// differ from each other, and the request is repeatable.
inline std::uint64_t choice_seed(std::uint64_t seed, std::int64_t k) { return seed + static_cast<std::uint64_t>(k); }

// The first place in `text` where a stop sequence begins, or npos.
std::size_t first_stop(const std::string& text, const std::vector<std::string>& stops);

// One sequence generated after `prompt` for a request.
struct Completion {
  std::string text;                       // cut before the first stop sequence
  std::vector<std::int32_t> ids;          // the new tokens, a final stop id dropped
  std::vector<TokenScore> scores;         // Scoring::generated: one per id
  std::vector<TokenScore> prompt_scores;  // Scoring::prompt
  bool stopped = false;                   // a stop id or a stop sequence ended it (else the length)
  std::optional<float> stop_logprob;      // Scoring::generated: the final stop id's, dropped from scores
};
// generation.h with the request's sampling, stopping at the model's stop ids
// and at `s.stop`'s sequences; the reply with which the request fails
// otherwise: 400 naming `param` (prefixed `where: `) for a prompt the model
// cannot take, 503 out of memory, 500 for the rest. `on_text`, when set,
// sees the text as it becomes final, in pieces whose concatenation is
// Completion::text: first with "" once the first token is chosen (the
// prompt was taken), then each piece no stop sequence can still claim, and
// a last one (text or not) for the tokens not yet seen. With each piece
// come the tokens chosen since the piece before (their scores under
// Scoring::generated), a final stop id left out: all the pieces' tokens are
// Completion::ids. It answers false to stop generating (a streaming client
// left): the completion ends there, with no last piece.
struct ChosenToken {
  std::int32_t id = 0;
  TokenScore score;  // Scoring::generated's; empty otherwise
};
using TextSink = std::function<bool(std::string_view piece, const std::vector<ChosenToken>& tokens)>;
// `prefilled`: the prompt's forward pass, done ahead (generation.h's
// prefill()).
std::variant<Completion, CompletionReply> run_completion(InferenceModel& m, const std::vector<std::int32_t>& prompt,
                                                         std::int64_t max_tokens, const Sampling& s, std::uint64_t seed,
                                                         const Scoring& scoring, const std::string& where,
                                                         const std::string& param, const TextSink& on_text = {},
                                                         Prefill* prefilled = nullptr);

// One sequence of run_completions(): its prompt and that prompt's forward
// pass (one pass may serve several sequences), its sampler's seed, and
// what its errors name (run_completion()'s `where` and `param`).
struct CompletionJob {
  const std::vector<std::int32_t>* prompt = nullptr;
  const Prefill* prefilled = nullptr;
  std::uint64_t seed = 0;
  std::string where, param;
};
// run_completion() for several sequences, generated together
// (generation.h's generate_batch()) with the same sampling and scoring and
// no text sink, in runs of consecutive jobs whose rows times their longest
// prompt and new tokens stay within `max_positions` (one job alone where it
// is longer): their completions in the jobs' order, or the reply with
// which the request fails. Once `listening` (asked at each new token) says
// the client has gone, generation stops and the reply is 200, body null.
std::variant<std::vector<Completion>, CompletionReply> run_completions(
    InferenceModel& m, const std::vector<CompletionJob>& jobs, std::int64_t max_tokens, const Sampling& s,
    const Scoring& scoring, std::int64_t max_positions, const Listening& listening = {});

// The prompts' forward passes, several in one (generation.h's prefill()),
// or the reply with which the request fails: 503 out of memory, 500 for
// the rest (each prompt was checked before).
std::variant<std::vector<Prefill>, CompletionReply> prefill_prompts(
    InferenceModel& m, const std::vector<std::vector<std::int32_t>>& prompts, std::int64_t max_tokens,
    const Scoring& scoring);

// How many bytes at the end of `text` may begin a stop sequence (the
// longest suffix that is a proper prefix of one of `stops`): text a stream
// holds back until it knows.
std::size_t stop_prefix_at_end(std::string_view text, const std::vector<std::string>& stops);

// The chunks of one streamed reply, each an `object` (text_completion,
// chat.completion.chunk) with the reply's id, created time and model.
class ChunkStream {
 public:
  ChunkStream(const char* id_prefix, const char* object, const std::string& model_name, const ChunkSink& emit);
  // A chunk of one choice: {index, logprobs: null, finish_reason, ...fields}
  // (`fields` may hold the logprobs).
  // Each answers listening().
  bool choice(std::int64_t index, Json fields, const char* finish_reason = nullptr);
  // The last chunk when asked: no choices, the usage.
  bool usage_of(std::size_t prompt_tokens, std::size_t completion_tokens);
  // False once the sink said the client left; nothing is sent after that.
  bool listening() const { return listening_; }

 private:
  Json head() const;
  bool send(const Json& chunk);

  std::string id_;
  const char* object_;
  std::int64_t created_;
  std::string model_;
  const ChunkSink& emit_;
  bool listening_ = true;
};

// "PREFIX-" and 16 random hex digits: a response's id.
std::string new_response_id(const char* prefix);

// The request body as JSON, or the reply for a body that is not JSON (400)
// or a model without a tokenizer (500).
std::variant<Json, CompletionReply> read_body(const InferenceModel& m, const std::string& body);

// A 200 reply: {id: "ID_PREFIX-<16 hex digits>", object, created, model,
// choices, usage}.
CompletionReply response(const char* id_prefix, const char* object, const std::string& model_name, Json choices,
                         std::size_t prompt_tokens, std::size_t completion_tokens);
// Seconds since the epoch: a response's "created".
std::int64_t now_seconds();
// {prompt_tokens, completion_tokens, total_tokens}.
Json usage(std::size_t prompt_tokens, std::size_t completion_tokens);

}  // namespace tailor::runner::openai
