// Slurm's commands as tailord uses them: scontrol for the cluster's
// partitions and nodes, sbatch to submit, squeue to follow (by tag, the
// comment), sacct -c for jobs that have left the queue, scancel. Each call
// runs the command to its end under a timeout (platform/command.h); a
// controller that does not answer is Unavailable with Slurm's own words.
// Thread-safe: no state but the options.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "daemon/executor/slurm_text.h"

namespace tailor::daemon::slurm {

struct ClientOptions {
  std::string bin_dir;                     // where sbatch & co. are; empty: PATH
  std::map<std::string, std::string> env;  // e.g. SLURM_CONF
  double timeout_seconds = 20;
};

class Client {
 public:
  explicit Client(ClientOptions options) : options_(std::move(options)) {}

  // The partition `name` (empty: the default one) with its nodes.
  Result<Partition> partition(const std::string& name) const;
  // sbatch --parsable SCRIPT: the Slurm job id.
  Result<std::string> submit(const std::string& script_path) const;
  // Every job Slurm still lists (squeue -t all), finished ones for a few
  // minutes (MinJobAge) too.
  Result<std::vector<Job>> queue() const;
  // A job that left the queue, from the completion log (sacct -c);
  // nullopt when the log has no record of it.
  Result<std::optional<Job>> finished(const std::string& id) const;
  // scancel ID (SIGTERM to every step, then SIGKILL after KillWait), or
  // with `signal` only that signal to the steps.
  Status cancel(const std::string& id, const std::string& signal = "") const;

 private:
  Result<std::string> run(const std::string& program, const std::vector<std::string>& args) const;
  ClientOptions options_;
};

}  // namespace tailor::daemon::slurm
