// The local executor: each attempt is a tailor-runner child of tailord in
// its own process group, on this machine's host memory budget (CPU jobs)
// or whole GPUs (scheduler.h places them), its stdout and stderr in the
// job's runner.log. The job's runner.lock is taken before the spawn and
// inherited by the runner, and its pid is written into it before the store
// records it, so that a tailord that restarts at any moment re-adopts the
// runner (pid plus kernel start time, or the lock's holder) instead of
// launching a second one.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "daemon/executor/executor.h"
#include "strategies/hardware.h"

namespace tailor::daemon {

struct LocalExecutorOptions {
  std::string runner_path;
  std::int64_t host_budget_bytes = 0;    // CPU jobs share this
  std::vector<strategies::Device> gpus;  // GPU jobs get whole devices
};

class LocalExecutor final : public Executor {
 public:
  explicit LocalExecutor(LocalExecutorOptions options) : options_(std::move(options)) {}

  ExecutorKind kind() const override { return ExecutorKind::kLocal; }
  std::vector<Placement> place(const std::vector<const JobRecord*>& queued, double now) override;
  Result<Admission> admit(const JobRecord& job, std::int64_t attempt, const Placement& where) override;
  Launched launch(const LaunchRequest& request) override;
  Observation poll(const std::string& job_id) override;
  bool beating(const std::string&) const override { return true; }
  void signal(const std::string& job_id, bool kill) override;
  Adoption adopt(const JobRecord& job, const std::string& dir) override;
  void forget(const std::string& job_id) override { attempts_.erase(job_id); }
  std::string describe() const override;
  void publish(DaemonMetrics& metrics, const std::map<std::string, std::int64_t>& peaks) const override;

 private:
  struct Attempt {
    pid_t pid = -1;
    std::int64_t start_ticks = 0;
    bool child = true;  // false: adopted after a restart, cannot be reaped
    std::int64_t reserved_bytes = 0;
    std::vector<int> gpus;
    std::string dir;
  };
  LocalExecutorOptions options_;
  std::map<std::string, Attempt> attempts_;
};

}  // namespace tailor::daemon
