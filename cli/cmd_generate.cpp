// `tailor generate MODEL_DIR|JOB_ID`: a job id is resolved through tailord
// to its output folder (the job must have succeeded, and the folder be on
// this machine); generation itself is tailor-runner's (it links LibTorch,
// this CLI does not), run with the terminal as its output.
#include <ostream>

#include "cli/commands.h"
#include "cli/model_target.h"

namespace tailor::cli {
namespace {

constexpr const char* kGenerateHelp =
    R"(usage: tailor generate MODEL_DIR|JOB_ID [OPTIONS] (--prompt TEXT | --prompt-file FILE |
       --messages FILE | --prompt-ids IDS)

Generates text with a trained model on this machine, streaming the
completion to stdout (a summary goes to stderr), or printing one JSON object
with --output json. MODEL_DIR is a model folder, a PEFT adapter folder, or
a run's output folder (tailor run --out); JOB_ID is a tailord job that
succeeded, whose output folder is read where tailord wrote it (tailor
download copies it from another machine). Adapters apply unmerged.

options:
  --adapter DIR        a PEFT adapter folder to apply over MODEL_DIR
  --prompt TEXT        plain text (the tokenizer's BOS first)
  --prompt-file FILE   the same, read from FILE ("-" reads stdin)
  --messages FILE      a conversation (a JSON list of {"role", "content"}
                       turns, or {"messages": [...], "tools": [...]}),
                       rendered with the model's chat template and its
                       generation prompt; "-" reads stdin
  --prompt-ids IDS     token ids, comma-separated
  --max-tokens N       at most N new tokens (default 256)
  --temperature T      0 (default) is greedy; T > 0 samples
  --top-p P            nucleus sampling, in (0, 1] (default 1)
  --top-k K            sample from the K most likely (default 0: all)
  --min-p M            transformers' min_p: only tokens at least M times as
                       likely as the most likely ([0, 1]; default 0: off)
  --seed S             the sampler's seed (default 0)
  --repetition-penalty R
                       transformers' repetition_penalty over the prompt and
                       what was generated (> 0; default 1: off)
  --presence-penalty P OpenAI's presence_penalty over what was generated
                       ([-2, 2]; default 0)
  --frequency-penalty F
                       OpenAI's frequency_penalty over what was generated
                       ([-2, 2]; default 0)
  --logit-bias ID=B    OpenAI's logit_bias: add B ([-100, 100]) to token ID's
                       logit (repeatable)
  --stop-id ID         also stop at this token id (repeatable); the model's
                       EOS ids and its template's end-of-turn token always stop
  --device DEV         auto (default), cpu, cuda or cuda:N
  --dtype D            auto (default: the folder's dtype on a GPU, fp32 on
                       the CPU), fp32, bf16 or fp16
  --threads N          intra-op threads (default: every core)
  --output FORMAT      text (default) or json
  --quiet              no summary on stderr
)";

// clang-format off
const std::vector<FlagSpec> kRunnerFlags = {
    {"adapter", true},    {"prompt", true}, {"prompt-file", true}, {"messages", true}, {"prompt-ids", true},
    {"max-tokens", true}, {"temperature", true}, {"top-p", true},  {"top-k", true},    {"seed", true},
    {"stop-id", true, true}, {"repetition-penalty", true}, {"presence-penalty", true}, {"frequency-penalty", true},
    {"min-p", true},      {"logit-bias", true, true},
    {"device", true},     {"dtype", true},  {"threads", true},  {"output", true},     {"quiet", false}};
// clang-format on

}  // namespace

int run_generate(const Argv& argv, Streams io) {
  return run_on_model({"generate", kGenerateHelp, kRunnerFlags, "tailor-runner", "TAILOR_RUNNER", "generate"}, argv, io);
}

}  // namespace tailor::cli
