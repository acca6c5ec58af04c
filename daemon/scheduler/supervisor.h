// The supervisor: one thread that owns the job lifecycle. Each tick it
//   1. ingests what running runners appended to metrics.jsonl/events.jsonl
//      (one store transaction per job per tick; offsets move with the rows),
//   2. notices runners that ended and decides: succeeded; failed (bad input,
//      retries exhausted); re-planned and resumed (out of memory); retried
//      with growing backoff; cancelled,
//   3. escalates cancels (SIGTERM to the process group, SIGKILL after the
//      grace period), and kills runners whose heartbeat stopped (lost),
//   4. starts queued jobs that fit (scheduler.h) with the local executor:
//      tailor-runner as a child in its own process group, plan and output in
//      DATA/jobs/ID/, stdout and stderr in DATA/jobs/ID/runner.log; or
//      submits a job placed on Slurm with sbatch (supervisor_slurm.cpp):
//      its ranks write to the same folder, which every node sees, and
//      Slurm's queue, read by the attempt's tag, says when it runs and ends.
// Every transition is an event in the store. recover() runs once before
// start(): runners that outlived a tailord crash are re-adopted (pid plus
// kernel start time; or, when tailord died before recording the pid, the
// holder of the job's runner.lock, which tailord takes before the fork and
// the runner inherits), ones that ended are judged by their events file,
// and nothing is launched twice.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "daemon/executor/slurm_executor.h"
#include "daemon/planning/job_planning.h"
#include "daemon/scheduler/outcome.h"
#include "platform/process.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/store/job_store.h"
#include "strategies/strategy.h"

namespace tailor::daemon {

using platform::ProcessExit;

struct OomEvent;  // a runner's oom event, as the re-plan reads it

struct SupervisorOptions {
  std::string data_dir;
  std::string runner_path;
  PlanningContext planning;
  std::int64_t host_budget_bytes = 0;      // CPU jobs share this
  std::vector<strategies::Device> gpus;    // GPU jobs get whole devices
  double poll_seconds = 0.2;
  double cancel_grace_seconds = 10;
  double backoff_seconds = 5;              // first retry delay; doubles per failure
  double max_backoff_seconds = 300;
  int max_oom_replans = 3;
  // A runner whose heartbeat files (runner/protocol/heartbeat.h) are older
  // than this is lost (stopped, frozen): killed and judged like a crash.
  // 0 turns the check off.
  double heartbeat_timeout_seconds = 120;
  std::map<std::string, std::string> runner_env;
  // The Slurm executor (nullptr: none), and how often its queue is read.
  slurm::Executor* slurm = nullptr;
  double slurm_poll_seconds = 1;
};

class Supervisor {
 public:
  Supervisor(JobStore& store, DaemonMetrics& metrics, SupervisorOptions options);
  ~Supervisor();  // stop()s; runners keep running and are re-adopted later

  Status recover();
  void start();
  void stop();
  void wake();

  // Cancels a job: a queued one at once, a running one by SIGTERM to its
  // process group (SIGKILL after the grace period). FailedPrecondition for
  // a finished job.
  Result<JobRecord> cancel(const std::string& id);
  // Deletes a finished job: its records, then its folder. FailedPrecondition
  // for a job still queued or running; an IOError when the records went
  // but the folder could not (it names the folder).
  Status remove(const std::string& id);
  // Puts a failed or cancelled job back in the queue with a fresh retry
  // and re-plan budget; its runner resumes from the newest checkpoint.
  // FailedPrecondition for a job that is queued, running or succeeded.
  Result<JobRecord> retry_job(const std::string& id);

  std::string job_dir(const std::string& id) const;
  std::int64_t host_budget_bytes() const { return options_.host_budget_bytes; }
  // Capacity gauges and job counts, for a /metrics scrape.
  void publish_metrics();

 private:
  struct Running {
    std::string id;
    std::string name;
    pid_t pid = -1;
    std::int64_t start_ticks = 0;
    bool child = true;  // false: adopted after a restart, cannot be reaped
    std::int64_t attempt = 0;
    std::int64_t reserved_bytes = 0;
    std::vector<int> gpus;
    std::int64_t metrics_offset = 0;
    std::int64_t events_offset = 0;
    std::optional<std::int64_t> last_step;
    std::optional<std::int64_t> peak_bytes;
    bool cancel_requested = false;
    std::optional<double> cancel_sent_at;
    std::string last_oom_json;  // the runner's latest oom event
    std::string last_error;     // the runner's latest error message
    std::string lost;           // why it was declared lost (no heartbeat); empty while it is not
    // Memory ahead of the store: a verdict or a start whose store write
    // failed (the database locked by another process, the disk full) is
    // kept here and written again every tick until it lands, so that the
    // store never loses a runner tailord has seen start or end.
    std::optional<ProcessExit> exit;   // ended (reaped), its verdict not yet stored
    std::string exit_context;          // finish()'s context for that verdict
    std::string launch_error;          // the launch failed (exit is set): why
    std::optional<JobUpdate> unrecorded_start;  // planning -> running, not yet stored
    std::string start_message, start_data;
    std::string store_error;  // the last failed write's message, logged once
    // Slurm (executor "slurm"): the batch job of this attempt, found by its
    // tag (slurm_tag()); pid stays -1.
    std::string executor = "local";
    std::string slurm_id;        // empty until sbatch answered (or the tag was found)
    std::string slurm_state;     // what executor_state holds
    std::string slurm_phase;     // tailor_state_name() of it, for events on change
    bool slurm_running = false;  // seen running: its ranks beat
    bool slurm_killed = false;   // scancel --signal=KILL sent (once is enough)
    double submitted_at = 0;     // a queue read begun before this cannot know the job
    int ranks = 1;
  };

  // A job's attempt as the store has it, for recover(): not this process'
  // child, its offsets and cancel request as recorded.
  static Running recovered(const JobRecord& job);
  void loop();
  void tick();
  // Stores the run files' new lines, a few MiB at most per call: kSome
  // when it stored some (more may be waiting), kFailed when the store
  // refused them (they are read again next time).
  enum class Ingested { kNothing, kSome, kFailed };
  Ingested ingest(Running& r);
  // Everything an ended runner wrote, before it is judged: kFailed when a
  // store write failed (the verdict waits for the rows).
  Ingested ingest_all(Running& r);
  // Declares `r` lost and kills it when a heartbeat file of its job is
  // older than the timeout.
  void check_heartbeat(Running& r);
  // Judges an ended attempt (outcome.h) and stores the verdict; the status
  // of that store write.
  Status finish(Running& r, const ProcessExit& exit, const std::string& context);
  Status launch_failed(Running& r, const std::string& why);
  Status retry(Running& r, const JobRecord& job, const Outcome& o, const std::string& reason, JobUpdate u);
  Status replan(Running& r, const JobRecord& job, const OomEvent& oom, JobUpdate u);
  // Stores the verdict of an attempt that ended (r.exit); false while the
  // store cannot be written, to be tried again next tick.
  bool judge(Running& r);
  // Stores planning -> running for an attempt whose start was not stored;
  // false while the store cannot be written.
  bool record_start(Running& r);
  OutcomePolicy policy() const;
  void schedule_queued();
  void start_job(const JobRecord& job, const std::vector<int>& gpus, std::int64_t bytes);
  // supervisor_slurm.cpp
  void start_slurm_job(const JobRecord& job);
  void refresh_slurm_queue();
  // Reconciles `r` with the queue read last: its state, its start, its end
  // (r.exit set). Returns false when `r` was never submitted and is queued
  // again (it leaves running_).
  bool follow_slurm(Running& r);
  void note_slurm_state(Running& r, const std::string& state, const std::string& phase);
  // SIGTERM (then, with `kill`, SIGKILL) to the attempt: its process group,
  // or its Slurm job through scancel.
  void signal_attempt(Running& r, bool kill);
  static std::string slurm_tag(const std::string& id, std::int64_t attempt);
  std::string log_tail(const std::string& id) const;
  void log_status(const Status& s, const std::string& what) const;

  JobStore& store_;
  DaemonMetrics& metrics_;
  SupervisorOptions options_;
  std::mutex mu_;  // guards running_ and serialises ticks with cancel()
  std::map<std::string, Running> running_;
  // Slurm's queue as the poller thread last read it (squeue can take
  // seconds, and ~9 s to fail while slurmctld is down: never on the tick).
  struct SlurmQueue {
    bool fresh = false;      // new this tick
    double asked_at = 0;     // when the squeue call began (now_seconds())
    Result<std::vector<slurm::Job>> jobs = Status::unavailable("not read yet");
  };
  SlurmQueue slurm_queue_;   // the tick's copy (under mu_)
  std::mutex slurm_mu_;      // guards the poller's result below
  SlurmQueue slurm_read_;
  std::uint64_t slurm_reads_ = 0, slurm_reads_seen_ = 0;
  std::atomic<int> slurm_following_{0};  // Slurm attempts the tick follows
  std::thread slurm_thread_;
  void poll_slurm();
  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  bool woken_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tailor::daemon
