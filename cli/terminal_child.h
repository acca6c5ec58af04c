// A tool this CLI hands a command to (tailor-data, tailor-runner), run in
// the foreground with the terminal as its output.
#pragma once

#include <string>
#include <vector>

#include "cli/commands.h"

namespace tailor::cli {

// Runs `argv` (argv[0] the tool's path) in this process group, so Ctrl-C
// reaches it, and waits (Ctrl-C leaves this process to the child's exit): its exit code, 128 + the signal
// that killed it, or kExitInvalid when it cannot start (said on io.err as
// "tailor COMMAND: ...").
int run_in_terminal(const std::vector<std::string>& argv, const char* command, Streams io);

}  // namespace tailor::cli
