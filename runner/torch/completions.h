// OpenAI's (legacy) completions, POST /v1/completions, answered by a model
// opened for inference: what lm-eval's local-completions client and other
// OpenAI clients send. Log-likelihood requests are `echo` with `logprobs`
// and `max_tokens` 0 or 1: each prompt token after the first is scored
// given those before it, from one forward of the prompt; generative ones
// run generation.h with the request's sampling and stop strings.
//
// Read from the request: prompt (a string, a list of strings, a list of
// token ids, or a list of such lists), max_tokens (default 16), temperature
// (default 1, OpenAI's; 0 is greedy), top_p, top_k (0 or -1: every token),
// seed (default: drawn at random; choice k of each prompt samples with
// seed + k), stop (a string or a list), presence_penalty,
// frequency_penalty, logit_bias and vLLM's repetition_penalty and min_p, n
// (choices per prompt, each generated on its own) and best_of (that many
// candidates, the n with the highest log-probability per token returned,
// their final stop token counted; usage counts every candidate's tokens),
// echo, logprobs (the alternatives kept per position, at most
// `max_logprobs`, from the model's logits before biases, penalties and
// temperature), and model and user, which change nothing. stream, suffix
// and any other field are refused by name, never ignored.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "runner/torch/inference_model.h"

namespace tailor::runner {

struct CompletionLimits {
  std::int64_t max_prompts = 256;    // prompts in one request (completions: prompts times n)
  std::int64_t max_choices = 16;     // n
  std::int64_t max_tokens = 4096;    // the largest max_tokens a request may ask for
  std::int64_t max_logprobs = 20;    // the largest logprobs
  // Positions (rows times the longest prompt and its new tokens) in one
  // forward pass of several prompts, and in one batch of sequences
  // generated together: their keys and values are about 1 GB for an 8B
  // Llama in bf16, a tenth of that for a 1B one.
  std::int64_t batch_positions = 8192;
};

// One chunk object (JSON text) of a streamed reply: text_completion or
// chat.completion.chunk. It answers whether the client still listens: once
// it says no, generation stops at its next token, no later chunk is sent,
// and the reply ends as one that streamed (200, body null).
using ChunkSink = std::function<bool(const std::string& chunk)>;

struct CompletionReply {
  int status = 200;        // 200, 400 (the request), 500 (the model), 503 (out of memory)
  std::string body;        // the JSON response, or OpenAI's error object {"error": {message, type, param, code}}
};

// The reply to `request` (the request's JSON body) from `model`, named
// `model_name` in the response. With "stream": true the reply goes to
// `emit` as OpenAI streams completions: text_completion chunks of one
// choice each (its index; the echoed prompt first, then the text as it
// becomes final, a last chunk with the finish reason; the choices one after
// another, shortest prompt first), then the usage when
// stream_options.include_usage; the returned reply is 200 with the body
// null, an error before the first chunk an ordinary reply, one after it the
// returned error. Without `emit`, streaming is refused; so are logprobs with
// it. Never throws.
// `listening`, when set, is asked at each new token of an unstreamed reply
// whether its client still waits for it: once it says no, generation stops
// and the reply is 200 with the body null (nobody reads it).
using Listening = std::function<bool()>;
CompletionReply complete(InferenceModel& model, const std::string& model_name, const std::string& request,
                         const CompletionLimits& limits = {}, const ChunkSink& emit = {},
                         const Listening& listening = {});

}  // namespace tailor::runner
