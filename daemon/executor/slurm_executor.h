// The Slurm executor: an attempt is a batch job (batch_script.h) tagged
// "<job id>/<attempt>" in its comment. A thread reads Slurm's queue at most
// once per poll interval, and only while attempts are followed (squeue can
// take seconds, and ~9 s to fail while slurmctld is down: never on the
// supervisor's tick); each tick reconciles every attempt with the newest
// read by that tag (Slurm reuses job ids after a controller crash, so the
// id alone proves nothing). The ranks write the local executor's run files
// to the job's folder, which every node sees.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "daemon/executor/batch_script.h"
#include "daemon/executor/executor.h"
#include "daemon/executor/slurm_cluster.h"
#include "daemon/planning/job_planning.h"

namespace tailor::daemon {

struct SlurmExecutorOptions {
  std::string runner_path;
  PlanningContext planning;       // the spec's sbatch settings over tailord's
  slurm::Cluster* cluster = nullptr;
  double poll_seconds = 1;        // how often the queue is read
};

class SlurmExecutor final : public Executor {
 public:
  explicit SlurmExecutor(SlurmExecutorOptions options) : options_(std::move(options)) {}
  ~SlurmExecutor() override { stop(); }

  ExecutorKind kind() const override { return ExecutorKind::kSlurm; }
  void start() override;
  void stop() override;
  void begin_tick() override;
  std::vector<Placement> place(const std::vector<const JobRecord*>& queued, double now) override;
  Result<Admission> admit(const JobRecord& job, std::int64_t attempt, const Placement& where) override;
  Launched launch(const LaunchRequest& request) override;
  Observation poll(const std::string& job_id) override;
  bool beating(const std::string& job_id) const override;
  void signal(const std::string& job_id, bool kill) override;
  Adoption adopt(const JobRecord& job, const std::string& dir) override;
  void forget(const std::string& job_id) override { attempts_.erase(job_id); }
  std::string describe() const override { return options_.cluster->describe(); }

  // The tag of an attempt's batch job.
  static std::string tag(const std::string& id, std::int64_t attempt);

 private:
  struct Attempt {
    std::int64_t attempt = 0;
    std::string dir;
    std::string slurm_id;        // empty until sbatch answered (or the tag was found)
    std::string state;           // what the store's executor_state holds
    std::string phase;           // tailor_state_name() of it, for events on change
    bool running = false;        // seen running: its ranks beat
    bool killed = false;         // scancel --signal=KILL sent (once is enough)
    bool ended = false;          // its end was reported
    double submitted_at = 0;     // when sbatch answered: a queue read begun before may not know the job
    int ranks = 1;
  };
  // Slurm's queue as the reader thread last read it.
  struct Queue {
    bool fresh = false;      // new this tick
    double asked_at = 0;     // when the squeue call began (now_seconds())
    Result<std::vector<slurm::Job>> jobs = Status::unavailable("not read yet");
  };

  void read_queue();
  // The batch job of an attempt: the plan's ranks over its nodes, the
  // spec's sbatch settings over tailord's, the node's cores per rank.
  Result<slurm::BatchJob> batch_job(const LaunchRequest& request) const;
  // The state Slurm gives the attempt, noted in `o` when it changed.
  void note(Attempt& a, Observation& o, const std::string& state, const std::string& phase);
  // The attempt's end: the deciding rank's outcome in events.jsonl.
  void ended(Attempt& a, Observation& o, const slurm::Job& job);

  SlurmExecutorOptions options_;
  std::map<std::string, Attempt> attempts_;
  Queue queue_;                // the tick's copy
  std::mutex read_mu_;         // guards the reader's result below
  Queue read_;
  std::uint64_t reads_ = 0, reads_seen_ = 0;
  std::atomic<int> following_{0};
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tailor::daemon
