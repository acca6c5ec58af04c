// Where and how tailord runs an attempt of a job: on its own machine
// (local_executor.h) or as a Slurm batch job (slurm_executor.h). The
// supervisor (scheduler/supervisor.h) keeps the lifecycle: it reads the
// run files, decides each attempt's outcome, stores every transition and
// re-plans. An executor places queued jobs, launches an attempt, polls it,
// signals it and adopts it after a restart, and says in each answer what
// the store should keep of it; it writes no store row itself. The
// supervisor calls it from its tick or under the tick's lock, one call at
// a time.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/scheduler/scheduler.h"
#include "daemon/store/job_store.h"
#include "dsl/job_spec.h"
#include "platform/process.h"
#include "runner/protocol/runner_command.h"

namespace tailor::daemon {

using ExecutorKind = dsl::ExecutorKind;  // kLocal or kSlurm for a job that has a place

// An attempt leaving the queue: the message and record of its queued ->
// planning transition.
struct Admission {
  std::string message;
  JobUpdate record;
};

// An attempt ready to launch: the job's folder exists and holds plan.json.
struct LaunchRequest {
  const JobRecord* job = nullptr;
  std::int64_t attempt = 0;
  std::string dir;                         // the job's folder
  runner::RunnerCommand command;           // the runner's arguments
  std::map<std::string, std::string> env;  // added to the runner's environment
  Placement placement;                     // where place() put it
};

// An attempt that became running: its planning -> running transition.
struct Started {
  std::string message;
  JobUpdate record;
  std::string data_json;  // a JSON object; the supervisor adds the attempt, its strategy and estimate
};

struct Launched {
  enum class State {
    kStarted,    // running now: `started` is stored
    kSubmitted,  // handed over; poll() says when it runs: `record` stored, `message` an event
    kNotTaken,   // the executor cannot take it now: planning -> queued with `message` and `record`, not a failure
    kFailed,     // cannot be launched: judged as a failed attempt, `message` says why
  };
  State state = State::kFailed;
  std::string message;
  JobUpdate record;
  std::string data_json;                                    // kSubmitted: the event's data (a JSON object)
  Started started;                                          // kStarted
};

// What one poll saw of an attempt, in the order the supervisor stores it.
struct Observation {
  std::optional<Started> started;  // it began running since the last poll
  JobUpdate record;                // the executor's fields that changed (its state, its job id)
  std::optional<NewEvent> event;   // a change worth an event
  std::string requeue;             // it was never launched: planning -> queued with this message
  std::optional<platform::ProcessExit> exit;  // it ended
  std::string context;                        // how it ended ("Slurm job 12 COMPLETED"); may be empty
};

// An attempt found at start-up in planning or running.
struct Adoption {
  enum class Kind {
    kFollow,      // alive (or in the executor's hands): followed from the first tick
    kEnded,       // ended while tailord was down: judged by its events file
    kRequeue,     // never launched: planning -> queued with `message`
    kLeaveAlone,  // neither followed nor launched again: `message` says why
  };
  Kind kind = Kind::kFollow;
  std::int64_t attempt = 0;
  // planning -> running with `record` and `message` (its start had not been
  // stored); otherwise `record` (when not empty) and a "recovered" event
  // with `message` (kFollow).
  bool to_running = false;
  JobUpdate record;
  std::string message;
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual ExecutorKind kind() const = 0;

  // Background work (Slurm's queue reader), between start and stop.
  virtual void start() {}
  virtual void stop() {}
  // Once per tick, before the polls.
  virtual void begin_tick() {}

  // Which of `queued` (this executor's jobs, in queue order, without their
  // documents) start now and where; kWait and kNeverFits with the reason. A
  // job not named waits without a reason (a retry's backoff).
  virtual std::vector<Placement> place(const std::vector<const JobRecord*>& queued, double now) = 0;
  // Whether the attempt can leave the queue now: Unavailable (the reason
  // becomes its executor state) keeps it queued, uncounted.
  virtual Result<Admission> admit(const JobRecord& job, std::int64_t attempt, const Placement& where) = 0;
  virtual Launched launch(const LaunchRequest& request) = 0;
  virtual Observation poll(const std::string& job_id) = 0;
  // Whether the attempt's runners beat now (heartbeat.h); a pending batch
  // job has none yet.
  virtual bool beating(const std::string& job_id) const = 0;
  // SIGTERM to the attempt (the runners checkpoint and stop), or SIGKILL.
  virtual void signal(const std::string& job_id, bool kill) = 0;
  virtual Adoption adopt(const JobRecord& job, const std::string& dir) = 0;
  // The attempt was judged or queued again: forget it.
  virtual void forget(const std::string& job_id) = 0;

  // What it is and whether it can take work: for the log and GET /v1/hardware.
  virtual std::string describe() const = 0;
  // Its capacity gauges for a /metrics scrape; `peaks`: each attempt's
  // measured peak by job id.
  virtual void publish(DaemonMetrics&, const std::map<std::string, std::int64_t>& peaks) const {
    (void)peaks;
  }
};

}  // namespace tailor::daemon
