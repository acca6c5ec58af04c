// `tailor serve MODEL_DIR|JOB_ID`: a job id is resolved through tailord to
// its output folder; the server is `tailord serve` (daemon/serving), run
// with the terminal as its output until Ctrl-C.
#include <ostream>

#include "cli/commands.h"
#include "cli/model_target.h"

namespace tailor::cli {
namespace {

constexpr const char* kServeHelp = R"(usage: tailor serve MODEL_DIR|JOB_ID [OPTIONS]

Serves a trained model on OpenAI's completions and chat completions APIs
until Ctrl-C, so that lm-eval and OpenAI clients use it as it is:
  lm_eval --model local-completions --tasks TASKS --model_args \
    base_url=http://127.0.0.1:8000/v1/completions,tokenizer_backend=huggingface,tokenizer=MODEL_DIR
  lm_eval --model local-chat-completions --apply_chat_template --tasks TASKS \
    --model_args base_url=http://127.0.0.1:8000/v1/chat/completions
POST /v1/completions takes a prompt as text or token ids (a list of them
runs several prompts to a forward pass), max_tokens, temperature, top_p,
top_k, min_p, seed, stop, the presence, frequency and repetition
penalties, logit_bias, n, best_of, echo, logprobs (streamed too; echo
with logprobs scores the prompt: lm-eval's log-likelihood tasks; give
lm-eval batch_size=16 to send 16 prompts a request) and stream; POST
/v1/chat/completions takes messages, rendered with the model's chat
template and its generation prompt, with max_tokens (or
max_completion_tokens), the same sampling fields, n, logprobs,
top_logprobs, tools and tool_choice (none, or auto: calls read from the
reply where the template writes Hermes' <tool_call> blocks, as Qwen 2.5
to 3 do, or Llama 3.1 to 3.3's JSON objects), parallel_tool_calls and
stream (server-sent events as OpenAI sends them); GET
/v1/models lists the model.
MODEL_DIR is a model folder, a PEFT adapter folder or a run's output
folder; JOB_ID is a tailord job that succeeded, whose output folder is read
where tailord wrote it. Adapters apply unmerged.

options:
  --adapter DIR         a PEFT adapter folder to apply over MODEL_DIR
  --name NAME           the model's name in responses (default: the folder's)
  --host ADDR           the address to bind (default 127.0.0.1); any other
                        than loopback needs --token-file
  --port N              the port (default 8000; 0 picks a free one)
  --token-file FILE     requests need "Authorization: Bearer <its token>"
                        (lm-eval sends $OPENAI_API_KEY); tailord's DATA/token
                        makes it its API's token
  --device DEV          auto (default), cpu, cuda or cuda:N
  --dtype D             auto (default: the folder's dtype on a GPU, fp32 on
                        the CPU), fp32, bf16 or fp16
  --threads N           the model's intra-op threads (default: every core)
  --max-tokens N        the largest max_tokens a request may ask for (default 4096)
  --max-body-bytes N    the largest request body (default 8388608)
)";

const std::vector<FlagSpec> kServerFlags = {
    {"adapter", true}, {"name", true},  {"host", true},    {"port", true},       {"token-file", true},
    {"device", true},  {"dtype", true}, {"threads", true}, {"max-tokens", true}, {"max-body-bytes", true}};

}  // namespace

int run_serve(const Argv& argv, Streams io) {
  return run_on_model({"serve", kServeHelp, kServerFlags, "tailord", "TAILORD", "serve"}, argv, io);
}

}  // namespace tailor::cli
