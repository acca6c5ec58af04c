// The job repository: jobs, their events, step metrics and idempotency keys
// in SQLite (daemon/store/migrations/). A job is committed with
// synchronous=FULL before create() returns, so a client that got an id keeps
// it across a crash. Step metrics arrive in batches.
// Thread-safe. Writes wait in one queue, in order, and are committed
// together (group commit): the first write to find no commit under way
// takes the writes waiting, runs each in a savepoint of one BEGIN IMMEDIATE
// transaction (a refused write undoes only its own changes) and commits them
// with one fsync. Under load a commit carries dozens of writes; alone, a
// write commits at once. A write gives up as Unavailable within the busy
// timeout of its start, however many wait. Reads borrow one of a few
// read-only connections, which WAL lets read the last commit beside a
// writer, so no read waits behind a write, ours or another process'.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/status.h"
#include "daemon/store/sqlite.h"
#include "dsl/job_spec.h"
#include "runner/protocol/exit_code.h"

namespace tailor::daemon {

enum class JobState { kQueued, kPlanning, kRunning, kSucceeded, kFailed, kCancelled };

const char* to_string(JobState s);
std::optional<JobState> parse_job_state(std::string_view s);
bool is_terminal(JobState s);
inline const std::vector<JobState>& all_job_states() {
  static const std::vector<JobState> kAll = {JobState::kQueued,    JobState::kPlanning, JobState::kRunning,
                                             JobState::kSucceeded, JobState::kFailed,   JobState::kCancelled};
  return kAll;
}

// Unix time in seconds, with sub-second precision.
double now_seconds();

struct JobRecord {
  std::string id;
  std::int64_t seq = 0;
  std::string name;
  JobState state = JobState::kQueued;
  std::int64_t priority = 0;
  std::string spec_text;
  std::string spec_json;
  std::map<std::string, std::string> labels;
  std::string plan_json;
  std::int64_t estimated_bytes = 0;
  std::int64_t gpus_needed = 0;
  std::optional<std::int64_t> memory_limit_bytes;
  std::int64_t retries = 0;
  std::int64_t attempts = 0;
  std::int64_t failures = 0;
  std::int64_t oom_restarts = 0;
  std::optional<double> next_attempt_at;
  bool cancel_requested = false;
  std::optional<double> cancel_sent_at;
  std::optional<std::int64_t> pid;
  std::optional<std::int64_t> pid_start_ticks;
  std::string assigned_gpus;
  std::int64_t metrics_offset = 0;
  std::int64_t events_offset = 0;
  std::optional<std::int64_t> last_step;
  std::optional<std::int64_t> peak_bytes;
  // The newest step after which the model was evaluated on data.eval, and its loss.
  std::optional<std::int64_t> last_eval_step;
  std::optional<double> last_eval_loss;
  std::optional<std::int64_t> exit_code;
  std::optional<std::int64_t> exit_signal;
  std::string exit_reason;
  double created_at = 0;
  double updated_at = 0;
  std::optional<double> started_at;
  std::optional<double> finished_at;
  // Where it runs (migration 6): kLocal or kSlurm; kDefault for a value
  // this tailord does not know (written by a newer one): no executor takes it.
  dsl::ExecutorKind executor = dsl::ExecutorKind::kLocal;
  std::string executor_job_id;      // Slurm: the current attempt's batch job
  std::string executor_state;       // Slurm: what it last said of that job

  // Failed because the runner refused its input (the spec, data or a
  // checkpoint): retrying it as it is cannot help, so it is not offered.
  bool failed_as_bad_input() const {
    return state == JobState::kFailed && exit_code == runner::exit_status(runner::RunnerExit::kBadInput);
  }
  // POST /v1/jobs/{id}/retry can help: failed or cancelled, not refused input.
  bool retryable() const {
    return (state == JobState::kFailed || state == JobState::kCancelled) && !failed_as_bad_input();
  }
};

struct NewJob {
  std::string name;
  std::int64_t priority = 0;
  std::string spec_text;
  std::string spec_json;
  std::map<std::string, std::string> labels;
  std::string plan_json;
  std::int64_t estimated_bytes = 0;
  std::int64_t gpus_needed = 0;
  std::optional<std::int64_t> memory_limit_bytes;
  std::int64_t retries = 0;
  dsl::ExecutorKind executor = dsl::ExecutorKind::kLocal;  // kLocal or kSlurm
  std::string idempotency_key;   // empty: none
  std::string request_hash;      // of the request the key was sent with
};

struct CreateResult {
  JobRecord job;
  bool created = true;  // false: the idempotency key named an existing job
};

// Column changes for update()/transition(): names are the jobs table's
// columns, fixed in the daemon's code (never user input); values are bound.
class JobUpdate {
 public:
  using Value = std::variant<std::monostate, std::int64_t, double, std::string>;
  JobUpdate& set(const char* column, std::int64_t v) { return put(column, v); }
  JobUpdate& set(const char* column, int v) { return put(column, static_cast<std::int64_t>(v)); }
  JobUpdate& set(const char* column, double v) { return put(column, v); }
  JobUpdate& set(const char* column, std::string v) { return put(column, std::move(v)); }
  JobUpdate& set(const char* column, const char* v) { return put(column, std::string(v)); }
  JobUpdate& set_null(const char* column) { return put(column, std::monostate{}); }
  const std::vector<std::pair<std::string, Value>>& values() const { return values_; }

 private:
  JobUpdate& put(const char* column, Value v) {
    values_.emplace_back(column, std::move(v));
    return *this;
  }
  std::vector<std::pair<std::string, Value>> values_;
};

struct EventRecord {
  std::int64_t id = 0;
  std::string job_id;
  double time = 0;
  std::string kind;
  std::string from_state;
  std::string to_state;
  std::string message;
  std::string data_json;  // empty: none
};

struct NewEvent {
  std::string kind;
  std::string message;
  std::string data_json;
  double time = 0;  // 0: now
};

// One optimizer step of one rank, as the runner's metrics.jsonl reports it.
struct StepMetric {
  std::int64_t rank = 0;
  std::int64_t step = 0;
  std::int64_t attempt = 0;
  double time = 0;
  std::optional<double> loss, lr, grad_norm, tokens_per_second, step_seconds;
  std::optional<std::int64_t> tokens, allocated_bytes, peak_bytes;
  // Set on a step after which the model was evaluated on data.eval.
  std::optional<double> eval_loss, eval_seconds;
  std::optional<std::int64_t> eval_tokens;
  // Model FLOPs utilisation, on a GPU the catalog knows (docs/training.md).
  std::optional<double> mfu;
  // weights, gradients, optimizer_states, master_weights, adapter,
  // activations, logits, overhead (the plan document's keys).
  std::map<std::string, std::int64_t> component_bytes;
  // Preference training's metrics (kPreferenceMetrics' keys) where the
  // line has them.
  std::map<std::string, double> preference;
  // A multi-rank job's line: every rank's peak (for /metrics; not stored).
  std::map<std::int64_t, std::int64_t> rank_peak_bytes;
};

// The memory components of a step row, in the order of the plan document.
const std::vector<std::string>& memory_component_names();

// A preference job's per-step metrics: the key in metrics.jsonl and the API (TRL's
// names: DPOTrainer's for dpo, orpo and simpo, RewardTrainer's for reward,
// KTOTrainer's for kto)
// and the store's column.
struct PreferenceMetric {
  const char* key;
  const char* column;
};
inline constexpr PreferenceMetric kPreferenceMetrics[] = {
    {"rewards/chosen", "rewards_chosen"},
    {"rewards/rejected", "rewards_rejected"},
    {"rewards/accuracies", "rewards_accuracies"},
    {"rewards/margins", "rewards_margins"},
    {"logps/chosen", "logps_chosen"},
    {"logps/rejected", "logps_rejected"},
    {"eval_rewards/accuracies", "eval_rewards_accuracies"},
    // A reward model's (TRL's RewardTrainer's names).
    {"accuracy", "accuracy"},
    {"margin", "margin"},
    {"min_reward", "min_reward"},
    {"mean_reward", "mean_reward"},
    {"max_reward", "max_reward"},
    {"eval_accuracy", "eval_accuracy"},
    // KTO's KL estimate (TRL's KTOTrainer's name).
    {"kl", "kl"},
    {"eval_kl", "eval_kl"},
};

struct JobFilter {
  std::optional<JobState> state;
  std::vector<std::pair<std::string, std::string>> labels;  // all must match
  std::int64_t limit = 50;
  std::int64_t after_seq = 0;  // pagination cursor: jobs with seq > after_seq
  // The records' plan_json: the whole plan document, or by default its
  // summary (schema_version, fits, summary, strategy, memory, throughput).
  bool full_plan = false;
};

struct JobPage {
  std::vector<JobRecord> jobs;
  std::optional<std::int64_t> next_after;  // set when more may follow
};

// What the supervisor ingests from a run's files in one transaction.
struct IngestBatch {
  std::vector<NewEvent> events;
  std::vector<StepMetric> metrics;
  std::int64_t metrics_offset = 0;
  std::int64_t events_offset = 0;
};

// The group commit's work since the store opened (GET /metrics).
struct WriteStats {
  std::uint64_t commits = 0;  // transactions committed or attempted
  std::uint64_t writes = 0;   // writes they carried
  std::int64_t waiting = 0;   // writes queued now, behind a commit under way
};

// Whether the store's writes reach the database. A write that fails for
// the store's own reasons (another process holds the database: Unavailable;
// the file system is full: NoSpace; an I/O error) makes it unwritable until
// a write succeeds; a refusal (a job in another state, a reused key) does not.
struct StoreHealth {
  bool writable = true;
  std::string error;         // the first failure's message
  double failing_since = 0;  // Unix seconds
};

class JobStore {
 public:
  // Opens or creates DIR's database at `path` and applies migrations. A
  // write waits up to `busy_timeout_ms` in all (for the writes before it
  // and another process' lock), then fails as Unavailable; while the store
  // is unwritable a write tries once and does not wait.
  static Result<std::unique_ptr<JobStore>> open(const std::string& path, int busy_timeout_ms = 2000);
  ~JobStore();

  Result<CreateResult> create(const NewJob& job);
  Result<JobRecord> get(const std::string& id);
  // A page in submission order. The records leave out the spec (spec_text
  // and spec_json are empty): get() has it; their plan_json is the plan's
  // summary unless filter.full_plan.
  Result<JobPage> list(const JobFilter& filter);
  // Jobs in any of `states`, by priority (high first), then submission order;
  // the first `limit` of them where it is above 0. Without `documents`, the
  // records leave out the spec and plan (a few kB each): what the scheduler
  // reads every tick.
  Result<std::vector<JobRecord>> in_states(const std::vector<JobState>& states, bool documents = true,
                                           std::int64_t limit = 0);

  // Moves a job from `from` to `to` with its event and `changes`, atomically.
  // FailedPrecondition when the job is no longer in `from`.
  Status transition(const std::string& id, JobState from, JobState to, const std::string& message,
                    const JobUpdate& changes = {}, const std::string& data_json = {});
  Status update(const std::string& id, const JobUpdate& changes);
  // Deletes a finished job (succeeded, failed or cancelled) with its
  // labels, events, step metrics and idempotency keys (ON DELETE CASCADE),
  // and records the deletion (deleted_jobs) in the same transaction, until
  // forget_deleted says its folder is gone too.
  // FailedPrecondition for a job that is not finished, NotFound for none.
  Status remove(const std::string& id);
  // Deletions whose folders may still be there (a tailord that died between
  // the two), and the end of one.
  Result<std::vector<std::string>> deleted_jobs();
  Status forget_deleted(const std::string& id);
  Status add_event(const std::string& id, const NewEvent& event);
  Status ingest(const std::string& id, const IngestBatch& batch, const JobUpdate& changes = {});

  Result<std::vector<EventRecord>> events(const std::string& id, std::int64_t after_id = 0, std::int64_t limit = 1000);
  // Every job's events after `after_id`, in order (GET /v1/events).
  Result<std::vector<EventRecord>> all_events(std::int64_t after_id, std::int64_t limit);
  // The newest event's id (0 for none): where a stream of what is new starts.
  Result<std::int64_t> last_event_id();
  Result<std::vector<StepMetric>> metrics(const std::string& id, std::int64_t since_step = 0,
                                          std::int64_t limit = 10000);
  // The highest peak_bytes the runner reported in each attempt's steps.
  Result<std::map<std::int64_t, std::int64_t>> peak_by_attempt(const std::string& id);
  Result<std::map<JobState, std::int64_t>> count_by_state();

  WriteStats write_stats();
  // As the last write found it; never waits for the database (GET /healthz).
  StoreHealth health() const;
  // While unwritable: rewrites the probe row to learn whether writes work
  // again, waiting 0.1 s at most, unless another write is under way (that
  // one will tell). The supervisor calls it every tick.
  StoreHealth probe();

 private:
  // The read connections (query_only) not in use.
  struct Readers {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<Database> idle;
  };
  // A read connection for the length of one read, back to the pool after.
  class Reader {
   public:
    Reader(Readers& pool, Database db) : pool_(&pool), db_(std::move(db)) {}
    Reader(Reader&& o) noexcept : pool_(o.pool_), db_(std::move(o.db_)) { o.pool_ = nullptr; }
    Reader& operator=(Reader&&) = delete;
    ~Reader();
    Database& operator*() { return db_; }
    Database* operator->() { return &db_; }

   private:
    Readers* pool_;
    Database db_;
  };
  using WriteLock = std::unique_lock<std::timed_mutex>;
  struct PendingWrite;

  JobStore(Database db, int busy_timeout_ms) : db_(std::move(db)), busy_timeout_ms_(busy_timeout_ms) {}
  Reader reader();
  // Runs `body` on the write connection inside a transaction, committed
  // with the writes queued beside it; its status, or the commit's.
  // `durable`: the commit waits for a full fsync (synchronous=FULL); a
  // commit of writes none of which need it does not.
  Status write(const std::function<Status()>& body, bool durable = true);
  void commit_batch(const std::vector<PendingWrite*>& batch);
  Status apply_update(const std::string& id, const JobUpdate& changes);
  Status insert_event(const std::string& id, const NewEvent& e, const std::string& from, const std::string& to);

  Status noted(Status s);
  template <class T>
  Result<T> noted(Result<T> r) {
    (void)noted(r.is_ok() ? Status::ok() : r.status());
    return r;
  }

  std::timed_mutex mu_;  // the write connection
  Database db_;
  int busy_timeout_ms_;
  bool synchronous_full_ = true;  // db_'s setting; guarded by mu_
  // Writes waiting for a commit, oldest first; whether one is under way.
  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<PendingWrite*> queue_;
  bool committing_ = false;
  std::uint64_t commits_ = 0, writes_ = 0;  // guarded by queue_mu_
  Readers readers_;
  mutable std::mutex health_mu_;  // apart from mu_, which a write holds while it waits
  StoreHealth health_;
};

}  // namespace tailor::daemon
