// MODEL_DIR|JOB_ID, as `tailor generate` and `tailor serve` take it: a
// folder on this machine, or a tailord job that succeeded, whose output
// folder is read where tailord wrote it; and those commands handed to the
// program that does the work.
#pragma once

#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/args.h"

namespace tailor::cli {

// The folder `target` names: itself when it exists, else the output
// folder of the job with that id. On failure the message is printed as
// "tailor COMMAND: ..." and the exit code (kExitInvalid, or the remote
// client's) returned in `exit_code`; the result is then empty.
std::string model_folder(const Args& args, const std::string& target, const char* command, Streams io,
                         int& exit_code);

// Who does the work of `tailor COMMAND MODEL_DIR|JOB_ID [OPTIONS]`.
struct ModelTool {
  const char* command;         // "generate"
  const char* usage;           // its --help text
  std::vector<FlagSpec> flags; // its options, each forwarded as given
  const char* program;         // "tailor-runner", found through $env_var, beside tailor, then PATH
  const char* env_var;         // "TAILOR_RUNNER"
  const char* subcommand;      // "generate": runs PROGRAM SUBCOMMAND FOLDER [OPTIONS]
};

// Parses `argv` (the remote flags too, for a job id), resolves the folder
// and runs the program in the terminal (terminal_child.h): its exit code.
int run_on_model(const ModelTool& tool, const Argv& argv, Streams io);

}  // namespace tailor::cli
