// Running a short command to its end and reading what it printed: the
// Slurm client's sbatch, squeue, scontrol, sacct and scancel. posix_spawn,
// so it is safe from a threaded daemon; every descriptor but the pipes is
// closed in the child; the command is killed when it outlives its timeout.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace tailor::platform {

struct CommandResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string out;  // stdout
  std::string err;  // stderr
  bool ok() const { return exit_code == 0; }
  // "exit code 1: <first line of stderr>" / "killed by signal 9"
  std::string describe() const;
};

struct CommandRequest {
  std::vector<std::string> argv;           // argv[0]: a path, or a name looked up in PATH
  std::map<std::string, std::string> env;  // added to (or replacing in) this process' environment
  double timeout_seconds = 30;
  std::size_t max_output_bytes = 16 << 20;  // per stream; more is an error
};

// Runs the command to its end. An error when it cannot be started, runs
// past its timeout (it is SIGKILLed) or prints too much; a non-zero exit is
// a result, for the caller to judge.
Result<CommandResult> run_command(const CommandRequest& request);

}  // namespace tailor::platform
