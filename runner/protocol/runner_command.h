// tailor-runner's command line, built and read in one place: tailord's
// executors (local and Slurm) and `tailor run` build it, the runner reads
// it, and the ranks' launcher passes it on to each rank.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace tailor::runner {

struct RunnerCommand {
  std::string plan;                          // --plan: the plan document
  std::string out;                           // --out: the job's folder
  bool resume = false;                       // --resume: from the newest checkpoint in `out`
  std::optional<std::string> memory_limit;   // --memory-limit, as given ("300MiB", bytes)
  std::optional<std::string> device;         // --device: auto, cpu, cuda, cuda:N
  std::optional<std::string> threads;        // --threads, as given (checked by the runner)
  std::optional<std::string> cache_dir;      // --cache-dir
  bool progress = false;                     // --progress
  bool quiet = false;                        // --quiet
  std::optional<std::string> export_checkpoint;  // --export CHECKPOINT
  bool merge = false;                        // --merge (with --export)
  bool probe = false;                        // --probe
  bool probe_only = false;                   // --probe-only: measure the plan's probe, write it, train nothing
  // Between the ranks' launcher and its ranks only: --probe-candidate I
  // measures the plan's probe candidate I as this rank and writes
  // probe_rank_file(out, I, rank); --append-events keeps what events.jsonl
  // holds (the launcher's probe) rather than starting it anew.
  std::optional<std::string> probe_candidate;
  bool append_events = false;
  bool version = false;                      // --version
  bool help = false;                         // --help, -h
};

// The arguments after the program's name, in the order above.
std::vector<std::string> runner_args(const RunnerCommand& c);

// Reads the arguments after the program's name; InvalidArgument naming an
// unknown flag, a missing value or a positional argument.
Result<RunnerCommand> parse_runner_args(const std::vector<std::string>& args);

}  // namespace tailor::runner
