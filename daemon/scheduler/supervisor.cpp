#include "daemon/scheduler/supervisor.h"

#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "core/units.h"
#include "daemon/executor/local_executor.h"
#include "daemon/executor/run_files.h"
#include "daemon/executor/slurm_executor.h"
#include "daemon/scheduler/scheduler.h"
#include "platform/calibration_store.h"
#include "platform/files.h"
#include "runner/protocol/calibration_runs.h"
#include "runner/protocol/events.h"
#include "runner/protocol/exit_code.h"
#include "runner/protocol/heartbeat.h"
#include "runner/protocol/launch_env.h"
#include "runner/protocol/plan_reader.h"

namespace tailor::daemon {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A write that failed for the store's own reasons (locked by another
// process, disk full, I/O): worth trying again. Anything else (the job was
// deleted, or is no longer in the expected state) will not change.
bool store_cannot_write(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kNoSpace || s.code() == StatusCode::kIOError;
}

// Seconds on the monotonic clock: waits that a wall clock stepped back
// must not stretch.
double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string describe_exit(const ProcessExit& e) {
  if (e.signal) return "killed by signal " + std::to_string(e.signal) + " (" + strsignal(e.signal) + ")";
  return "exit code " + std::to_string(e.code);
}

}  // namespace

namespace {

// The plan document's per-GPU estimate by component; `total` its sum.
std::map<std::string, std::int64_t> plan_components(const json& j, std::int64_t& total) {
  std::map<std::string, std::int64_t> out;
  total = 0;
  if (!j.is_object()) return out;
  const json* per = nullptr;
  if (auto m = j.find("memory"); m != j.end() && m->is_object()) {
    if (auto p = m->find("per_gpu"); p != m->end() && p->is_object()) per = &*p;
  }
  if (!per) return out;
  for (const auto& name : memory_component_names()) {
    if (auto v = per->find(name); v != per->end() && v->is_number_integer()) out[name] = v->get<std::int64_t>();
  }
  if (auto t = per->find("total"); t != per->end() && t->is_number_integer()) total = t->get<std::int64_t>();
  return out;
}

}  // namespace

Supervisor::Supervisor(JobStore& store, DaemonMetrics& metrics, SupervisorOptions options)
    : store_(store), metrics_(metrics), options_(std::move(options)) {
  std::vector<Executor*> use = options_.executors;
  if (use.empty()) {
    owned_.push_back(std::make_unique<LocalExecutor>(
        LocalExecutorOptions{options_.runner_path, options_.host_budget_bytes, options_.gpus}));
    if (options_.slurm) {
      owned_.push_back(std::make_unique<SlurmExecutor>(
          SlurmExecutorOptions{options_.runner_path, options_.planning, options_.slurm, options_.slurm_poll_seconds}));
    }
    for (const auto& e : owned_) use.push_back(e.get());
  }
  for (Executor* e : use) executors_[e->kind()] = e;
}

Executor* Supervisor::executor_for(ExecutorKind kind) const {
  auto it = executors_.find(kind);
  return it == executors_.end() ? nullptr : it->second;
}
Supervisor::~Supervisor() { stop(); }

std::string Supervisor::job_dir(const std::string& id) const {
  // Plain concatenation: a listing asks for fifty of these per page, and
  // composing fs::paths was a visible share of it.
  std::string dir = options_.data_dir;
  if (!dir.empty() && dir.back() != '/') dir += '/';
  return dir + "jobs/" + id;
}

void Supervisor::record_calibration(const std::vector<runner::CalibrationRun>& runs) const {
  const std::string& path = options_.planning.calibration_path;
  if (path.empty() || runs.empty()) return;
  auto store = platform::CalibrationStore::open(path);
  Status s = store.is_ok() ? Status::ok() : store.status();
  for (const runner::CalibrationRun& c : runs) {
    if (s.is_ok()) s = store->add({c.key, c.source, c.summary, c.sample, {}});
  }
  log_status(s, "recording calibration in " + path);
}

void Supervisor::record_calibration_of_run(const std::string& id, const std::string& plan_json) const {
  std::ifstream in((fs::path(job_dir(id)) / "metrics.jsonl").string());
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    lines.push_back(std::move(line));
  if (auto run = runner::run_calibration(plan_json, lines)) record_calibration({*run});
}

void Supervisor::log_status(const Status& s, const std::string& what) const {
  if (!s.is_ok()) log_error("tailord: " + what + ": " + s.to_string());
}

void Supervisor::start() {
  for (const auto& [kind, e] : executors_) e->start();
  thread_ = std::thread([this] { loop(); });
}

void Supervisor::stop() {
  {
    std::lock_guard lock(wake_mu_);
    stopping_ = true;
  }
  wake_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (const auto& [kind, e] : executors_) e->stop();
}

void Supervisor::wake() {
  {
    std::lock_guard lock(wake_mu_);
    woken_ = true;
  }
  wake_cv_.notify_all();
}

void Supervisor::loop() {
  for (;;) {
    {
      std::unique_lock lock(wake_mu_);
      wake_cv_.wait_for(lock, std::chrono::duration<double>(options_.poll_seconds),
                        [this] { return woken_ || stopping_; });
      if (stopping_) return;
      woken_ = false;
    }
    try {
      tick();
    } catch (const std::exception& e) {
      // A bug in one tick must not stop supervision of every other job.
      log_error(std::string("tailord: supervisor tick: ") + e.what());
    }
  }
}

std::unique_lock<std::mutex> Supervisor::request_lock() {
  {
    std::lock_guard turn(turn_mu_);
    ++requests_waiting_;
  }
  std::unique_lock lock(mu_);
  {
    std::lock_guard turn(turn_mu_);
    --requests_waiting_;
  }
  turn_cv_.notify_all();
  return lock;
}

void Supervisor::let_requests_in(std::unique_lock<std::mutex>& lock) {
  {
    std::unique_lock turn(turn_mu_);
    if (requests_waiting_ > 0) {
      if (lock.owns_lock()) lock.unlock();
      turn_cv_.wait(turn, [this] { return requests_waiting_ == 0; });
    }
  }
  if (!lock.owns_lock()) lock.lock();
}

void Supervisor::tick() {
  // A tick under a burst of submissions writes to the store for every
  // running job and every start, each write waiting for its group commit:
  // seconds in all. Requests waiting for mu_ (request_lock) go in before it
  // and between its jobs.
  std::unique_lock lock(mu_, std::defer_lock);
  let_requests_in(lock);
  // An unwritable store learns here when it can be written again (GET
  // /healthz reports what it last found).
  (void)store_.probe();
  std::vector<std::string> ended;
  for (const auto& [kind, e] : executors_) e->begin_tick();
  // Requests neither add nor remove running jobs, so the entries stay
  // while they go in.
  for (auto& [id, r] : running_) {
    let_requests_in(lock);
    if (r.unrecorded_start && !record_start(r)) continue;
    if (!r.exit) {
      ingest(r);
      if (!observe(r, r.executor->poll(id))) {
        ended.push_back(id);  // never launched: queued again
        continue;
      }
    }
    if (r.exit) {
      // The last lines, or those a failed store write left: all of them
      // before the verdict, however far the runner wrote ahead.
      if (ingest_all(r) == Ingested::kFailed) continue;
      if (judge(r)) ended.push_back(id);
      continue;
    }
    check_heartbeat(r);
    if (r.cancel_requested) {
      const double now = now_seconds();
      if (!r.cancel_sent_at) {
        r.executor->signal(id, false);
        r.cancel_sent_at = now;
        log_status(store_.update(id, JobUpdate().set("cancel_sent_at", now)), "recording SIGTERM");
      } else if (now - *r.cancel_sent_at > options_.cancel_grace_seconds) {
        r.executor->signal(id, true);
      }
    }
  }
  for (const auto& id : ended) {
    running_.at(id).executor->forget(id);
    running_.erase(id);
  }
  reap_cache_prune();
  if (!ended.empty()) prune_cache();
  schedule_queued(lock);
}

void Supervisor::prune_cache() {
  if (options_.cache_max_bytes <= 0) return;
  if (cache_prune_pid_ > 0) {
    cache_prune_again_ = true;  // what this job left is pruned by the next one
    return;
  }
  platform::LaunchRequest req;
  req.argv = {options_.cache_tool, "cache", "prune", "--max-size", std::to_string(options_.cache_max_bytes),
              "--output",          "json"};
  req.env = options_.runner_env;  // the runners' cache folder
  req.log_path = (fs::path(options_.data_dir) / "cache-prune.log").string();
  auto p = platform::launch_process(req);
  if (!p.is_ok()) {
    log_warning("cannot prune the cache folder: " + p.status().message());
    return;
  }
  cache_prune_pid_ = p->pid;
}

void Supervisor::reap_cache_prune() {
  if (cache_prune_pid_ <= 0) return;
  auto ended = platform::reap_child(cache_prune_pid_);
  if (ended.is_ok() && !ended->has_value()) return;  // still pruning
  if (ended.is_ok() && (**ended).code != 0) {
    log_warning("pruning the cache folder failed (" + describe_exit(**ended) + "): see " +
                (fs::path(options_.data_dir) / "cache-prune.log").string());
  }
  cache_prune_pid_ = -1;
  if (cache_prune_again_) {
    cache_prune_again_ = false;
    prune_cache();
  }
}

bool Supervisor::observe(Running& r, Observation o) {
  if (o.started) {
    // A runner that has not beaten yet is as old as its start (a Slurm
    // job's time in the queue does not count).
    r.watched_since = std::chrono::steady_clock::now();
    auto job = store_.get(r.id);
    note_start(r, *o.started, plan_facts(job.is_ok() ? job->plan_json : ""));
    // Already running (its start was stored before a restart): not a failure.
    const Status s = store_.transition(r.id, JobState::kPlanning, JobState::kRunning, r.start_message,
                                       *r.unrecorded_start, r.start_data);
    if (!s.is_ok() && s.code() != StatusCode::kFailedPrecondition) log_status(s, "starting " + r.id);
    r.unrecorded_start.reset();
  }
  if (!o.record.values().empty()) {
    log_status(store_.update(r.id, o.record), "recording the executor state of " + r.id);
  }
  if (o.event) log_status(store_.add_event(r.id, *o.event), "recording the executor state of " + r.id);
  if (!o.requeue.empty()) {
    const Status s = store_.transition(r.id, JobState::kPlanning, JobState::kQueued, o.requeue);
    if (s.is_ok() || s.code() == StatusCode::kFailedPrecondition) return false;
    log_status(s, "queueing " + r.id + " again");
  }
  if (o.exit) {
    r.exit = o.exit;
    r.exit_context = r.lost.empty() ? o.context : o.context.empty() ? r.lost : r.lost + "; " + o.context;
  }
  return true;
}

void Supervisor::check_heartbeat(Running& r) {
  if (options_.heartbeat_timeout_seconds <= 0 || !r.lost.empty()) return;
  if (!r.executor->beating(r.id)) return;  // pending: nothing beats yet
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  // `what`: "in FILE for N s", or "for N s since the runner started".
  auto declare_lost = [&](const std::string& name, double age, const std::string& what) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "lost: no heartbeat %s (stopped or frozen); killed", what.c_str());
    r.lost = buf;
    log_status(store_.add_event(r.id, {"lost", r.lost, json{{"file", name}, {"age_seconds", age}}.dump(), 0}),
               "recording the loss of " + r.id);
    // SIGKILL ends a stopped process too; its exit is judged next tick.
    r.executor->signal(r.id, true);
  };
  bool any = false;
  for (const auto& entry : fs::directory_iterator(job_dir(r.id), ec)) {
    const std::string name = entry.path().filename().string();
    if (!runner::is_heartbeat_file_name(name)) continue;
    std::error_code tec;
    const auto beat = fs::last_write_time(entry.path(), tec);
    if (tec) continue;  // gone meanwhile
    any = true;
    const double age = std::chrono::duration<double>(now - beat).count();
    if (age <= options_.heartbeat_timeout_seconds) continue;
    char what[160];
    std::snprintf(what, sizeof what, "in %s for %.0f s", name.c_str(), age);
    return declare_lost(name, age, what);
  }
  // A runner stopped before its first beat: its heartbeat is as old as
  // this tailord's watch of the attempt (no file is made for it at launch,
  // one file fewer per job).
  if (any || ec) return;
  const double age = std::chrono::duration<double>(std::chrono::steady_clock::now() - r.watched_since).count();
  if (age > options_.heartbeat_timeout_seconds) {
    char what[80];
    std::snprintf(what, sizeof what, "for %.0f s since the runner started", age);
    declare_lost(runner::heartbeat_file_name(std::nullopt), age, what);
  }
}

namespace {

// The job folder's probed plan (runner/torch/trainer.h's kProbedPlanFile)
// when it holds a measured probe; else why not.
Result<std::string> read_probed_plan(const fs::path& dir) {
  const std::string path = (dir / "plan.probed.json").string();
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::not_found("cannot open " + path);
  std::stringstream text;
  text << in.rdbuf();
  TAILOR_ASSIGN_OR_RETURN(const auto table, runner::parse_probe(text.str(), path));
  if (!table || !table->measured()) return Status::invalid_argument(path + ": no measured probe");
  return text.str();
}

}  // namespace

Supervisor::Ingested Supervisor::ingest(Running& r) {
  const fs::path dir = job_dir(r.id);
  std::int64_t ev_off = r.events_offset, m_off = r.metrics_offset;
  auto ev = read_new_lines((dir / "events.jsonl").string(), ev_off);
  auto ms = read_new_lines((dir / "metrics.jsonl").string(), m_off);
  if (!ev.is_ok() || !ms.is_ok()) {
    // Not the store's failure: the verdict need not wait for lines that
    // cannot be read.
    log_status(ev.is_ok() ? ms.status() : ev.status(), "reading run files of " + r.id);
    return Ingested::kNothing;
  }
  if (ev->empty() && ms->empty()) return Ingested::kNothing;
  IngestBatch batch;
  std::optional<std::string> probed;  // the plan as its probe measured it
  batch.events_offset = ev_off;
  batch.metrics_offset = m_off;
  for (const auto& line : *ev) {
    auto e = parse_event_line(line);
    if (!e) continue;
    if (e->kind == std::string("runner.") + runner::events::kOom) r.last_oom_json = e->data_json;
    if (e->kind == std::string("runner.") + runner::events::kError) r.last_error = e->message;
    if (e->kind == std::string("runner.") + runner::events::kProbeDone) {
      auto plan = read_probed_plan(dir);
      if (plan.is_ok()) {
        probed = std::move(plan).value();
        record_calibration(runner::probe_calibration(*probed));
      } else {
        log_status(plan.status(), "reading the probed plan of " + r.id);
      }
    }
    if (e->kind == std::string("runner.") + runner::events::kTracker) {
      const json t = json::parse(e->data_json, nullptr, false);
      const std::string tracker = t.is_object() ? t.value("tracker", std::string()) : "";
      // The runner's two trackers only: a label from a file stays a closed set.
      if (tracker == "tensorboard" || tracker == "mlflow") {
        const std::string state = t.value("state", std::string());
        metrics_.set_job_tracker(r.id, r.name, tracker, state == "up" || state == "closed");
      }
    }
    batch.events.push_back(std::move(*e));
  }
  for (const auto& line : *ms) {
    auto m = parse_metric_line(line, r.attempt);
    if (!m) continue;
    r.last_step = std::max(r.last_step.value_or(0), m->step);
    if (m->peak_bytes) r.peak_bytes = std::max(r.peak_bytes.value_or(0), *m->peak_bytes);
    batch.metrics.push_back(std::move(*m));
  }
  if (!batch.metrics.empty()) {
    const StepMetric& last = batch.metrics.back();
    metrics_.set_job_step(r.id, r.name, last.step, last.loss.value_or(NAN), last.tokens_per_second.value_or(0),
                          last.component_bytes, last.peak_bytes.value_or(0), last.rank_peak_bytes);
    if (last.mfu) metrics_.set_job_mfu(r.id, r.name, *last.mfu);
  }
  // A preference job's newest value of each preference metric (eval ones only on
  // evaluated steps), by column name.
  std::map<std::string, double> preference;
  for (auto m = batch.metrics.rbegin(); m != batch.metrics.rend(); ++m) {
    for (const PreferenceMetric& p : kPreferenceMetrics) {
      if (const auto it = m->preference.find(p.key); it != m->preference.end()) preference.emplace(p.column, it->second);
    }
  }
  metrics_.set_job_preference(r.id, r.name, preference);
  JobUpdate changes;
  if (r.last_step) changes.set("last_step", *r.last_step);
  for (auto m = batch.metrics.rbegin(); m != batch.metrics.rend(); ++m) {
    if (!m->eval_loss) continue;
    metrics_.set_job_eval_loss(r.id, r.name, *m->eval_loss);
    changes.set("last_eval_step", m->step).set("last_eval_loss", *m->eval_loss);
    break;
  }
  if (r.peak_bytes) changes.set("peak_bytes", *r.peak_bytes);
  // The job's plan becomes the probed one: its page shows the measurements,
  // and a retry trains the plan the probe chose without probing again.
  if (probed) changes.set("plan_json", std::move(*probed));
  const Status s = store_.ingest(r.id, batch, changes);
  if (s.is_ok()) {
    r.events_offset = ev_off;
    r.metrics_offset = m_off;
    r.store_error.clear();
    return Ingested::kSome;
  }
  if (s.message() != r.store_error) log_status(s, "storing metrics of " + r.id + " (tried again every tick)");
  r.store_error = s.message();
  return Ingested::kFailed;
}

Supervisor::Ingested Supervisor::ingest_all(Running& r) {
  Ingested last = Ingested::kSome;
  while (last == Ingested::kSome) last = ingest(r);
  return last;
}

std::string Supervisor::log_tail(const std::string& id) const {
  std::ifstream f((fs::path(job_dir(id)) / "runner.log").string(), std::ios::binary);
  if (!f) return {};
  f.seekg(0, std::ios::end);
  const std::streamoff size = f.tellg();
  f.seekg(std::max<std::streamoff>(0, size - 4096));
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  // The last non-empty line, without progress-bar carriage returns.
  std::string last;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const auto cr = line.rfind('\r');
    if (cr != std::string::npos) line = line.substr(cr + 1);
    if (!line.empty()) last = line;
  }
  return last;
}

struct OomEvent {
  Bytes budget;
  std::optional<strategies::MemoryBreakdown> measured;
  std::int64_t peak = 0;  // the measured peak, or what the failing allocation needed
};

namespace {

OomEvent read_oom_event(const std::string& text) {
  OomEvent out;
  const json oom = json::parse(text.empty() ? "{}" : text, nullptr, false);
  if (!oom.is_object()) return out;
  out.budget = Bytes(oom.value("budget_bytes", std::int64_t{0}));
  if (auto m = oom.find("memory"); m != oom.end() && m->is_object()) {
    strategies::MemoryBreakdown b;
    auto get = [&](const char* k) { return Bytes(m->value(k, std::int64_t{0})); };
    for (const strategies::MemoryComponent& c : strategies::kMemoryComponents) b.*c.member = get(c.key);
    out.measured = b;
    out.peak = m->value("peak_bytes", std::int64_t{0});
  }
  // The failing allocation shows what was needed at that moment.
  out.peak = std::max(out.peak, oom.value("requested_bytes", std::int64_t{0}) + oom.value("in_use_bytes", std::int64_t{0}));
  return out;
}

}  // namespace

OutcomePolicy Supervisor::policy() const {
  return {options_.max_oom_replans, options_.backoff_seconds, options_.max_backoff_seconds};
}

bool Supervisor::judge(Running& r) {
  const Status s = r.launch_error.empty() ? finish(r, *r.exit, r.exit_context) : launch_failed(r, r.launch_error);
  if (s.is_ok()) return true;
  if (!store_cannot_write(s)) {
    log_status(s, "judging the attempt of " + r.id);
    return true;
  }
  if (s.message() != r.store_error) log_status(s, "storing the end of " + r.id + "'s attempt (tried again every tick)");
  r.store_error = s.message();
  return false;
}

bool Supervisor::record_start(Running& r) {
  const Status s =
      store_.transition(r.id, JobState::kPlanning, JobState::kRunning, r.start_message, *r.unrecorded_start, r.start_data);
  if (!s.is_ok() && store_cannot_write(s)) {
    if (s.message() != r.store_error) log_status(s, "storing the start of " + r.id + " (tried again every tick)");
    r.store_error = s.message();
    return false;
  }
  log_status(s, "starting " + r.id);
  r.unrecorded_start.reset();
  r.store_error.clear();
  return true;
}

Status Supervisor::finish(Running& r, const ProcessExit& exit, const std::string& context) {
  auto job = store_.get(r.id);
  if (!job.is_ok()) return job.status();
  const OomEvent oom = read_oom_event(r.last_oom_json);
  AttemptEnd end;
  end.exit_code = exit.code;
  end.signal = exit.signal;
  end.cancel_requested = r.cancel_requested || job->cancel_requested;
  end.oom_reported = oom.budget.count() > 0;
  end.failures = job->failures;
  end.retries = job->retries;
  end.oom_restarts = job->oom_restarts;
  const Outcome o = decide_outcome(end, policy());

  const double now = now_seconds();
  JobUpdate u;
  u.set("exit_code", static_cast<std::int64_t>(exit.code)).set("exit_signal", static_cast<std::int64_t>(exit.signal));
  u.set_null("pid").set_null("pid_start_ticks");
  const std::string prefix = context.empty() ? "" : context + ": ";
  const std::string detail = !r.last_error.empty() ? r.last_error : log_tail(r.id);
  const std::string what = prefix + describe_exit(exit) + (detail.empty() ? "" : ": " + detail);
  auto end_as = [&](JobState to, const std::string& message) {
    u.set("finished_at", now);
    const Status s = store_.transition(r.id, job->state, to, message, u);
    if (s.is_ok()) metrics_.job_finished(r.id);
    return s;
  };
  switch (o.verdict) {
    case Verdict::kCancelled:
      u.set("exit_reason", prefix + "cancelled by request (" + describe_exit(exit) + ")");
      return end_as(JobState::kCancelled, "cancelled: runner stopped");
    case Verdict::kSucceeded: {
      u.set("exit_reason", "");
      // Before the job reads as succeeded: whoever sees it succeed (a
      // client, the next job's plan) sees its run in the calibration store.
      // Once per attempt, though the store write below may be tried again.
      if (!r.run_calibrated) record_calibration_of_run(r.id, job->plan_json);
      r.run_calibrated = true;
      return end_as(JobState::kSucceeded, prefix + "runner finished");
    }
    case Verdict::kReplan:
      return replan(r, *job, oom, u);
    case Verdict::kRetry:
      return retry(r, *job, o, what, u);
    case Verdict::kFailed:
      break;
  }
  switch (o.cause) {
    case FailureCause::kOutOfMemory:
      u.set("oom_restarts", o.oom_restarts);
      if (oom.peak > 0) u.set("peak_bytes", std::max(oom.peak, job->peak_bytes.value_or(0)));
      u.set("exit_reason", o.reason);
      return end_as(JobState::kFailed, "failed: " + o.reason);
    case FailureCause::kBadInput:
      u.set("exit_reason", o.reason + ": " + what);
      return end_as(JobState::kFailed, "runner refused its input");
    case FailureCause::kDiverged:
      u.set("exit_reason", o.reason + ": " + what);
      return end_as(JobState::kFailed, "training diverged");
    case FailureCause::kRetriesExhausted:
    case FailureCause::kNone:
      u.set("failures", o.failures).set("exit_reason", what + " (" + o.reason + ")");
      return end_as(JobState::kFailed, "failed: " + what);
  }
  return Status::internal("no verdict for the attempt of " + r.id);
}

Status Supervisor::launch_failed(Running& r, const std::string& why) {
  auto job = store_.get(r.id);
  if (!job.is_ok()) return job.status();
  AttemptEnd end;
  end.exit_code = runner::exit_status(runner::RunnerExit::kFailure);
  end.failures = job->failures;
  end.retries = job->retries;
  end.oom_restarts = job->oom_restarts;
  const Outcome o = decide_outcome(end, policy());
  const std::string what = "cannot start tailor-runner: " + why;
  JobUpdate u;
  if (o.verdict == Verdict::kRetry) return retry(r, *job, o, what, u);
  u.set("failures", o.failures).set("finished_at", now_seconds()).set("exit_reason", what + " (" + o.reason + ")");
  const Status s = store_.transition(r.id, job->state, JobState::kFailed, "failed: " + what, u);
  if (s.is_ok()) metrics_.job_finished(r.id);
  return s;
}

Status Supervisor::retry(Running& r, const JobRecord& job, const Outcome& o, const std::string& reason, JobUpdate u) {
  u.set("failures", o.failures).set("next_attempt_at", now_seconds() + o.backoff_seconds).set("exit_reason", reason);
  retry_due_[r.id] = steady_seconds() + o.backoff_seconds;
  json data = {{"failure", o.failures}, {"retries", job.retries}, {"backoff_seconds", o.backoff_seconds}, {"reason", reason}};
  char msg[96];
  std::snprintf(msg, sizeof msg, "retry %lld of %lld in %.1f s (resumes from the last checkpoint)",
                static_cast<long long>(o.failures), static_cast<long long>(job.retries), o.backoff_seconds);
  const Status s = store_.transition(r.id, job.state, JobState::kQueued, msg, u, data.dump());
  if (s.is_ok()) metrics_.add_retry();
  return s;
}

Status Supervisor::replan(Running& r, const JobRecord& job, const OomEvent& oom, JobUpdate u) {
  u.set("oom_restarts", job.oom_restarts + 1);
  if (oom.peak > 0) u.set("peak_bytes", std::max(oom.peak, job.peak_bytes.value_or(0)));
  const double now = now_seconds();
  auto give_up = [&](const std::string& reason) {
    u.set("exit_reason", reason).set("finished_at", now);
    const Status s = store_.transition(r.id, job.state, JobState::kFailed, "failed: " + reason, u);
    if (s.is_ok()) metrics_.job_finished(r.id);
    return s;
  };
  auto failed = runner::parse_plan_strategy(job.plan_json, "the job's plan");
  if (!failed.is_ok()) return give_up("out of memory, and the job's plan is unreadable: " + failed.status().message());
  // The spec as it was resolved at submission (the plan carries it): a
  // base file edited since must not change a running job.
  const json plan_doc = json::parse(job.plan_json, nullptr, false);
  if (!plan_doc.is_object() || !plan_doc.contains("spec") || !plan_doc["spec"].is_object()) {
    return give_up("out of memory, and the job's plan carries no resolved spec");
  }
  std::string story;
  auto next = replan_after_oom(plan_doc["spec"].dump(), "the job's resolved spec", options_.planning,
                               strategies::OomReport{*failed, oom.budget, oom.measured}, story, job.executor);
  if (!next.is_ok()) return give_up("out of memory: " + next.status().message());
  std::int64_t total = 0;
  const auto components = plan_components(json::parse(next->plan_json, nullptr, false), total);
  const std::int64_t reserve = estimated_job_bytes(next->plan, job.memory_limit_bytes);
  u.set("plan_json", next->plan_json).set("estimated_bytes", reserve).set_null("next_attempt_at");
  u.set("exit_reason", "out of memory at " + Bytes(oom.peak).to_string() + " of a " + oom.budget.to_string() + " budget");
  json data = {{"attempt", r.attempt},
               {"measured_peak_bytes", oom.peak},
               {"budget_bytes", oom.budget.count()},
               {"from", failed->describe()},
               {"to", next->plan.chosen.strategy.describe()},
               {"estimated_bytes", next->plan.chosen.memory.per_device.total().count()},
               {"global_batch", next->plan.global_batch}};
  TAILOR_RETURN_IF_ERROR(store_.transition(r.id, job.state, JobState::kQueued,
                                           "out of memory; " + story + "; resuming from the last checkpoint", u,
                                           data.dump()));
  log_status(store_.add_event(r.id, {"replan", story, data.dump(), 0}), "recording re-plan of " + r.id);
  metrics_.set_job_estimate(r.id, r.name, components, total);
  metrics_.add_oom_restart();
  return Status::ok();
}

void Supervisor::schedule_queued(std::unique_lock<std::mutex>& lock) {
  // Every tick reads the head of the queue: its records without spec or
  // plan, the whole record only of a job that starts. The first job that
  // does not fit blocks those behind it (scheduler.h), so a tick never
  // needs more than the window, and its cost does not grow with the queue
  // (reading all of it, every tick of a submission burst, slowed the
  // submissions down as the queue grew).
  auto queued = store_.in_states({JobState::kQueued}, /*documents=*/false, options_.queue_window);
  if (!queued.is_ok()) return log_status(queued.status(), "listing queued jobs");
  const bool whole_queue = static_cast<std::int64_t>(queued->size()) < options_.queue_window;
  // Past the window, a /metrics scrape counts the queue (publish_metrics).
  if (whole_queue) metrics_.set_queue_length(static_cast<std::int64_t>(queued->size()));
  // A retry's wait is kept on the monotonic clock (retry_not_before).
  std::map<std::string, double> still_due;
  const double wall_now = now_seconds(), steady_now = steady_seconds();
  const double longest = std::max(policy().max_backoff_seconds, options_.slurm_poll_seconds);
  for (JobRecord& j : *queued) {
    const auto due = retry_due_.find(j.id);
    std::optional<double> steady_due;
    if (due != retry_due_.end()) {
      steady_due = due->second;
      still_due.emplace(j.id, due->second);
    }
    if (j.next_attempt_at) {
      j.next_attempt_at = retry_not_before(*j.next_attempt_at, steady_due, wall_now, steady_now, longest);
    }
  }
  // A retry's due time is forgotten once its job has left the queue; jobs
  // past the window are still in it.
  if (!whole_queue) {
    for (const auto& [id, due] : retry_due_)
      still_due.emplace(id, due);
  }
  retry_due_ = std::move(still_due);
  if (queued->empty()) return;
  std::map<Executor*, std::vector<const JobRecord*>> by_executor;
  std::map<std::string, const JobRecord*> by_id;
  for (const JobRecord& j : *queued) {
    by_id[j.id] = &j;
    if (Executor* e = executor_for(j.executor)) {
      by_executor[e].push_back(&j);
      continue;
    }
    // Submitted to a tailord that had this executor: nothing here can run it.
    const std::string why = std::string("this tailord has no ") + dsl::to_string(j.executor) +
                            " executor (tailord --executor slurm|auto)";
    JobUpdate u;
    u.set("exit_reason", "cannot run: " + why).set("finished_at", now_seconds());
    log_status(store_.transition(j.id, JobState::kQueued, JobState::kFailed, why, u), "failing " + j.id);
  }
  for (const auto& [executor, jobs] : by_executor) {
    for (const Placement& p : executor->place(jobs, now_seconds())) {
      const JobRecord& j = *by_id.at(p.id);
      if (p.action == Placement::Action::kWait) {
        note_waiting(j, p.reason);
        continue;
      }
      if (p.action == Placement::Action::kNeverFits) {
        JobUpdate u;
        u.set("exit_reason", "cannot run on this machine: " + p.reason).set("finished_at", now_seconds());
        log_status(store_.transition(j.id, JobState::kQueued, JobState::kFailed, p.reason, u), "failing " + j.id);
        continue;
      }
      // A request let in here may cancel a job placed below: its start
      // then finds it no longer queued.
      let_requests_in(lock);
      auto full = store_.get(j.id);
      if (!full.is_ok()) {
        log_status(full.status(), "reading " + j.id + " to start it");
        continue;
      }
      if (full->state != JobState::kQueued) continue;
      start_attempt(*executor, *full, p);
    }
  }
}

void Supervisor::note_waiting(const JobRecord& job, const std::string& why) {
  if (job.executor_state == why) return;
  log_status(store_.update(job.id, JobUpdate().set("executor_state", why)), "recording why " + job.id + " waits");
}

Supervisor::PlanFacts Supervisor::plan_facts(const std::string& plan_json) {
  PlanFacts f;
  const json j = json::parse(plan_json, nullptr, false);
  f.components = plan_components(j, f.total);
  if (auto st = runner::plan_strategy_of(j, "the job's plan"); st.is_ok()) f.strategy = st->describe();
  return f;
}

void Supervisor::note_start(Running& r, const Started& s, const PlanFacts& plan) {
  // What this attempt runs and its estimate: the job's attempt history.
  json data = json::parse(s.data_json.empty() ? "{}" : s.data_json, nullptr, false);
  if (!data.is_object()) data = json::object();
  data["attempt"] = r.attempt;
  data["estimated_bytes"] = plan.total;
  if (!plan.strategy.empty()) data["strategy"] = plan.strategy;
  r.unrecorded_start = s.record;
  r.start_message = s.message;
  r.start_data = data.dump();
}

void Supervisor::start_attempt(Executor& executor, const JobRecord& job, const Placement& where) {
  const std::int64_t attempt = job.attempts + 1;
  auto admitted = executor.admit(job, attempt, where);
  if (!admitted.is_ok()) {
    if (admitted.status().code() == StatusCode::kUnavailable) return note_waiting(job, admitted.status().message());
    return log_status(admitted.status(), "scheduling " + job.id);
  }
  // The attempt is on record before its launch: a tailord that stops
  // between the two finds its runner's traces at restart (adopt()).
  Status s = store_.transition(job.id, JobState::kQueued, JobState::kPlanning, admitted->message, admitted->record,
                               json{{"attempt", attempt}}.dump());
  if (!s.is_ok()) return log_status(s, "scheduling " + job.id);
  Running r = attempt_of(job, &executor, attempt);
  const PlanFacts plan = plan_facts(job.plan_json);
  auto launch_failed = [&](const std::string& why) {
    r.exit = ProcessExit{runner::exit_status(runner::RunnerExit::kFailure), 0};
    r.launch_error = why;
    if (!judge(r)) running_[job.id] = std::move(r);
  };
  const fs::path dir = job_dir(job.id);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return launch_failed("creating " + dir.string() + ": " + ec.message());
  // The last attempt's heartbeats would otherwise speak for this one.
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (runner::is_heartbeat_file_name(entry.path().filename().string())) fs::remove(entry.path(), ec);
  }
  ec.clear();
  const std::string plan_path = (dir / "plan.json").string();
  // Rewritten before every attempt, and read by a runner that would not
  // outlive the machine: no fsync (a tenth of a submission burst's CPU).
  if (Status w = platform::write_file_atomic(plan_path, job.plan_json, platform::Durability::kProcess); !w.is_ok()) {
    return launch_failed(w.message());
  }
  LaunchRequest req;
  req.job = &job;
  req.attempt = attempt;
  req.dir = dir.string();
  req.placement = where;
  // --resume always: the first attempt finds no checkpoint and starts at
  // step 1; a retry or re-plan continues from the newest checkpoint.
  req.command.plan = plan_path;
  req.command.out = dir.string();
  req.command.resume = true;
  if (job.memory_limit_bytes) req.command.memory_limit = std::to_string(*job.memory_limit_bytes);
  req.env = options_.runner_env;
  if (!req.env.count("OMP_WAIT_POLICY")) req.env["OMP_WAIT_POLICY"] = "PASSIVE";  // docs/libtorch.md
  // The runner reads the files the spec names only from where they were
  // checked at submission (runner/data/file_io.h).
  if (!options_.planning.spec_root.empty()) req.env[runner::kSpecRootEnv] = options_.planning.spec_root;
  if (options_.heartbeat_timeout_seconds > 0) {
    char every[32];  // ten beats per timeout
    std::snprintf(every, sizeof every, "%.3f", std::max(0.05, options_.heartbeat_timeout_seconds / 10));
    req.env[runner::kHeartbeatEnv] = every;
  }
  Launched l = executor.launch(req);
  switch (l.state) {
    case Launched::State::kFailed:
      return launch_failed(l.message);
    case Launched::State::kNotTaken: {
      const Status q = store_.transition(job.id, JobState::kPlanning, JobState::kQueued, l.message, l.record);
      if (q.is_ok()) return;
      log_status(q, "queueing " + job.id + " again");
      return launch_failed(l.message);
    }
    case Launched::State::kStarted:
      note_start(r, l.started, plan);
      record_start(r);  // should the store refuse it now, every tick tries again
      break;
    case Launched::State::kSubmitted:
      log_status(store_.update(job.id, l.record), "recording where " + job.id + " runs");
      log_status(store_.add_event(job.id, {dsl::to_string(executor.kind()), l.message, l.data_json, 0}),
                 "recording the submission of " + job.id);
      break;
  }
  metrics_.set_job_estimate(job.id, job.name, plan.components, plan.total);
  running_[job.id] = std::move(r);
}

Status Supervisor::remove(const std::string& id) {
  // Under the tick's lock, so that no attempt starts meanwhile.
  const auto lock = request_lock();
  // The deletion is recorded with the rows; the folder follows, and the
  // record goes once it has (remove_deleted_folders finishes what a crash
  // interrupted).
  TAILOR_RETURN_IF_ERROR(store_.remove(id));
  metrics_.job_finished(id);
  std::error_code ec;
  fs::remove_all(job_dir(id), ec);
  if (ec) return Status::io_error("job " + id + " deleted, but not its folder " + job_dir(id) + ": " + ec.message());
  return store_.forget_deleted(id);
}

Status Supervisor::remove_deleted_folders() {
  TAILOR_ASSIGN_OR_RETURN(const std::vector<std::string> ids, store_.deleted_jobs());
  for (const std::string& id : ids) {
    std::error_code ec;
    const auto removed = fs::remove_all(job_dir(id), ec);
    if (ec) {
      log_error("tailord: the folder of deleted job " + id + " (" + job_dir(id) + ") could not be removed: " +
                ec.message());
      continue;
    }
    if (removed > 0) log_error("tailord: removed the folder of job " + id + ", deleted before tailord last stopped");
    TAILOR_RETURN_IF_ERROR(store_.forget_deleted(id));
  }
  return Status::ok();
}

Result<JobRecord> Supervisor::retry_job(const std::string& id) {
  const auto lock = request_lock();
  TAILOR_ASSIGN_OR_RETURN(JobRecord job, store_.get(id));
  if (job.state != JobState::kFailed && job.state != JobState::kCancelled) {
    return Status::failed_precondition("job " + id + " is " + to_string(job.state) +
                                       (job.state == JobState::kSucceeded ? "; submit its spec again to train anew"
                                                                          : "; only a failed or cancelled job is retried"));
  }
  if (job.failed_as_bad_input()) {
    return Status::failed_precondition("job " + id + " failed because the runner refused its input (" +
                                       job.exit_reason + "); a retry would fail the same way: fix the spec or its data "
                                       "and submit it again");
  }
  JobUpdate u;
  u.set("failures", 0).set("oom_restarts", 0).set("cancel_requested", 0);
  u.set_null("cancel_sent_at").set_null("finished_at").set_null("next_attempt_at").set("exit_reason", "");
  json data = {{"after", to_string(job.state)}, {"exit_reason", job.exit_reason}, {"attempts", job.attempts}};
  TAILOR_RETURN_IF_ERROR(store_.transition(id, job.state, JobState::kQueued,
                                           "retry requested: resumes from the last checkpoint", u, data.dump()));
  wake();
  return store_.get(id);
}

Result<JobRecord> Supervisor::cancel(const std::string& id) {
  const auto lock = request_lock();
  TAILOR_ASSIGN_OR_RETURN(JobRecord job, store_.get(id));
  if (is_terminal(job.state)) {
    return Status::failed_precondition("job " + id + " already " + to_string(job.state));
  }
  if (job.state == JobState::kQueued) {
    JobUpdate u;
    u.set("cancel_requested", 1).set("exit_reason", "cancelled before it started").set("finished_at", now_seconds());
    TAILOR_RETURN_IF_ERROR(store_.transition(id, JobState::kQueued, JobState::kCancelled, "cancelled while queued", u));
    metrics_.job_finished(id);
    return store_.get(id);
  }
  TAILOR_RETURN_IF_ERROR(store_.update(id, JobUpdate().set("cancel_requested", 1)));
  TAILOR_RETURN_IF_ERROR(store_.add_event(id, {"cancel", "cancel requested: SIGTERM to the runner's process group", "", 0}));
  if (auto it = running_.find(id); it != running_.end()) {
    it->second.cancel_requested = true;
    if (!it->second.cancel_sent_at) {
      it->second.executor->signal(id, false);
      it->second.cancel_sent_at = now_seconds();
    }
  }
  wake();
  return store_.get(id);
}

Supervisor::Running Supervisor::attempt_of(const JobRecord& job, Executor* executor, std::int64_t attempt) {
  Running r;
  r.id = job.id;
  r.name = job.name;
  r.executor = executor;
  r.attempt = attempt;
  r.metrics_offset = job.metrics_offset;
  r.events_offset = job.events_offset;
  r.last_step = job.last_step;
  r.peak_bytes = job.peak_bytes;
  r.cancel_requested = job.cancel_requested;
  r.cancel_sent_at = job.cancel_sent_at;
  return r;
}

Status Supervisor::recover() {
  std::lock_guard lock(mu_);
  TAILOR_RETURN_IF_ERROR(remove_deleted_folders());
  TAILOR_ASSIGN_OR_RETURN(auto jobs, store_.in_states({JobState::kPlanning, JobState::kRunning}));
  for (const JobRecord& job : jobs) TAILOR_RETURN_IF_ERROR(recover_job(job));
  return Status::ok();
}

Status Supervisor::recover_job(const JobRecord& job) {
  Executor* executor = executor_for(job.executor);
  if (!executor) {
    // Judged once an executor of its kind is back; left as it is.
    log_error("tailord: job " + job.id + " left alone: this tailord has no " + dsl::to_string(job.executor) +
              " executor");
    return Status::ok();
  }
  const std::string dir = job_dir(job.id);
  const Adoption a = executor->adopt(job, dir);
  Running r = attempt_of(job, executor, a.attempt);
  switch (a.kind) {
    case Adoption::Kind::kLeaveAlone:
      // Neither adopted nor launched again: launching would fail too; the
      // operator sees why.
      log_error("tailord: job " + job.id + " left alone: " + a.message);
      return Status::ok();
    case Adoption::Kind::kRequeue:
      executor->forget(job.id);
      return store_.transition(job.id, JobState::kPlanning, JobState::kQueued, a.message);
    case Adoption::Kind::kFollow:
      if (a.to_running) {
        TAILOR_RETURN_IF_ERROR(
            store_.transition(job.id, JobState::kPlanning, JobState::kRunning, a.message, a.record));
      } else {
        if (!a.record.values().empty()) TAILOR_RETURN_IF_ERROR(store_.update(job.id, a.record));
        TAILOR_RETURN_IF_ERROR(store_.add_event(job.id, {"recovered", a.message, "", 0}));
      }
      running_[job.id] = std::move(r);
      return Status::ok();
    case Adoption::Kind::kEnded:
      break;
  }
  if (a.to_running) {
    r.unrecorded_start = a.record;
    r.start_message = a.message;
    if (!record_start(r)) return Status::unavailable("the store cannot be written; try again");
  }
  // The runner ended while tailord was down: take in what it wrote, then
  // judge the attempt by its last event.
  if (ingest_all(r) == Ingested::kFailed) {
    running_[job.id] = std::move(r);  // every tick tries again
    return Status::ok();
  }
  r.exit = exit_in_events_file(dir);
  r.exit_context = "runner ended while tailord was down";
  if (judge(r)) {
    executor->forget(job.id);
  } else {
    running_[job.id] = std::move(r);  // every tick tries again
  }
  return Status::ok();
}

void Supervisor::publish_metrics() {
  auto counts = store_.count_by_state();
  if (counts.is_ok()) {
    std::map<std::string, std::int64_t> named;
    for (const auto& [s, n] : *counts) named[to_string(s)] = n;
    metrics_.set_jobs_by_state(named);
    metrics_.set_queue_length(counts->at(JobState::kQueued));
  }
  const auto lock = request_lock();
  std::map<std::string, std::int64_t> peaks;
  for (const auto& [id, r] : running_) peaks[id] = r.peak_bytes.value_or(0);
  for (const auto& [kind, e] : executors_) e->publish(metrics_, peaks);
}

}  // namespace tailor::daemon
