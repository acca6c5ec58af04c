// The supervisor: one thread that owns the job lifecycle. Each tick it
//   1. ingests what running runners appended to metrics.jsonl/events.jsonl
//      (one store transaction per job per tick; offsets move with the rows),
//   2. polls each attempt's executor and decides on an ended one:
//      succeeded; failed (bad input, retries exhausted); re-planned and
//      resumed (out of memory); retried with growing backoff; cancelled,
//   3. escalates cancels (SIGTERM, SIGKILL after the grace period), and
//      kills runners whose heartbeat stopped (lost),
//   4. asks each executor which queued jobs of its kind start now, and
//      launches them there: the local executor runs tailor-runner as a
//      child of tailord (executor/local_executor.h), the Slurm executor
//      submits a batch job (executor/slurm_executor.h). Both find plan.json
//      in DATA/jobs/ID/ and their runners write there.
// Every transition is an event in the store, written here: the executors
// say what to keep (executor/executor.h). recover() runs once before
// start(): each executor adopts the attempts the store has as planning or
// running, those that ended meanwhile are judged by their events file, and
// nothing is launched twice.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "daemon/executor/executor.h"
#include "daemon/executor/slurm_cluster.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/planning/job_planning.h"
#include "daemon/scheduler/outcome.h"
#include "daemon/store/job_store.h"
#include "platform/process.h"
#include "runner/protocol/calibration_runs.h"
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
  // The queued jobs a tick reads, by priority then submission order: the
  // first that does not fit blocks those behind it, so a tick needs no
  // more, however long the queue.
  std::int64_t queue_window = 1024;
  double cancel_grace_seconds = 10;
  double backoff_seconds = 5;              // first retry delay; doubles per failure
  double max_backoff_seconds = 300;
  int max_oom_replans = 3;
  // A runner whose heartbeat files (runner/protocol/heartbeat.h) are older
  // than this is lost (stopped, frozen): killed and judged like a crash.
  // 0 turns the check off.
  double heartbeat_timeout_seconds = 120;
  std::map<std::string, std::string> runner_env;
  // After each job ends, `cache_tool cache prune --max-size cache_max_bytes`
  // (tailor-data, with runner_env: the runners' cache folder), one at a
  // time, its report appended to DATA/cache-prune.log. 0: never.
  std::int64_t cache_max_bytes = 0;
  std::string cache_tool;
  // The Slurm cluster (nullptr: none), and how often its queue is read.
  slurm::Cluster* slurm = nullptr;
  double slurm_poll_seconds = 1;
  // When not empty, these run the jobs of their kinds instead of the local
  // and Slurm executors made from the options above (a test's own).
  std::vector<Executor*> executors;
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
  // Deletes a finished job: its records (and a record of the deletion),
  // then its folder. FailedPrecondition for a job still queued or running;
  // an IOError when the records went but the folder could not (it names the
  // folder; the next start tries again).
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
  // At start (recover): the folders of jobs deleted while a crash came
  // between the records and the folder.
  Status remove_deleted_folders();
  // Each job waiting out a retry's backoff: when it may start, on the
  // monotonic clock (schedule_queued, retry_not_before).
  std::map<std::string, double> retry_due_;
  struct Running {
    std::string id;
    std::string name;
    Executor* executor = nullptr;
    std::int64_t attempt = 0;
    std::int64_t metrics_offset = 0;
    std::int64_t events_offset = 0;
    std::optional<std::int64_t> last_step;
    std::optional<std::int64_t> peak_bytes;
    bool cancel_requested = false;
    std::optional<double> cancel_sent_at;
    std::string last_oom_json;  // the runner's latest oom event
    std::string last_error;     // the runner's latest error message
    std::string lost;           // why it was declared lost (no heartbeat); empty while it is not
    // Since when this tailord has watched the attempt, or since its
    // executor said it started: a runner that has not beaten once (no
    // heartbeat file yet) is as old as this.
    std::chrono::steady_clock::time_point watched_since = std::chrono::steady_clock::now();
    // Memory ahead of the store: a verdict or a start whose store write
    // failed (the database locked by another process, the disk full) is
    // kept here and written again every tick until it lands, so that the
    // store never loses a runner tailord has seen start or end.
    std::optional<ProcessExit> exit;   // ended, its verdict not yet stored
    std::string exit_context;          // finish()'s context for that verdict
    std::string launch_error;          // the launch failed (exit is set): why
    std::optional<JobUpdate> unrecorded_start;  // planning -> running, not yet stored
    std::string start_message, start_data;
    std::string store_error;  // the last failed write's message, logged once
    bool run_calibrated = false;  // the succeeded run is in the calibration store
  };

  // A job's attempt as the store has it: its offsets and cancel request as
  // recorded.
  static Running attempt_of(const JobRecord& job, Executor* executor, std::int64_t attempt);
  pid_t cache_prune_pid_ = -1;
  bool cache_prune_again_ = false;
  Executor* executor_for(ExecutorKind kind) const;
  void loop();
  void tick();
  // Stores what a poll of `r`'s executor saw; false when `r` went back to
  // the queue (it leaves running_).
  bool observe(Running& r, Observation o);
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
  // What a launch reads of the job's plan document, parsed once.
  struct PlanFacts {
    std::map<std::string, std::int64_t> components;  // the per-GPU estimate by component
    std::int64_t total = 0;                          // their sum
    std::string strategy;                            // in words; empty when unreadable
  };
  static PlanFacts plan_facts(const std::string& plan_json);
  // Sets `r`'s start to be stored: `s` with the attempt, its strategy and
  // estimate in the event's data.
  void note_start(Running& r, const Started& s, const PlanFacts& plan);
  OutcomePolicy policy() const;
  void schedule_queued(std::unique_lock<std::mutex>& lock);
  void start_attempt(Executor& executor, const JobRecord& job, const Placement& where);
  // Leaves a job in the queue with the reason its executor gives.
  void note_waiting(const JobRecord& job, const std::string& why);
  // SupervisorOptions::cache_max_bytes: a prune after jobs ended (once
  // more when asked while one runs), and its end reaped each tick.
  void prune_cache();
  void reap_cache_prune();
  Status recover_job(const JobRecord& job);
  std::string log_tail(const std::string& id) const;
  void log_status(const Status& s, const std::string& what) const;
  // The calibration store (PlanningContext::calibration_path): what a
  // probe or a finished run measured against its plan; failures logged.
  void record_calibration(const std::vector<runner::CalibrationRun>& runs) const;
  void record_calibration_of_run(const std::string& id, const std::string& plan_json) const;

  JobStore& store_;
  DaemonMetrics& metrics_;
  SupervisorOptions options_;
  // mu_ for a request (cancel, retry, delete, a /metrics scrape): ahead of
  // the next tick. Ticks follow one another without a pause during a burst
  // of submissions (each wakes the loop), and the mutex is not fair: a
  // scrape waited for the burst's end, 5-9 s.
  std::unique_lock<std::mutex> request_lock();
  // In a tick: lets the requests waiting for mu_ take it first; `lock`
  // (on mu_) is held on return.
  void let_requests_in(std::unique_lock<std::mutex>& lock);
  std::mutex mu_;  // guards running_ and serialises ticks with cancel()
  std::mutex turn_mu_;
  std::condition_variable turn_cv_;
  int requests_waiting_ = 0;  // guarded by turn_mu_
  std::map<std::string, Running> running_;
  std::vector<std::unique_ptr<Executor>> owned_;  // made from the options
  std::map<ExecutorKind, Executor*> executors_;
  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  bool woken_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tailor::daemon
