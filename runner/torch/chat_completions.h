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
// top_k, seed, stop, and model and user, which change nothing. n other than
// 1, stream, logprobs, non-zero penalties, logit_bias, tools, tool_choice
// other than "none", a response_format other than text and any other field
// are refused by name, never ignored.
#pragma once

#include <string>

#include "runner/torch/completions.h"
#include "runner/torch/inference_model.h"

namespace tailor::runner {

// The reply to `request` (the request's JSON body) from `model`, named
// `model_name` in the response; 400 naming the field for a bad request or a
// model without a chat template. Never throws.
CompletionReply complete_chat(InferenceModel& model, const std::string& model_name, const std::string& request,
                              const CompletionLimits& limits = {});

}  // namespace tailor::runner
