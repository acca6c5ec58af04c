#include "daemon/scheduler/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "core/units.h"
#include "daemon/executor/run_files.h"
#include "daemon/scheduler/scheduler.h"
#include "daemon/scheduler/supervisor_parts.h"
#include "platform/file_lock.h"
#include "platform/files.h"
#include "runner/protocol/events.h"
#include "runner/protocol/exit_code.h"
#include "runner/protocol/heartbeat.h"
#include "runner/protocol/launch_env.h"
#include "runner/protocol/plan_reader.h"

namespace tailor::daemon {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Held from before tailord forks a job's runner until the runner and
// everything that inherited the descriptor have ended (platform/file_lock.h).
constexpr const char* kRunnerLockFile = "runner.lock";

// A runner tailord never recorded (it died between fork and its commit):
// the process group of whoever holds the job's lock, or the holder itself
// once the group's leader is gone.
std::optional<platform::Process> runner_holding_lock(const fs::path& dir, std::string& why_not) {
  const std::string path = (dir / kRunnerLockFile).string();
  auto held = platform::file_lock_held(path);
  if (!held.is_ok()) {
    why_not = held.status().message();
    return std::nullopt;
  }
  if (!*held) return std::nullopt;
  for (const pid_t holder : platform::processes_with_file_open(path)) {
    const pid_t group = ::getpgid(holder);
    for (const pid_t pid : {group, holder}) {
      if (pid <= 1) continue;
      if (auto ticks = platform::process_start_ticks(pid)) return platform::Process{pid, *ticks};
    }
  }
  why_not = path + " is locked, but no process holding it can be seen";
  return std::nullopt;
}

// A write that failed for the store's own reasons (locked by another
// process, disk full, I/O): worth trying again. Anything else (the job was
// deleted, or is no longer in the expected state) will not change.
bool store_cannot_write(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kNoSpace || s.code() == StatusCode::kIOError;
}

std::string describe_exit(const ProcessExit& e) {
  if (e.signal) return "killed by signal " + std::to_string(e.signal) + " (" + strsignal(e.signal) + ")";
  return "exit code " + std::to_string(e.code);
}

}  // namespace

namespace supervisor_parts {

std::map<std::string, std::int64_t> plan_components(const std::string& plan_json, std::int64_t& total) {
  std::map<std::string, std::int64_t> out;
  const json j = json::parse(plan_json, nullptr, false);
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

// The exit a runner recorded in its events file (protocol/events.h), for a
// runner whose exit status is gone; none recorded: it was killed.
ProcessExit exit_recorded(const std::vector<std::string>& event_lines) {
  const auto code = runner::events::exit_from_events(event_lines);
  return code ? ProcessExit{runner::exit_status(*code), 0} : ProcessExit{-1, SIGKILL};
}

}  // namespace supervisor_parts

using supervisor_parts::exit_recorded;
using supervisor_parts::plan_components;

Supervisor::Supervisor(JobStore& store, DaemonMetrics& metrics, SupervisorOptions options)
    : store_(store), metrics_(metrics), options_(std::move(options)) {}

Supervisor::~Supervisor() { stop(); }

std::string Supervisor::job_dir(const std::string& id) const {
  // Plain concatenation: a listing asks for fifty of these per page, and
  // composing fs::paths was a visible share of it.
  std::string dir = options_.data_dir;
  if (!dir.empty() && dir.back() != '/') dir += '/';
  return dir + "jobs/" + id;
}

void Supervisor::log_status(const Status& s, const std::string& what) const {
  if (!s.is_ok()) log_error("tailord: " + what + ": " + s.to_string());
}

void Supervisor::start() {
  thread_ = std::thread([this] { loop(); });
  if (options_.slurm) slurm_thread_ = std::thread([this] { poll_slurm(); });
}

void Supervisor::stop() {
  {
    std::lock_guard lock(wake_mu_);
    stopping_ = true;
  }
  wake_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (slurm_thread_.joinable()) slurm_thread_.join();
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

void Supervisor::tick() {
  std::lock_guard lock(mu_);
  std::vector<std::string> ended;
  refresh_slurm_queue();
  for (auto& [id, r] : running_) {
    if (r.unrecorded_start && !record_start(r)) continue;
    if (!r.exit && r.executor == "slurm") {
      ingest(r);
      if (!follow_slurm(r)) {
        ended.push_back(id);  // never submitted: queued again
        continue;
      }
    } else if (!r.exit) {
      ingest(r);
      std::optional<ProcessExit> exit;
      if (r.child) {
        auto reaped = platform::reap_child(r.pid);
        if (reaped.is_ok()) {
          exit = *reaped;
        } else {
          r.child = false;  // reaped elsewhere; judge like an adopted runner
        }
      }
      if (!r.child && !exit && !platform::process_is(r.pid, r.start_ticks)) {
        // Not our child: its exit status is gone; its events file tells.
        std::int64_t off = 0;
        auto lines = read_new_lines((fs::path(job_dir(id)) / "events.jsonl").string(), off, std::int64_t{1} << 30);
        exit = exit_recorded(lines.is_ok() ? *lines : std::vector<std::string>{});
      }
      if (exit) {
        r.exit = exit;
        r.exit_context = r.lost;
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
        signal_attempt(r, false);
        r.cancel_sent_at = now;
        log_status(store_.update(id, JobUpdate().set("cancel_sent_at", now)), "recording SIGTERM");
      } else if (now - *r.cancel_sent_at > options_.cancel_grace_seconds) {
        signal_attempt(r, true);
      }
    }
  }
  for (const auto& id : ended) running_.erase(id);
  schedule_queued();
}

void Supervisor::check_heartbeat(Running& r) {
  if (options_.heartbeat_timeout_seconds <= 0 || !r.lost.empty()) return;
  if (r.executor == "slurm" && !r.slurm_running) return;  // pending: nothing beats yet
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  for (const auto& entry : fs::directory_iterator(job_dir(r.id), ec)) {
    const std::string name = entry.path().filename().string();
    if (!runner::is_heartbeat_file_name(name)) continue;
    std::error_code tec;
    const auto beat = fs::last_write_time(entry.path(), tec);
    if (tec) continue;  // gone meanwhile
    const double age = std::chrono::duration<double>(now - beat).count();
    if (age <= options_.heartbeat_timeout_seconds) continue;
    char buf[160];
    std::snprintf(buf, sizeof buf, "lost: no heartbeat in %s for %.0f s (stopped or frozen); killed", name.c_str(), age);
    r.lost = buf;
    log_status(store_.add_event(r.id, {"lost", r.lost, json{{"file", name}, {"age_seconds", age}}.dump(), 0}),
               "recording the loss of " + r.id);
    // SIGKILL ends a stopped process too; its exit is judged next tick.
    signal_attempt(r, true);
    return;
  }
}

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
  batch.events_offset = ev_off;
  batch.metrics_offset = m_off;
  for (const auto& line : *ev) {
    auto e = parse_event_line(line);
    if (!e) continue;
    if (e->kind == std::string("runner.") + runner::events::kOom) r.last_oom_json = e->data_json;
    if (e->kind == std::string("runner.") + runner::events::kError) r.last_error = e->message;
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
  }
  JobUpdate changes;
  if (r.last_step) changes.set("last_step", *r.last_step);
  for (auto m = batch.metrics.rbegin(); m != batch.metrics.rend(); ++m) {
    if (!m->eval_loss) continue;
    metrics_.set_job_eval_loss(r.id, r.name, *m->eval_loss);
    changes.set("last_eval_step", m->step).set("last_eval_loss", *m->eval_loss);
    break;
  }
  if (r.peak_bytes) changes.set("peak_bytes", *r.peak_bytes);
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
    case Verdict::kSucceeded:
      u.set("exit_reason", "");
      return end_as(JobState::kSucceeded, prefix + "runner finished");
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
  std::string story;
  auto next = replan_after_oom(job.spec_text, "<request>", options_.planning,
                               strategies::OomReport{*failed, oom.budget, oom.measured}, story, job.executor);
  if (!next.is_ok()) return give_up("out of memory: " + next.status().message());
  std::int64_t total = 0;
  const auto components = plan_components(next->plan_json, total);
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

void Supervisor::schedule_queued() {
  // Every tick reads the whole queue: its records without spec or plan,
  // the whole record only of a job that starts.
  auto queued = store_.in_states({JobState::kQueued}, /*documents=*/false);
  if (!queued.is_ok()) return log_status(queued.status(), "listing queued jobs");
  metrics_.set_queue_length(static_cast<std::int64_t>(queued->size()));
  if (queued->empty()) return;
  Capacity cap;
  cap.host_total_bytes = options_.host_budget_bytes;
  cap.host_free_bytes = options_.host_budget_bytes;
  cap.gpu_total = static_cast<int>(options_.gpus.size());
  std::vector<bool> busy(options_.gpus.size(), false);
  for (const auto& [id, r] : running_) {
    cap.host_free_bytes -= r.reserved_bytes;
    for (int g : r.gpus) {
      if (g >= 0 && g < static_cast<int>(busy.size())) busy[static_cast<std::size_t>(g)] = true;
    }
  }
  for (std::size_t g = 0; g < busy.size(); ++g) {
    if (!busy[g]) cap.free_gpus.push_back(static_cast<int>(g));
  }
  std::vector<QueuedJob> order;
  std::map<std::string, const JobRecord*> by_id;
  for (const JobRecord& j : *queued) {
    if (j.executor == "slurm") {
      // Slurm queues and places it; tailord only waits out a backoff, or
      // for Slurm to answer again (asked by the poller, not here).
      if (j.next_attempt_at && *j.next_attempt_at > now_seconds()) continue;
      if (options_.slurm && !options_.slurm->available()) {
        const std::string why = "waiting for Slurm: " + options_.slurm->describe();
        if (j.executor_state != why) {
          log_status(store_.update(j.id, JobUpdate().set("executor_state", why)), "recording why " + j.id + " waits");
        }
        continue;
      }
      auto full = store_.get(j.id);
      if (!full.is_ok()) {
        log_status(full.status(), "reading " + j.id + " to submit it");
        continue;
      }
      start_slurm_job(*full);
      continue;
    }
    order.push_back({j.id, j.gpus_needed, j.gpus_needed > 0 ? 0 : j.estimated_bytes, j.next_attempt_at});
    by_id[j.id] = &j;
  }
  for (const Placement& p : schedule(order, cap, now_seconds())) {
    const JobRecord& j = *by_id.at(p.id);
    if (p.action == Placement::Action::kNeverFits) {
      JobUpdate u;
      u.set("exit_reason", "cannot run on this machine: " + p.reason).set("finished_at", now_seconds());
      log_status(store_.transition(j.id, JobState::kQueued, JobState::kFailed, p.reason, u), "failing " + j.id);
      continue;
    }
    auto full = store_.get(j.id);
    if (!full.is_ok()) {
      log_status(full.status(), "reading " + j.id + " to start it");
      continue;
    }
    start_job(*full, p.gpus, p.bytes);
  }
}

void Supervisor::start_job(const JobRecord& job, const std::vector<int>& gpus, std::int64_t bytes) {
  std::string where = gpus.empty() ? Bytes(bytes).to_string() + " of the host budget" : "GPUs";
  for (int g : gpus) where += " " + std::to_string(g);
  Status s = store_.transition(job.id, JobState::kQueued, JobState::kPlanning, "scheduled: " + where);
  if (!s.is_ok()) return log_status(s, "scheduling " + job.id);
  const fs::path dir = job_dir(job.id);
  std::error_code ec;
  fs::create_directories(dir, ec);
  Running r;
  r.id = job.id;
  r.name = job.name;
  r.attempt = job.attempts + 1;
  r.reserved_bytes = bytes;
  r.gpus = gpus;
  r.metrics_offset = job.metrics_offset;
  r.events_offset = job.events_offset;
  r.last_step = job.last_step;
  r.peak_bytes = job.peak_bytes;
  auto launch_failed = [&](const std::string& why) {
    r.exit = ProcessExit{runner::exit_status(runner::RunnerExit::kFailure), 0};
    r.launch_error = why;
    if (!judge(r)) running_[job.id] = std::move(r);
  };
  if (ec) return launch_failed("creating " + dir.string() + ": " + ec.message());
  // An earlier attempt's pid file must not stand for this attempt should
  // tailord stop before it writes this one's (recover() reads it).
  fs::remove(dir / "runner.pid", ec);
  ec.clear();
  const std::string plan_path = (dir / "plan.json").string();
  if (Status w = platform::write_file_atomic(plan_path, job.plan_json); !w.is_ok()) return launch_failed(w.message());
  platform::LaunchRequest req;
  // --resume always: the first attempt finds no checkpoint and starts at
  // step 1; a retry or re-plan continues from the newest checkpoint.
  req.argv = {options_.runner_path, "--plan", plan_path, "--out", dir.string(), "--resume"};
  if (job.memory_limit_bytes) {
    req.argv.push_back("--memory-limit");
    req.argv.push_back(std::to_string(*job.memory_limit_bytes));
  }
  req.env = options_.runner_env;
  if (!req.env.count("OMP_WAIT_POLICY")) req.env["OMP_WAIT_POLICY"] = "PASSIVE";  // docs/libtorch.md
  // The runner reads the files the spec names only from where they were
  // checked at submission (runner/data/file_io.h).
  if (!options_.planning.spec_root.empty()) req.env[runner::kSpecRootEnv] = options_.planning.spec_root;
  if (options_.heartbeat_timeout_seconds > 0) {
    // Ten beats per timeout. The last attempt's files go, and the runner's
    // own starts now, so that one stopped before its first beat is lost too.
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (runner::is_heartbeat_file_name(entry.path().filename().string())) fs::remove(entry.path(), ec);
    }
    ec.clear();
    runner::touch_heartbeat((dir / runner::heartbeat_file_name(std::nullopt)).string());
    char every[32];
    std::snprintf(every, sizeof every, "%.3f", std::max(0.05, options_.heartbeat_timeout_seconds / 10));
    req.env[runner::kHeartbeatEnv] = every;
  }
  if (!gpus.empty()) {
    std::string list;
    for (int g : gpus) list += (list.empty() ? "" : ",") + std::to_string(g);
    req.env["CUDA_VISIBLE_DEVICES"] = list;
  }
  req.log_path = (dir / "runner.log").string();
  req.working_dir = dir.string();
  // Taken before the fork and inherited by the runner: from here on, a
  // crash of tailord at any moment leaves a held lock that the next
  // tailord finds (recover()), so no job ever gets a second runner.
  auto lock = platform::FileLock::acquire((dir / kRunnerLockFile).string());
  if (!lock.is_ok()) {
    if (lock.status().code() == StatusCode::kFailedPrecondition) {
      return launch_failed("a process of an earlier attempt still holds " + std::string(kRunnerLockFile));
    }
    return launch_failed(lock.status().message());
  }
  req.inherit_fd = lock->fd();
  auto proc = platform::launch_process(req);
  if (!proc.is_ok()) return launch_failed(proc.status().message());
  // The pid file covers the moment between fork and the store's commit: a
  // restart finds the runner through it instead of launching a second one.
  log_status(platform::write_file_atomic((dir / "runner.pid").string(),
                               std::to_string(proc->pid) + " " + std::to_string(proc->start_ticks) + "\n"),
             "writing pid file of " + job.id);
  r.pid = proc->pid;
  r.start_ticks = proc->start_ticks;
  std::string gpu_list;
  for (int g : gpus) gpu_list += (gpu_list.empty() ? "" : ",") + std::to_string(g);
  JobUpdate u;
  u.set("pid", static_cast<std::int64_t>(proc->pid)).set("pid_start_ticks", proc->start_ticks);
  u.set("attempts", r.attempt).set("assigned_gpus", gpu_list).set_null("next_attempt_at").set("estimated_bytes", bytes);
  if (!job.started_at) u.set("started_at", now_seconds());
  std::int64_t total = 0;
  const auto components = plan_components(job.plan_json, total);
  // What this attempt runs and its estimate: the job's attempt history.
  json started = {{"attempt", r.attempt}, {"estimated_bytes", total}};
  if (auto st = runner::parse_plan_strategy(job.plan_json, "the job's plan"); st.is_ok()) {
    started["strategy"] = st->describe();
  }
  r.unrecorded_start = u;
  r.start_message = "runner started (pid " + std::to_string(proc->pid) + ", attempt " + std::to_string(r.attempt) + ")";
  r.start_data = started.dump();
  record_start(r);  // should the store refuse it now, every tick tries again
  metrics_.set_job_estimate(job.id, job.name, components, total);
  running_[job.id] = std::move(r);
}

Status Supervisor::remove(const std::string& id) {
  // Under the tick's lock, so that no attempt starts meanwhile.
  std::lock_guard lock(mu_);
  TAILOR_RETURN_IF_ERROR(store_.remove(id));
  metrics_.job_finished(id);
  std::error_code ec;
  fs::remove_all(job_dir(id), ec);
  if (ec) return Status::io_error("job " + id + " deleted, but not its folder " + job_dir(id) + ": " + ec.message());
  return Status::ok();
}

Result<JobRecord> Supervisor::retry_job(const std::string& id) {
  std::lock_guard lock(mu_);
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
  std::lock_guard lock(mu_);
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
      signal_attempt(it->second, false);
      it->second.cancel_sent_at = now_seconds();
    }
  }
  wake();
  return store_.get(id);
}

Supervisor::Running Supervisor::recovered(const JobRecord& job) {
  Running r;
  r.id = job.id;
  r.name = job.name;
  r.child = false;
  r.attempt = job.attempts;
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
  TAILOR_ASSIGN_OR_RETURN(auto jobs, store_.in_states({JobState::kPlanning, JobState::kRunning}));
  for (const JobRecord& job : jobs) {
    const fs::path dir = job_dir(job.id);
    if (job.executor == "slurm") {
      // Followed through Slurm's queue by its tag from the first tick on:
      // re-adopted when Slurm still has it, judged by its events when it
      // ended meanwhile, queued again when it was never submitted.
      Running r = recovered(job);
      r.executor = "slurm";
      r.slurm_id = job.executor_job_id;
      r.slurm_state = job.executor_state;
      r.slurm_running = job.state == JobState::kRunning;
      if (auto st = runner::parse_plan_strategy(job.plan_json, "the job's plan"); st.is_ok()) {
        r.ranks = static_cast<int>(std::max<std::int64_t>(1, st->num_gpus));
      }
      TAILOR_RETURN_IF_ERROR(store_.add_event(
          job.id, {"recovered",
                   "tailord restarted; following Slurm job " + (r.slurm_id.empty() ? "(by its tag " + slurm_tag(job.id, job.attempts) + ")" : r.slurm_id),
                   "", 0}));
      running_[job.id] = std::move(r);
      continue;
    }
    std::optional<std::int64_t> pid = job.pid, ticks = job.pid_start_ticks;
    if (!pid) {
      std::ifstream f(dir / "runner.pid");
      std::int64_t p = 0, t = 0;
      if (f >> p >> t) {
        pid = p;
        ticks = t;
      }
    }
    Running r = recovered(job);
    r.reserved_bytes = job.gpus_needed > 0 ? 0 : job.estimated_bytes;
    std::stringstream gl(job.assigned_gpus);
    for (std::string g; std::getline(gl, g, ',');) {
      if (!g.empty()) r.gpus.push_back(std::atoi(g.c_str()));
    }
    bool alive = pid && ticks && platform::process_is(static_cast<pid_t>(*pid), *ticks);
    std::string found_by;
    if (!alive) {
      std::string why_not;
      if (auto holder = runner_holding_lock(dir, why_not)) {
        pid = holder->pid;
        ticks = holder->start_ticks;
        alive = true;
        found_by = " (found by its lock: tailord stopped before recording it)";
      } else if (!why_not.empty()) {
        // Neither adopted nor launched again: launching would fail on the
        // lock too; the operator sees why.
        log_error("tailord: job " + job.id + " left alone: " + why_not);
        continue;
      }
    }
    if (alive) {
      r.pid = static_cast<pid_t>(*pid);
      r.start_ticks = *ticks;
      if (job.state == JobState::kPlanning) {
        JobUpdate u;
        u.set("pid", *pid).set("pid_start_ticks", *ticks).set("attempts", job.attempts + 1);
        r.attempt = job.attempts + 1;
        TAILOR_RETURN_IF_ERROR(store_.transition(job.id, JobState::kPlanning, JobState::kRunning,
                                                 "recovered: re-adopted runner pid " + std::to_string(*pid) + found_by, u));
      } else {
        if (!found_by.empty()) {
          TAILOR_RETURN_IF_ERROR(store_.update(job.id, JobUpdate().set("pid", *pid).set("pid_start_ticks", *ticks)));
        }
        TAILOR_RETURN_IF_ERROR(store_.add_event(
            job.id, {"recovered", "tailord restarted; re-adopted runner pid " + std::to_string(*pid) + found_by, "", 0}));
      }
      running_[job.id] = std::move(r);
      continue;
    }
    if (job.state == JobState::kPlanning && !pid) {
      TAILOR_RETURN_IF_ERROR(store_.transition(job.id, JobState::kPlanning, JobState::kQueued,
                                               "recovered: tailord restarted before the runner started"));
      continue;
    }
    r.pid = static_cast<pid_t>(pid.value_or(-1));
    if (job.state == JobState::kPlanning) {
      // Its pid file says it started, and it has ended: the attempt ran
      // although its start was never stored. Launching it again would run
      // the job twice.
      r.attempt = job.attempts + 1;
      JobUpdate u;
      u.set("attempts", r.attempt).set("pid", *pid).set("pid_start_ticks", ticks.value_or(0));
      r.unrecorded_start = u;
      r.start_message = "recovered: runner pid " + std::to_string(*pid) + " started before tailord stopped";
      if (!record_start(r)) return Status::unavailable("the store cannot be written; try again");
    }
    // The runner ended while tailord was down: take in what it wrote, then
    // judge the attempt by its last event.
    if (ingest_all(r) == Ingested::kFailed) {
      running_[job.id] = std::move(r);  // every tick tries again
      continue;
    }
    std::int64_t off = 0;
    auto lines = read_new_lines((dir / "events.jsonl").string(), off, std::int64_t{1} << 30);
    r.exit = exit_recorded(lines.is_ok() ? *lines : std::vector<std::string>{});
    r.exit_context = "runner ended while tailord was down";
    if (!judge(r)) running_[job.id] = std::move(r);  // every tick tries again
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
  std::lock_guard lock(mu_);
  std::int64_t reserved = 0;
  std::vector<std::int64_t> gpu_used(options_.gpus.size(), 0);
  for (const auto& [id, r] : running_) {
    reserved += r.reserved_bytes;
    for (int g : r.gpus) {
      if (g >= 0 && g < static_cast<int>(gpu_used.size())) {
        gpu_used[static_cast<std::size_t>(g)] += r.peak_bytes.value_or(0);
      }
    }
  }
  metrics_.set_host_memory(options_.host_budget_bytes, reserved);
  for (std::size_t g = 0; g < options_.gpus.size(); ++g) {
    metrics_.set_gpu_memory(static_cast<int>(g), options_.gpus[g].name, options_.gpus[g].memory.count(), gpu_used[g]);
  }
}

}  // namespace tailor::daemon
