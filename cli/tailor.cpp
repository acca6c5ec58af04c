#include <iostream>
#include <ostream>

#include "cli/commands.h"
#include "core/text.h"

namespace tailor::cli {
namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const Argv&, Streams);
};

constexpr Command kCommands[] = {
    {"validate", "Check job specs and report every problem with file:line:col", run_validate},
    {"plan", "Choose the fastest memory strategy that fits the GPUs, and explain it", run_plan},
    {"run", "Plan and train a job in the foreground on this machine", run_run},
    {"calibration", "This machine's measured against predicted peaks and speeds (show, reset)", run_calibration},
    {"data", "A job's data: rendered examples and what is trained (preview), lengths (stats)", run_data},
    {"cache", "Tokenized data and DPO references cached on this machine (show, prune, clear)", run_cache},
    {"generate", "Generate text with a trained model or a finished job's (streamed)", run_generate},
    {"serve", "Serve a trained model on OpenAI's completions and chat completions APIs", run_serve},
    {"export", "Write a trained model as one Hugging Face folder, its adapter merged", run_export},
    {"submit", "Submit a job to tailord (--wait to follow it to the end)", run_submit},
    {"list", "List tailord's jobs", run_list},
    {"status", "Show one job: state, plan, progress, outcome", run_status},
    {"logs", "Print a job's output; -f follows it with a progress line", run_logs},
    {"cancel", "Cancel a queued or running job", run_cancel},
    {"retry", "Retry a failed or cancelled job from its last checkpoint", run_retry},
    {"download", "Copy a job's model, adapter or other files from tailord", run_download},
    {"delete", "Delete a finished job and its files", run_delete},
    {"top", "A refreshing table of running and queued jobs", run_top},
    {"schema", "Print the JSON Schema of a job spec (for editor completion)", run_schema},
    {"import", "Convert another tool's config into a job spec (axolotl)", run_import},
    {"catalog", "List the model presets or the GPUs Tailor knows (--output json)", run_catalog},
};

void print_help(std::ostream& out) {
  out << "tailor: plan and run LLM training jobs that fit your GPUs\n\n"
         "usage: tailor COMMAND [ARGS...]\n\ncommands:\n";
  for (const Command& c : kCommands) {
    std::string name = c.name;
    name.resize(12, ' ');
    out << "  " << name << c.summary << "\n";
  }
  out << "\n'tailor COMMAND --help' describes a command.\n"
         "exit codes: 0 ok, 1 invalid spec or input, 2 bad command line, 3 job does not fit,\n"
         "4 run or job cancelled, 5 training or job failed\n"
         "daemon commands find tailord through --addr/--token, TAILOR_ADDR/TAILOR_TOKEN or --data-dir\n";
}

}  // namespace

ParsedCommand parse_command(const Argv& argv, std::vector<FlagSpec> flags, const char* name, const char* help,
                            Streams io) {
  flags.push_back({"help", false, false, 'h'});
  auto parsed = Args::parse(argv, flags);
  if (!parsed.is_ok()) {
    io.err << "tailor " << name << ": " << parsed.status().message() << "\n" << help;
    return {std::nullopt, kExitUsage};
  }
  if (parsed->has("help")) {
    io.out << help;
    return {std::nullopt, kExitOk};
  }
  return {std::move(parsed).value(), kExitOk};
}

int run_tailor(const Argv& args, Streams io) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    if (args.size() >= 2 && args[0] == "help") return run_tailor({args[1], "--help"}, io);
    print_help(args.empty() ? io.err : io.out);
    return args.empty() ? kExitUsage : kExitOk;
  }
  if (args[0] == "--version") {
    io.out << "tailor 0.1.0\n";
    return kExitOk;
  }
  for (const Command& c : kCommands) {
    if (args[0] == c.name) return c.run(Argv(args.begin() + 1, args.end()), io);
  }
  std::vector<std::string> names;
  for (const Command& c : kCommands) names.emplace_back(c.name);
  io.err << "tailor: unknown command '" << args[0] << "'";
  if (std::string hint = closest_match(args[0], names); !hint.empty()) io.err << "; did you mean '" << hint << "'?";
  io.err << "\nrun 'tailor --help' for the list of commands\n";
  return kExitUsage;
}

}  // namespace tailor::cli
