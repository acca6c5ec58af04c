#include "daemon/store/job_store.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include <nlohmann/json.hpp>

#include "daemon/store/migrations.h"
#include "strategies/strategy.h"

namespace tailor::daemon {
namespace {

constexpr const char* kJobColumns =
    "id, seq, name, state, priority, spec_text, spec_json, labels_json, plan_json, estimated_bytes, gpus_needed, "
    "memory_limit_bytes, retries, attempts, failures, oom_restarts, next_attempt_at, cancel_requested, "
    "cancel_sent_at, pid, pid_start_ticks, assigned_gpus, metrics_offset, events_offset, last_step, peak_bytes, "
    "exit_code, exit_signal, exit_reason, created_at, updated_at, started_at, finished_at, executor, "
    "executor_job_id, executor_state, last_eval_step, last_eval_loss";

// A listing's columns: the job's spec (its text and resolved form, a few
// kB each) stays in the store, empty in the records a page returns, and
// the plan is its summary (migration 4) unless the whole is asked for.
constexpr const char* kListColumns =
    "id, seq, name, state, priority, '' AS spec_text, '' AS spec_json, labels_json, plan_summary_json, estimated_bytes, "
    "gpus_needed, memory_limit_bytes, retries, attempts, failures, oom_restarts, next_attempt_at, cancel_requested, "
    "cancel_sent_at, pid, pid_start_ticks, assigned_gpus, metrics_offset, events_offset, last_step, peak_bytes, "
    "exit_code, exit_signal, exit_reason, created_at, updated_at, started_at, finished_at, executor, "
    "executor_job_id, executor_state, last_eval_step, last_eval_loss";
constexpr const char* kListColumnsFullPlan =
    "id, seq, name, state, priority, '' AS spec_text, '' AS spec_json, labels_json, plan_json, estimated_bytes, "
    "gpus_needed, memory_limit_bytes, retries, attempts, failures, oom_restarts, next_attempt_at, cancel_requested, "
    "cancel_sent_at, pid, pid_start_ticks, assigned_gpus, metrics_offset, events_offset, last_step, peak_bytes, "
    "exit_code, exit_signal, exit_reason, created_at, updated_at, started_at, finished_at, executor, "
    "executor_job_id, executor_state, last_eval_step, last_eval_loss";

// The scheduler's columns: a listing's, without the plan either.
constexpr const char* kScheduleColumns =
    "id, seq, name, state, priority, '' AS spec_text, '' AS spec_json, labels_json, '' AS plan_json, estimated_bytes, "
    "gpus_needed, memory_limit_bytes, retries, attempts, failures, oom_restarts, next_attempt_at, cancel_requested, "
    "cancel_sent_at, pid, pid_start_ticks, assigned_gpus, metrics_offset, events_offset, last_step, peak_bytes, "
    "exit_code, exit_signal, exit_reason, created_at, updated_at, started_at, finished_at, executor, "
    "executor_job_id, executor_state, last_eval_step, last_eval_loss";

// The `executor` column (migration 6); a value this tailord does not know
// (written by a newer one) is kDefault, which no executor takes.
dsl::ExecutorKind executor_named(const std::string& name) {
  for (const dsl::ExecutorKind k : {dsl::ExecutorKind::kLocal, dsl::ExecutorKind::kSlurm}) {
    if (name == dsl::to_string(k)) return k;
  }
  return dsl::ExecutorKind::kDefault;
}

JobRecord read_job(const Statement& q) {
  JobRecord j;
  int c = 0;
  j.id = q.text(c++);
  j.seq = q.int64(c++);
  j.name = q.text(c++);
  j.state = parse_job_state(q.text(c++)).value_or(JobState::kFailed);
  j.priority = q.int64(c++);
  j.spec_text = q.text(c++);
  j.spec_json = q.text(c++);
  const auto labels = nlohmann::json::parse(q.text(c++), nullptr, false);
  if (labels.is_object()) {
    for (const auto& [k, v] : labels.items()) {
      if (v.is_string()) j.labels[k] = v.get<std::string>();
    }
  }
  j.plan_json = q.text(c++);
  j.estimated_bytes = q.int64(c++);
  j.gpus_needed = q.int64(c++);
  j.memory_limit_bytes = q.opt_int64(c++);
  j.retries = q.int64(c++);
  j.attempts = q.int64(c++);
  j.failures = q.int64(c++);
  j.oom_restarts = q.int64(c++);
  j.next_attempt_at = q.opt_real(c++);
  j.cancel_requested = q.int64(c++) != 0;
  j.cancel_sent_at = q.opt_real(c++);
  j.pid = q.opt_int64(c++);
  j.pid_start_ticks = q.opt_int64(c++);
  j.assigned_gpus = q.text(c++);
  j.metrics_offset = q.int64(c++);
  j.events_offset = q.int64(c++);
  j.last_step = q.opt_int64(c++);
  j.peak_bytes = q.opt_int64(c++);
  j.exit_code = q.opt_int64(c++);
  j.exit_signal = q.opt_int64(c++);
  j.exit_reason = q.text(c++);
  j.created_at = q.real(c++);
  j.updated_at = q.real(c++);
  j.started_at = q.opt_real(c++);
  j.finished_at = q.opt_real(c++);
  j.executor = executor_named(q.text(c++));
  j.executor_job_id = q.text(c++);
  j.executor_state = q.text(c++);
  j.last_eval_step = q.opt_int64(c++);
  j.last_eval_loss = q.opt_real(c++);
  return j;
}

std::string new_job_id() {
  // 64 random bits: ids are not guessable and collide with negligible
  // probability; the primary key catches the rest.
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[24];
  std::snprintf(buf, sizeof buf, "j-%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

const std::vector<std::string>& component_columns() {
  static const std::vector<std::string> kCols = [] {
    std::vector<std::string> cols;
    for (const strategies::MemoryComponent& c : strategies::kMemoryComponents) cols.push_back(std::string(c.key) + "_bytes");
    return cols;
  }();
  return kCols;
}

Result<JobRecord> job_by_id(Database& db, const std::string& id) {
  TAILOR_ASSIGN_OR_RETURN(Statement q, db.prepare(std::string("SELECT ") + kJobColumns + " FROM jobs WHERE id = ?1"));
  q.bind(1, id);
  TAILOR_ASSIGN_OR_RETURN(const bool row, q.step());
  if (!row) return Status::not_found("no job " + id);
  return read_job(q);
}

// Enough for the HTTP threads, the submission workers and the supervisor
// to read at once; a further read waits for a connection to be returned.
constexpr int kReaders = 6;

}  // namespace

const std::vector<std::string>& memory_component_names() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> names;
    for (const strategies::MemoryComponent& c : strategies::kMemoryComponents) names.emplace_back(c.key);
    return names;
  }();
  return kNames;
}

const char* to_string(JobState s) {
  switch (s) {
    case JobState::kQueued: return "queued";
    case JobState::kPlanning: return "planning";
    case JobState::kRunning: return "running";
    case JobState::kSucceeded: return "succeeded";
    case JobState::kFailed: return "failed";
    case JobState::kCancelled: return "cancelled";
  }
  return "unknown";
}

std::optional<JobState> parse_job_state(std::string_view s) {
  for (JobState st : all_job_states()) {
    if (s == to_string(st)) return st;
  }
  return std::nullopt;
}

bool is_terminal(JobState s) {
  return s == JobState::kSucceeded || s == JobState::kFailed || s == JobState::kCancelled;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Result<std::unique_ptr<JobStore>> JobStore::open(const std::string& path, int busy_timeout_ms) {
  TAILOR_ASSIGN_OR_RETURN(Database db, Database::open(path, busy_timeout_ms));
  auto version = migrate(db);
  if (!version.is_ok()) return version.status().prefixed(path);
  std::unique_ptr<JobStore> store(new JobStore(std::move(db), busy_timeout_ms));
  // Opened now, while nothing else holds the database (switching a new
  // connection to WAL reads the header).
  for (int i = 0; i < kReaders; ++i) {
    TAILOR_ASSIGN_OR_RETURN(Database r, Database::open(path, busy_timeout_ms));
    // A reader never writes; query_only makes a mistake an error.
    TAILOR_RETURN_IF_ERROR(r.exec("PRAGMA query_only=1").prefixed(path));
    store->readers_.idle.push_back(std::move(r));
  }
  return store;
}

JobStore::~JobStore() = default;

JobStore::Reader::~Reader() {
  if (!pool_) return;
  {
    std::lock_guard lock(pool_->mu);
    pool_->idle.push_back(std::move(db_));
  }
  pool_->cv.notify_one();
}

JobStore::Reader JobStore::reader() {
  std::unique_lock lock(readers_.mu);
  readers_.cv.wait(lock, [&] { return !readers_.idle.empty(); });
  Database db = std::move(readers_.idle.back());
  readers_.idle.pop_back();
  return Reader(readers_, std::move(db));
}

namespace {

// Enough to carry a 64-client burst in one commit; bounded so that one
// commit's time (and a refused write's rollback) stays short.
constexpr std::size_t kMaxBatch = 64;

Status busy_status(int busy_timeout_ms) {
  return Status::unavailable("the store is busy: the writes before this one have waited " +
                             std::to_string(busy_timeout_ms) + " ms for the database");
}

Status run_sql(Database& db, const char* sql) {
  TAILOR_ASSIGN_OR_RETURN(Statement q, db.prepare(sql));
  return q.run();
}

}  // namespace

// A write in the queue. It lives on its caller's stack, and the caller
// waits until it is done.
struct JobStore::PendingWrite {
  const std::function<Status()>* body = nullptr;
  bool durable = true;
  std::chrono::steady_clock::time_point deadline;
  bool taken = false;  // in a commit: its caller waits for that commit's end
  bool done = false;
  Status result;
};

Status JobStore::write(const std::function<Status()>& body, bool durable) {
  // While the store is unwritable a write tries once: requests behind it
  // then learn so at once, not one busy timeout after another.
  const int budget_ms = health().writable ? busy_timeout_ms_ : 0;
  PendingWrite w;
  w.body = &body;
  w.durable = durable;
  w.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(budget_ms);
  std::unique_lock lock(queue_mu_);
  queue_.push_back(&w);
  while (!w.done) {
    if (!committing_) {
      // No commit under way: this caller commits what waits, oldest first
      // (its own write among them unless more than a batch waits before it).
      std::vector<PendingWrite*> batch;
      while (!queue_.empty() && batch.size() < kMaxBatch) {
        batch.push_back(queue_.front());
        batch.back()->taken = true;
        queue_.pop_front();
      }
      committing_ = true;
      ++commits_;
      writes_ += batch.size();
      lock.unlock();
      commit_batch(batch);
      lock.lock();
      committing_ = false;
      for (PendingWrite* b : batch)
        b->done = true;
      queue_cv_.notify_all();
    } else if (w.taken) {
      queue_cv_.wait(lock);
    } else if (queue_cv_.wait_until(lock, w.deadline) == std::cv_status::timeout && !w.taken && !w.done) {
      queue_.erase(std::find(queue_.begin(), queue_.end(), &w));
      return busy_status(busy_timeout_ms_);
    }
  }
  return w.result;
}

WriteStats JobStore::write_stats() {
  std::lock_guard lock(queue_mu_);
  return {commits_, writes_, static_cast<std::int64_t>(queue_.size())};
}

void JobStore::commit_batch(const std::vector<PendingWrite*>& batch) {
  auto deadline = batch.front()->deadline;
  bool durable = false;
  for (const PendingWrite* w : batch) {
    deadline = std::min(deadline, w->deadline);
    durable = durable || w->durable;
  }
  const auto fail = [](auto first, auto last, const Status& s) {
    for (; first != last; ++first)
      (*first)->result = s;
  };
  // Only a probe takes the connection otherwise, for 0.1 s at most.
  WriteLock lock(mu_, std::defer_lock);
  if (!lock.try_lock_until(deadline)) return fail(batch.begin(), batch.end(), busy_status(busy_timeout_ms_));
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  db_.set_busy_timeout(static_cast<int>(std::max<std::int64_t>(0, left.count())));
  if (durable != synchronous_full_) {
    const Status s = run_sql(db_, durable ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL");
    if (!s.is_ok()) return fail(batch.begin(), batch.end(), s);
    synchronous_full_ = durable;
  }
  auto tx = Transaction::begin(db_);
  if (!tx.is_ok()) return fail(batch.begin(), batch.end(), tx.status());
  std::vector<PendingWrite*> applied;
  for (auto it = batch.begin(); it != batch.end(); ++it) {
    PendingWrite& w = **it;
    Status s = run_sql(db_, "SAVEPOINT write");
    if (s.is_ok()) {
      try {
        s = (*w.body)();
      } catch (const std::exception& e) {
        s = Status::internal(std::string("a store write threw: ") + e.what());
      } catch (...) {
        // Another caller's write, run on this thread: it must not unwind here.
        s = Status::internal("a store write threw");
      }
    }
    if (s.is_ok()) s = run_sql(db_, "RELEASE write");
    w.result = s;
    if (s.is_ok()) {
      applied.push_back(&w);
      continue;
    }
    if (!db_.in_transaction()) {
      // SQLite rolled the whole transaction back (a full disk, an I/O
      // error): the writes before this one are undone, and those after it
      // would meet the same.
      fail(applied.begin(), applied.end(), s);
      return fail(it + 1, batch.end(), s);
    }
    (void)run_sql(db_, "ROLLBACK TO write");
    (void)run_sql(db_, "RELEASE write");
  }
  const Status committed = tx->commit();
  if (!committed.is_ok()) fail(applied.begin(), applied.end(), committed);
}

Status JobStore::noted(Status s) {
  const StatusCode c = s.code();
  const bool store_failed = c == StatusCode::kUnavailable || c == StatusCode::kNoSpace || c == StatusCode::kIOError;
  std::lock_guard lock(health_mu_);
  if (s.is_ok()) {
    health_ = StoreHealth{};
  } else if (store_failed && health_.writable) {
    health_ = StoreHealth{false, s.message(), now_seconds()};
  }
  return s;
}

StoreHealth JobStore::health() const {
  std::lock_guard lock(health_mu_);
  return health_;
}

StoreHealth JobStore::probe() {
  if (health().writable) return health();
  WriteLock lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return health();
  // The supervisor probes every tick: a held lock is the answer.
  db_.set_busy_timeout(100);
  (void)noted([&]() -> Status {
    TAILOR_ASSIGN_OR_RETURN(Transaction tx, Transaction::begin(db_));
    TAILOR_ASSIGN_OR_RETURN(Statement q, db_.prepare("INSERT INTO store_probe (id, probed_at) VALUES (1, ?1) "
                                                     "ON CONFLICT (id) DO UPDATE SET probed_at = excluded.probed_at"));
    q.bind(1, now_seconds());
    TAILOR_RETURN_IF_ERROR(q.run());
    return tx.commit();
  }());
  return health();
}

Result<JobRecord> JobStore::get(const std::string& id) {
  Reader db = reader();
  return job_by_id(*db, id);
}

Result<CreateResult> JobStore::create(const NewJob& job) {
  CreateResult out;
  const Status written = noted(write([&]() -> Status {
    if (!job.idempotency_key.empty()) {
      TAILOR_ASSIGN_OR_RETURN(Statement q,
                              db_.prepare("SELECT job_id, request_hash FROM idempotency_keys WHERE key = ?1"));
      q.bind(1, job.idempotency_key);
      TAILOR_ASSIGN_OR_RETURN(const bool row, q.step());
      if (row) {
        if (q.text(1) != job.request_hash) {
          return Status::failed_precondition("Idempotency-Key '" + job.idempotency_key +
                                             "' was used for a different request (job " + q.text(0) + ")");
        }
        TAILOR_ASSIGN_OR_RETURN(out.job, job_by_id(db_, q.text(0)));
        out.created = false;
        return Status::ok();
      }
    }
    const double now = now_seconds();
    nlohmann::json labels = nlohmann::json::object();
    for (const auto& [k, v] : job.labels)
      labels[k] = v;
    std::string id;
    for (int tries = 0;; ++tries) {
      id = new_job_id();
      TAILOR_ASSIGN_OR_RETURN(Statement ins,
                              db_.prepare("INSERT INTO jobs (id, seq, name, state, priority, spec_text, spec_json, "
                                          "labels_json, plan_json, estimated_bytes, gpus_needed, memory_limit_bytes, "
                                          "retries, created_at, updated_at, executor) VALUES (?1, (SELECT "
                                          "COALESCE(MAX(seq), 0) + 1 FROM jobs), ?2, 'queued', ?3, ?4, ?5, ?6, ?7, "
                                          "?8, ?9, ?10, ?11, ?12, ?12, ?13)"));
      ins.bind(1, id).bind(2, job.name).bind(3, job.priority).bind(4, job.spec_text).bind(5, job.spec_json);
      ins.bind(6, labels.dump()).bind(7, job.plan_json).bind(8, job.estimated_bytes).bind(9, job.gpus_needed);
      ins.bind(10, job.memory_limit_bytes).bind(11, job.retries).bind(12, now).bind(13, std::string(dsl::to_string(job.executor)));
      Status s = ins.run();
      if (s.is_ok()) break;
      if (s.code() != StatusCode::kAlreadyExists || tries >= 3) return s.prefixed("inserting job");
    }
    for (const auto& [k, v] : job.labels) {
      TAILOR_ASSIGN_OR_RETURN(Statement l, db_.prepare("INSERT INTO job_labels (job_id, key, value) VALUES (?1, ?2, ?3)"));
      l.bind(1, id).bind(2, k).bind(3, v);
      TAILOR_RETURN_IF_ERROR(l.run());
    }
    if (!job.idempotency_key.empty()) {
      TAILOR_ASSIGN_OR_RETURN(Statement k, db_.prepare("INSERT INTO idempotency_keys (key, request_hash, job_id, "
                                                       "created_at) VALUES (?1, ?2, ?3, ?4)"));
      k.bind(1, job.idempotency_key).bind(2, job.request_hash).bind(3, id).bind(4, now);
      TAILOR_RETURN_IF_ERROR(k.run());
    }
    TAILOR_RETURN_IF_ERROR(insert_event(id, {"state", "submitted", "", now}, "", "queued"));
    TAILOR_ASSIGN_OR_RETURN(out.job, job_by_id(db_, id));
    return Status::ok();
  }));
  if (!written.is_ok()) return written;
  return out;
}

Result<JobPage> JobStore::list(const JobFilter& f) {
  Reader db = reader();
  std::string sql = std::string("SELECT ") + (f.full_plan ? kListColumnsFullPlan : kListColumns) + " FROM jobs j WHERE ";
  int next = 2;
  if (f.labels.empty()) {
    sql += "seq > ?1";
    if (f.state) sql += " AND state = ?" + std::to_string(next++);
    sql += " ORDER BY seq LIMIT ?" + std::to_string(next);
  } else {
    // The first label's index (with the state where one is asked for)
    // yields the page's seqs in order; any further label is checked per
    // row. The page is then read by seq.
    sql += "seq IN (SELECT l0.seq FROM job_labels l0 WHERE l0.key = ?2 AND l0.value = ?3 AND l0.seq > ?1";
    next = 4;
    if (f.state) sql += " AND l0.state = ?" + std::to_string(next++);
    for (std::size_t i = 1; i < f.labels.size(); ++i) {
      sql += " AND EXISTS (SELECT 1 FROM job_labels l WHERE l.job_id = l0.job_id AND l.key = ?" +
             std::to_string(next) + " AND l.value = ?" + std::to_string(next + 1) + ")";
      next += 2;
    }
    sql += " ORDER BY l0.seq LIMIT ?" + std::to_string(next) + ") ORDER BY seq";
  }
  TAILOR_ASSIGN_OR_RETURN(Statement q, db->prepare(sql));
  int b = 1;
  q.bind(b++, f.after_seq);
  if (!f.labels.empty()) {
    q.bind(b++, f.labels[0].first);
    q.bind(b++, f.labels[0].second);
  }
  if (f.state) q.bind(b++, to_string(*f.state));
  for (std::size_t i = f.labels.empty() ? 0 : 1; i < f.labels.size(); ++i) {
    q.bind(b++, f.labels[i].first);
    q.bind(b++, f.labels[i].second);
  }
  // One extra row tells whether another page follows.
  q.bind(b, f.limit + 1);
  JobPage page;
  for (;;) {
    TAILOR_ASSIGN_OR_RETURN(const bool row, q.step());
    if (!row) break;
    page.jobs.push_back(read_job(q));
  }
  if (static_cast<std::int64_t>(page.jobs.size()) > f.limit) {
    page.jobs.pop_back();
    page.next_after = page.jobs.back().seq;
  }
  return page;
}

Result<std::vector<JobRecord>> JobStore::in_states(const std::vector<JobState>& states, bool documents,
                                                   std::int64_t limit) {
  Reader db = reader();
  std::string sql = std::string("SELECT ") + (documents ? kJobColumns : kScheduleColumns) + " FROM jobs WHERE state IN (";
  for (std::size_t i = 0; i < states.size(); ++i) sql += (i ? ", ?" : "?") + std::to_string(i + 1);
  sql += ") ORDER BY priority DESC, seq";
  if (limit > 0) sql += " LIMIT ?" + std::to_string(states.size() + 1);
  TAILOR_ASSIGN_OR_RETURN(Statement q, db->prepare(sql));
  for (std::size_t i = 0; i < states.size(); ++i) q.bind(static_cast<int>(i + 1), to_string(states[i]));
  if (limit > 0) q.bind(static_cast<int>(states.size() + 1), limit);
  std::vector<JobRecord> out;
  for (;;) {
    TAILOR_ASSIGN_OR_RETURN(const bool row, q.step());
    if (!row) break;
    out.push_back(read_job(q));
  }
  return out;
}

Status JobStore::apply_update(const std::string& id, const JobUpdate& changes) {
  std::string sql = "UPDATE jobs SET updated_at = ?1";
  int i = 2;
  for (const auto& [col, value] : changes.values()) sql += ", " + col + " = ?" + std::to_string(i++);
  sql += " WHERE id = ?" + std::to_string(i);
  TAILOR_ASSIGN_OR_RETURN(Statement q, db_.prepare(sql));
  q.bind(1, now_seconds());
  i = 2;
  for (const auto& [col, value] : changes.values()) {
    if (const auto* n = std::get_if<std::int64_t>(&value)) q.bind(i, *n);
    else if (const auto* d = std::get_if<double>(&value)) q.bind(i, *d);
    else if (const auto* s = std::get_if<std::string>(&value)) q.bind(i, *s);
    else q.bind_null(i);
    ++i;
  }
  q.bind(i, id);
  return q.run();
}

Status JobStore::insert_event(const std::string& id, const NewEvent& e, const std::string& from, const std::string& to) {
  TAILOR_ASSIGN_OR_RETURN(Statement q, db_.prepare("INSERT INTO events (job_id, time, kind, from_state, to_state, "
                                                   "message, data_json) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"));
  q.bind(1, id).bind(2, e.time > 0 ? e.time : now_seconds()).bind(3, e.kind);
  if (from.empty()) q.bind_null(4);
  else q.bind(4, from);
  if (to.empty()) q.bind_null(5);
  else q.bind(5, to);
  q.bind(6, e.message);
  if (e.data_json.empty()) q.bind_null(7);
  else q.bind(7, e.data_json);
  return q.run();
}

Status JobStore::transition(const std::string& id, JobState from, JobState to, const std::string& message,
                            const JobUpdate& changes, const std::string& data_json) {
  return noted(write([&]() -> Status {
    TAILOR_ASSIGN_OR_RETURN(Statement q, db_.prepare("SELECT state FROM jobs WHERE id = ?1"));
    q.bind(1, id);
    TAILOR_ASSIGN_OR_RETURN(const bool row, q.step());
    if (!row) return Status::not_found("no job " + id);
    const std::string current = q.text(0);
    if (current != to_string(from)) {
      return Status::failed_precondition("job " + id + " is " + current + ", not " + to_string(from));
    }
    JobUpdate all = changes;
    all.set("state", to_string(to));
    TAILOR_RETURN_IF_ERROR(apply_update(id, all));
    return insert_event(id, {"state", message, data_json, 0}, to_string(from), to_string(to));
  }));
}

Status JobStore::update(const std::string& id, const JobUpdate& changes) {
  return noted(write([&]() -> Status { return apply_update(id, changes); }));
}

Status JobStore::remove(const std::string& id) {
  return noted(write([&]() -> Status {
    TAILOR_ASSIGN_OR_RETURN(const JobRecord job, job_by_id(db_, id));
    if (!is_terminal(job.state)) {
      return Status::failed_precondition("job " + id + " is " + to_string(job.state) + ": cancel it first");
    }
    TAILOR_ASSIGN_OR_RETURN(Statement q, db_.prepare("DELETE FROM jobs WHERE id = ?1"));
    q.bind(1, id);
    TAILOR_RETURN_IF_ERROR(q.run());
    TAILOR_ASSIGN_OR_RETURN(Statement t,
                            db_.prepare("INSERT OR REPLACE INTO deleted_jobs (id, deleted_at) VALUES (?1, ?2)"));
    t.bind(1, id);
    t.bind(2, now_seconds());
    return t.run();
  }));
}

Result<std::vector<std::string>> JobStore::deleted_jobs() {
  Reader db = reader();
  TAILOR_ASSIGN_OR_RETURN(Statement q, db->prepare("SELECT id FROM deleted_jobs ORDER BY deleted_at"));
  std::vector<std::string> out;
  while (true) {
    TAILOR_ASSIGN_OR_RETURN(const bool row, q.step());
    if (!row) break;
    out.push_back(q.text(0));
  }
  return out;
}

Status JobStore::forget_deleted(const std::string& id) {
  return noted(write([&]() -> Status {
    TAILOR_ASSIGN_OR_RETURN(Statement q, db_.prepare("DELETE FROM deleted_jobs WHERE id = ?1"));
    q.bind(1, id);
    return q.run();
  }));
}

Status JobStore::add_event(const std::string& id, const NewEvent& event) {
  return noted(write([&]() -> Status { return insert_event(id, event, "", ""); }));
}

Status JobStore::ingest(const std::string& id, const IngestBatch& batch, const JobUpdate& changes) {
  // Step metrics are re-derivable from the run's files (the offsets move in
  // the same transaction), so their commit need not wait for a full fsync.
  const auto body = [&]() -> Status {
    for (const NewEvent& e : batch.events)
      TAILOR_RETURN_IF_ERROR(insert_event(id, e, "", ""));
    if (!batch.metrics.empty()) {
      std::string sql =
          "INSERT OR REPLACE INTO step_metrics (job_id, rank, step, attempt, time, loss, lr, grad_norm, tokens, "
          "tokens_per_second, step_seconds, allocated_bytes, peak_bytes, eval_loss, eval_tokens, eval_seconds, mfu";
      for (const auto& c : component_columns())
        sql += ", " + c;
      for (const PreferenceMetric& p : kPreferenceMetrics)
        sql += std::string(", ") + p.column;
      sql += ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17";
      const std::size_t extra = component_columns().size() + std::size(kPreferenceMetrics);
      for (std::size_t i = 0; i < extra; ++i)
        sql += ", ?" + std::to_string(18 + i);
      sql += ")";
      TAILOR_ASSIGN_OR_RETURN(Statement q, db_.prepare(sql));
      for (const StepMetric& m : batch.metrics) {
        q.reset();
        q.bind(1, id).bind(2, m.rank).bind(3, m.step).bind(4, m.attempt).bind(5, m.time);
        q.bind(6, m.loss).bind(7, m.lr).bind(8, m.grad_norm).bind(9, m.tokens).bind(10, m.tokens_per_second);
        q.bind(11, m.step_seconds).bind(12, m.allocated_bytes).bind(13, m.peak_bytes);
        q.bind(14, m.eval_loss).bind(15, m.eval_tokens).bind(16, m.eval_seconds).bind(17, m.mfu);
        int b = 18;
        for (const auto& name : memory_component_names()) {
          const auto it = m.component_bytes.find(name);
          if (it == m.component_bytes.end())
            q.bind_null(b++);
          else
            q.bind(b++, it->second);
        }
        for (const PreferenceMetric& p : kPreferenceMetrics) {
          const auto it = m.preference.find(p.key);
          if (it == m.preference.end())
            q.bind_null(b++);
          else
            q.bind(b++, it->second);
        }
        TAILOR_RETURN_IF_ERROR(q.run());
      }
    }
    JobUpdate all = changes;
    all.set("metrics_offset", batch.metrics_offset).set("events_offset", batch.events_offset);
    return apply_update(id, all);
  };
  return noted(write(body, /*durable=*/false));
}

namespace {

constexpr const char* kEventColumns =
    "id, job_id, time, kind, COALESCE(from_state, ''), COALESCE(to_state, ''), message, COALESCE(data_json, '')";

Result<std::vector<EventRecord>> read_events(Statement& q) {
  std::vector<EventRecord> out;
  for (;;) {
    TAILOR_ASSIGN_OR_RETURN(const bool row, q.step());
    if (!row) break;
    out.push_back({q.int64(0), q.text(1), q.real(2), q.text(3), q.text(4), q.text(5), q.text(6), q.text(7)});
  }
  return out;
}

}  // namespace

Result<std::vector<EventRecord>> JobStore::events(const std::string& id, std::int64_t after_id, std::int64_t limit) {
  Reader db = reader();
  TAILOR_ASSIGN_OR_RETURN(Statement q, db->prepare(std::string("SELECT ") + kEventColumns +
                                                   " FROM events WHERE job_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3"));
  q.bind(1, id).bind(2, after_id).bind(3, limit);
  return read_events(q);
}

Result<std::vector<EventRecord>> JobStore::all_events(std::int64_t after_id, std::int64_t limit) {
  Reader db = reader();
  TAILOR_ASSIGN_OR_RETURN(Statement q, db->prepare(std::string("SELECT ") + kEventColumns +
                                                   " FROM events WHERE id > ?1 ORDER BY id LIMIT ?2"));
  q.bind(1, after_id).bind(2, limit);
  return read_events(q);
}

Result<std::int64_t> JobStore::last_event_id() {
  Reader db = reader();
  TAILOR_ASSIGN_OR_RETURN(Statement q, db->prepare("SELECT COALESCE(MAX(id), 0) FROM events"));
  TAILOR_ASSIGN_OR_RETURN(const bool row, q.step());
  return row ? q.int64(0) : 0;
}

Result<std::map<std::int64_t, std::int64_t>> JobStore::peak_by_attempt(const std::string& id) {
  Reader db = reader();
  TAILOR_ASSIGN_OR_RETURN(Statement q, db->prepare("SELECT attempt, MAX(peak_bytes) FROM step_metrics WHERE job_id = ?1 "
                                                   "AND peak_bytes IS NOT NULL GROUP BY attempt"));
  q.bind(1, id);
  std::map<std::int64_t, std::int64_t> out;
  for (;;) {
    TAILOR_ASSIGN_OR_RETURN(const bool row, q.step());
    if (!row) break;
    out[q.int64(0)] = q.int64(1);
  }
  return out;
}

Result<std::vector<StepMetric>> JobStore::metrics(const std::string& id, std::int64_t since_step, std::int64_t limit) {
  Reader db = reader();
  std::string sql =
      "SELECT rank, step, attempt, time, loss, lr, grad_norm, tokens, tokens_per_second, step_seconds, "
      "allocated_bytes, peak_bytes, eval_loss, eval_tokens, eval_seconds, mfu";
  for (const auto& c : component_columns()) sql += ", " + c;
  for (const PreferenceMetric& p : kPreferenceMetrics) sql += std::string(", ") + p.column;
  sql += " FROM step_metrics WHERE job_id = ?1 AND step > ?2 ORDER BY step, rank LIMIT ?3";
  TAILOR_ASSIGN_OR_RETURN(Statement q, db->prepare(sql));
  q.bind(1, id).bind(2, since_step).bind(3, limit);
  std::vector<StepMetric> out;
  for (;;) {
    TAILOR_ASSIGN_OR_RETURN(const bool row, q.step());
    if (!row) break;
    StepMetric m;
    m.rank = q.int64(0);
    m.step = q.int64(1);
    m.attempt = q.int64(2);
    m.time = q.real(3);
    m.loss = q.opt_real(4);
    m.lr = q.opt_real(5);
    m.grad_norm = q.opt_real(6);
    m.tokens = q.opt_int64(7);
    m.tokens_per_second = q.opt_real(8);
    m.step_seconds = q.opt_real(9);
    m.allocated_bytes = q.opt_int64(10);
    m.peak_bytes = q.opt_int64(11);
    m.eval_loss = q.opt_real(12);
    m.eval_tokens = q.opt_int64(13);
    m.eval_seconds = q.opt_real(14);
    m.mfu = q.opt_real(15);
    int c = 16;
    for (const auto& name : memory_component_names()) {
      if (auto v = q.opt_int64(c++)) m.component_bytes[name] = *v;
    }
    for (const PreferenceMetric& p : kPreferenceMetrics) {
      if (auto v = q.opt_real(c++)) m.preference[p.key] = *v;
    }
    out.push_back(std::move(m));
  }
  return out;
}

Result<std::map<JobState, std::int64_t>> JobStore::count_by_state() {
  Reader db = reader();
  TAILOR_ASSIGN_OR_RETURN(Statement q, db->prepare("SELECT state, COUNT(*) FROM jobs GROUP BY state"));
  std::map<JobState, std::int64_t> out;
  for (JobState s : all_job_states()) out[s] = 0;
  for (;;) {
    TAILOR_ASSIGN_OR_RETURN(const bool row, q.step());
    if (!row) break;
    if (auto s = parse_job_state(q.text(0))) out[*s] = q.int64(1);
  }
  return out;
}

}  // namespace tailor::daemon
