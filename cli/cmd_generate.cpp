// `tailor generate MODEL_DIR|JOB_ID`: a job id is resolved through tailord
// to its output folder (the job must have succeeded, and the folder be on
// this machine); generation itself is tailor-runner's (it links LibTorch,
// this CLI does not), run with the terminal as its output.
#include <algorithm>
#include <filesystem>
#include <ostream>

#include "cli/commands.h"
#include "cli/job_view.h"
#include "cli/rest_client.h"
#include "cli/terminal_child.h"
#include "platform/executable.h"

namespace tailor::cli {
namespace {

constexpr const char* kGenerateHelp = R"(usage: tailor generate MODEL_DIR|JOB_ID [OPTIONS] (--prompt TEXT | --prompt-file FILE |
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
  --seed S             the sampler's seed (default 0)
  --stop-id ID         also stop at this token id (repeatable); the model's
                       EOS ids and its template's end-of-turn token always stop
  --device DEV         auto (default), cpu, cuda or cuda:N
  --dtype D            auto (default: the folder's dtype on a GPU, fp32 on
                       the CPU), fp32, bf16 or fp16
  --threads N          intra-op threads (default: every core)
  --output FORMAT      text (default) or json
  --quiet              no summary on stderr
)";

const std::vector<FlagSpec> kRunnerFlags = {
    {"adapter", true},    {"prompt", true}, {"prompt-file", true}, {"messages", true}, {"prompt-ids", true}, {"max-tokens", true},
    {"temperature", true}, {"top-p", true},  {"top-k", true},    {"seed", true},       {"stop-id", true, true},
    {"device", true},     {"dtype", true},  {"threads", true},  {"output", true},     {"quiet", false}};

// A job's output folder, once the job has succeeded.
Result<std::string> job_output(const Args& args, const std::string& id, Streams io, int& exit_code) {
  Remote r = connect_remote(args, "generate", io);
  if (!r.client) {
    exit_code = r.exit_code;
    return Status::cancelled("");
  }
  auto job = get_json(*r.client, "/v1/jobs/" + url_encode(id));
  if (!job.is_ok()) return job.status().prefixed("no model folder or job " + id);
  const std::string state = job->value("state", std::string());
  if (state != "succeeded") {
    return Status::invalid_argument("job " + id + " has not succeeded (state: " + state +
                                    "); only a finished job has a model to generate with");
  }
  const std::string dir = job->value("output_dir", std::string());
  std::error_code ec;
  if (dir.empty() || !std::filesystem::is_directory(dir, ec)) {
    return Status::invalid_argument("job " + id + "'s output folder " + dir +
                                    " is not on this machine; `tailor download " + id +
                                    "` copies it here, then give that folder");
  }
  return dir;
}

}  // namespace

int run_generate(const Argv& argv, Streams io) {
  const std::string help = help_of(kGenerateHelp);
  auto command = parse_command(argv, with_remote_flags(kRunnerFlags), "generate", help.c_str(), io);
  if (!command.args) return command.exit_code;
  const Args& args = *command.args;
  if (args.positional().size() != 1) {
    io.err << "tailor generate: expected one MODEL_DIR or JOB_ID\n" << help;
    return kExitUsage;
  }
  std::string target = args.positional()[0];
  std::error_code ec;
  if (!std::filesystem::exists(target, ec)) {
    int exit_code = kExitOk;
    auto dir = job_output(args, target, io, exit_code);
    if (!dir.is_ok()) {
      if (exit_code != kExitOk) return exit_code;
      io.err << "tailor generate: " << dir.status().message() << "\n";
      return kExitInvalid;
    }
    target = *dir;
  }
  auto tool = platform::find_executable("tailor-runner", "", "TAILOR_RUNNER");
  if (!tool.is_ok()) {
    io.err << "tailor generate: " << tool.status().message() << "\n";
    return kExitInvalid;
  }
  std::vector<std::string> runner_argv = {*tool, "generate", target};
  for (const FlagSpec& f : kRunnerFlags) {
    if (!args.has(f.name)) continue;
    if (!f.takes_value) {
      runner_argv.push_back("--" + f.name);
      continue;
    }
    for (const std::string& v : args.all(f.name)) {
      runner_argv.push_back("--" + f.name);
      runner_argv.push_back(v);
    }
  }
  return run_in_terminal(runner_argv, "generate", io);
}

}  // namespace tailor::cli
