// Tools in OpenAI's chat completions, as vLLM serves them: the request's
// tools go to the chat template, earlier calls in the conversation are
// given to it with their arguments as objects, and with tool_choice "auto"
// the reply's calls are read in the format the template writes them
// (data/tool_calls.h) and returned as `tool_calls`.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runner/data/tool_calls.h"
#include "runner/torch/openai_request.h"

namespace tailor::runner::openai {

// tools (a list of {"type": "function", "function": {name, description,
// parameters, strict}}) into `record`, the conversation the template
// renders, and tool_choice: "auto" (the default with tools) sets `read` to
// `template_format`, "none" (the default without) leaves it kNone, and the
// tools still go to the template, as vLLM gives them. "required" and a
// named function (which need the reply constrained to a call) are refused
// by name, and so is "auto" where the template's format is not read.
std::optional<Problem> read_tools(const Json& request, data::ToolCallFormat template_format, Json& record,
                                  data::ToolCallFormat& read);

// An assistant turn's earlier calls as the template is given them: each
// tool_calls[j].function.arguments that is JSON text becomes its value, as
// vLLM passes them (templates write arguments with tojson). `where`:
// "messages[i]".
std::optional<Problem> call_arguments_as_values(Json& turn, const std::string& where);

// OpenAI's tool_calls list: {"id": "call-<16 hex digits>", "type":
// "function", "function": {"name", "arguments"}} a call, with its "index"
// first in a streamed delta (`indexed`).
Json tool_calls_json(const std::vector<data::ToolCall>& calls, bool indexed);

}  // namespace tailor::runner::openai
