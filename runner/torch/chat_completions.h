// OpenAI's chat completions, POST /v1/chat/completions, answered by a model
// opened for inference: what chat clients and lm-eval's
// local-chat-completions send. The conversation is rendered with the
// model's chat template and its generation prompt, encoded whole (as
// `tailor generate --messages` does), and the reply generated after it,
// stopping at the model's end-of-turn and end ids and at `stop`.
//
// Read from the request: messages (turns of the roles a template is given;
// content a string, null or a list of text parts, joined with "\n" as vLLM
// joins them), max_completion_tokens or max_tokens (default: as many as the
// context leaves, at most `max_tokens`), temperature (default 1), top_p,
// top_k, seed (choice k samples with seed + k), stop, presence_penalty,
// frequency_penalty, logit_bias and vLLM's repetition_penalty and min_p, n
// (choices, generated together; streamed one after another, each chunk
// naming its choice's index), stream and stream_options.include_usage,
// logprobs and top_logprobs, tools and tool_choice (chat_tools.h: with
// "auto" the reply's calls are read in the format the template writes
// them, data/tool_calls.h, and returned as tool_calls with finish_reason
// "tool_calls"; streamed, the text before a call as it comes and the calls
// in one delta at the end), and model and user, which change nothing. A
// response_format other than text, tool_choice "required" or a named
// function, and any other field are refused by name, never ignored.
#pragma once

#include <functional>
#include <string>

#include "runner/torch/completions.h"
#include "runner/torch/inference_model.h"

namespace tailor::runner {

// The reply to `request` (the request's JSON body) from `model`, named
// `model_name` in the response; 400 naming the field for a bad request or a
// model without a chat template. With "stream": true the reply goes to
// `emit` as OpenAI streams it (the assistant's role once the prompt is
// taken, the text as it becomes final, held back while a stop sequence may
// begin, a last chunk with the finish reason, then the usage when
// stream_options.include_usage), and the returned reply is 200 with the
// body null; an error before the first chunk is an ordinary reply, one
// after it the returned error. Without `emit`, streaming is refused. Never
// throws. `listening` as complete()'s.
CompletionReply complete_chat(InferenceModel& model, const std::string& model_name, const std::string& request,
                              const CompletionLimits& limits = {}, const ChunkSink& emit = {},
                              const Listening& listening = {});

}  // namespace tailor::runner
