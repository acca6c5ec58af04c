// The `tailor` commands. Each takes its arguments (after the command name)
// and the streams to write to, and returns the process exit code.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "core/args.h"

namespace tailor::cli {

// Exit codes shared by every command (documented in `tailor --help`).
inline constexpr int kExitOk = 0;
inline constexpr int kExitInvalid = 1;  // bad spec or input
inline constexpr int kExitUsage = 2;    // bad command line
inline constexpr int kExitNoFit = 3;    // nothing fits the hardware (or `run`: out of memory)
inline constexpr int kExitCancelled = 4;  // `run`: interrupted
inline constexpr int kExitRunFailed = 5;  // `run`: training failed
inline constexpr int kExitUnreachable = 6;  // following a job: tailord stayed unreachable (outcome unknown)

struct Streams {
  std::ostream& out;
  std::ostream& err;
};

using Argv = std::vector<std::string>;

// A command's parsed arguments, or the exit code to end with: a bad command
// line prints the error and the help to stderr (kExitUsage); --help prints
// the help to stdout (kExitOk). Adds --help/-h to `flags`.
struct ParsedCommand {
  std::optional<Args> args;
  int exit_code = kExitOk;
};
ParsedCommand parse_command(const Argv& argv, std::vector<FlagSpec> flags, const char* name, const char* help,
                            Streams io);

int run_validate(const Argv& args, Streams io);
int run_schema(const Argv& args, Streams io);
int run_import(const Argv& args, Streams io);
int run_catalog(const Argv& args, Streams io);
int run_plan(const Argv& args, Streams io);
int run_run(const Argv& args, Streams io);
int run_calibration(const Argv& args, Streams io);
// `tailor data preview`: runs tailor-data with these arguments.
int run_data(const Argv& args, Streams io);
int run_cache(const Argv& args, Streams io);
// `tailor generate`: runs `tailor-runner generate`, a job id resolved first.
int run_generate(const Argv& args, Streams io);
// `tailor serve`: runs `tailord serve`, a job id resolved first.
int run_serve(const Argv& args, Streams io);
// `tailor export`: runs `tailor-runner export`, a job id resolved first.
int run_export(const Argv& args, Streams io);
// Client commands of tailord's REST API.
int run_submit(const Argv& args, Streams io);
int run_list(const Argv& args, Streams io);
int run_status(const Argv& args, Streams io);
int run_cancel(const Argv& args, Streams io);
int run_delete(const Argv& args, Streams io);
int run_retry(const Argv& args, Streams io);
int run_download(const Argv& args, Streams io);
int run_logs(const Argv& args, Streams io);
int run_top(const Argv& args, Streams io);

// Entry point: `tailor COMMAND ...`.
int run_tailor(const Argv& args, Streams io);

}  // namespace tailor::cli
