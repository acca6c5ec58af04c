#include "daemon/scheduler/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "core/units.h"
#include "daemon/executor/run_files.h"
#include "daemon/scheduler/scheduler.h"

namespace tailor::daemon {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

template <class E>
std::optional<E> enum_from(const std::string& s, std::initializer_list<E> values) {
  for (E v : values) {
    if (s == to_string(v)) return v;
  }
  return std::nullopt;
}

// Writes `content` to `path` through a temporary file, fsync and rename:
// a reader sees the old file or the new one, never half of one.
Status write_file_atomic(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::io_error("creating " + tmp + ": " + std::strerror(errno));
  const bool ok = ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return Status::io_error("writing " + path + ": " + std::strerror(errno));
  }
  return Status::ok();
}

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

double backoff_for(const SupervisorOptions& o, std::int64_t failures) {
  const double d = o.backoff_seconds * std::pow(2.0, static_cast<double>(std::max<std::int64_t>(0, failures - 1)));
  return std::min(d, o.max_backoff_seconds);
}

std::string describe_exit(const ProcessExit& e) {
  if (e.signal) return "killed by signal " + std::to_string(e.signal) + " (" + strsignal(e.signal) + ")";
  return "exit code " + std::to_string(e.code);
}

}  // namespace

Result<strategies::Strategy> strategy_from_plan_json(const std::string& plan_json) {
  const json j = json::parse(plan_json, nullptr, false);
  if (!j.is_object() || !j.contains("strategy") || !j["strategy"].is_object()) {
    return Status::invalid_argument("plan document without a strategy object");
  }
  const json& s = j["strategy"];
  strategies::Strategy st;
  auto str = [&](const char* k) { return s.contains(k) && s[k].is_string() ? s[k].get<std::string>() : std::string(); };
  auto num = [&](const char* k, std::int64_t d) {
    return s.contains(k) && s[k].is_number_integer() ? s[k].get<std::int64_t>() : d;
  };
  using dsl::Adapter;
  using dsl::Offload;
  using dsl::Optimizer;
  using dsl::Precision;
  st.precision = enum_from(str("precision"), {Precision::kFp32, Precision::kBf16, Precision::kFp16, Precision::kPureBf16})
                     .value_or(Precision::kFp32);
  st.checkpoint_every = num("gradient_checkpointing", 0);
  st.micro_batch_size = num("micro_batch_size", 1);
  st.grad_accumulation = num("gradient_accumulation_steps", 1);
  st.adapter = enum_from(str("adapter"), {Adapter::kNone, Adapter::kLora, Adapter::kQlora}).value_or(Adapter::kNone);
  st.lora_rank = num("lora_rank", 0);
  st.quantization = enum_from(str("quantization"), {strategies::Quantization::kNone, strategies::Quantization::kInt8,
                                                    strategies::Quantization::kNf4,
                                                    strategies::Quantization::kNf4Double})
                        .value_or(strategies::Quantization::kNone);
  st.optimizer = enum_from(str("optimizer"), {Optimizer::kAdamw, Optimizer::kAdamw8bit, Optimizer::kSgd})
                     .value_or(Optimizer::kAdamw);
  st.zero_stage = num("zero_stage", 0);
  st.offload = enum_from(str("offload"), {Offload::kNone, Offload::kOptimizer, Offload::kOptimizerAndParams})
                   .value_or(Offload::kNone);
  st.num_gpus = num("num_gpus", 1);
  st.attention = enum_from(str("attention"), {strategies::Attention::kStandard, strategies::Attention::kMemoryEfficient})
                     .value_or(strategies::Attention::kMemoryEfficient);
  return st;
}

Supervisor::Supervisor(JobStore& store, DaemonMetrics& metrics, SupervisorOptions options)
    : store_(store), metrics_(metrics), options_(std::move(options)) {}

Supervisor::~Supervisor() { stop(); }

std::string Supervisor::job_dir(const std::string& id) const {
  return (fs::path(options_.data_dir) / "jobs" / id).string();
}

void Supervisor::log_status(const Status& s, const std::string& what) const {
  if (!s.is_ok()) log_error("tailord: " + what + ": " + s.to_string());
}

void Supervisor::start() {
  thread_ = std::thread([this] { loop(); });
}

void Supervisor::stop() {
  {
    std::lock_guard lock(wake_mu_);
    stopping_ = true;
  }
  wake_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
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
  for (auto& [id, r] : running_) {
    ingest(r);
    std::optional<ProcessExit> exit;
    if (r.child) {
      auto reaped = reap_child(r.pid);
      if (reaped.is_ok()) {
        exit = *reaped;
      } else {
        r.child = false;  // reaped elsewhere; judge like an adopted runner
      }
    }
    if (!r.child && !exit && !process_is(r.pid, r.start_ticks)) {
      // Not our child: its exit status is gone; its events file tells.
      std::int64_t off = 0;
      auto lines = read_new_lines((fs::path(job_dir(id)) / "events.jsonl").string(), off, std::int64_t{1} << 30);
      const auto code = lines.is_ok() ? exit_code_from_events(*lines) : std::nullopt;
      exit = ProcessExit{code.value_or(-1), code ? 0 : SIGKILL};
    }
    if (exit) {
      ingest(r);
      finish(r, *exit, "");
      ended.push_back(id);
      continue;
    }
    if (r.cancel_requested) {
      const double now = now_seconds();
      if (!r.cancel_sent_at) {
        signal_group(r.pid, SIGTERM);
        r.cancel_sent_at = now;
        log_status(store_.update(id, JobUpdate().set("cancel_sent_at", now)), "recording SIGTERM");
      } else if (now - *r.cancel_sent_at > options_.cancel_grace_seconds) {
        signal_group(r.pid, SIGKILL);
      }
    }
  }
  for (const auto& id : ended) running_.erase(id);
  schedule_queued();
}

void Supervisor::ingest(Running& r) {
  const fs::path dir = job_dir(r.id);
  std::int64_t ev_off = r.events_offset, m_off = r.metrics_offset;
  auto ev = read_new_lines((dir / "events.jsonl").string(), ev_off);
  auto ms = read_new_lines((dir / "metrics.jsonl").string(), m_off);
  if (!ev.is_ok() || !ms.is_ok()) {
    log_status(ev.is_ok() ? ms.status() : ev.status(), "reading run files of " + r.id);
    return;
  }
  if (ev->empty() && ms->empty()) return;
  IngestBatch batch;
  batch.events_offset = ev_off;
  batch.metrics_offset = m_off;
  for (const auto& line : *ev) {
    auto e = parse_event_line(line);
    if (!e) continue;
    if (e->kind == "runner.oom") r.last_oom_json = e->data_json;
    if (e->kind == "runner.error") r.last_error = e->message;
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
                          last.component_bytes, last.peak_bytes.value_or(0));
  }
  JobUpdate changes;
  if (r.last_step) changes.set("last_step", *r.last_step);
  if (r.peak_bytes) changes.set("peak_bytes", *r.peak_bytes);
  const Status s = store_.ingest(r.id, batch, changes);
  if (s.is_ok()) {
    r.events_offset = ev_off;
    r.metrics_offset = m_off;
  } else {
    log_status(s, "storing metrics of " + r.id);
  }
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

void Supervisor::finish(Running& r, const ProcessExit& exit, const std::string& context) {
  auto job = store_.get(r.id);
  if (!job.is_ok()) return log_status(job.status(), "loading job " + r.id);
  const double now = now_seconds();
  JobUpdate base;
  base.set("exit_code", static_cast<std::int64_t>(exit.code)).set("exit_signal", static_cast<std::int64_t>(exit.signal));
  base.set_null("pid").set_null("pid_start_ticks");
  const std::string prefix = context.empty() ? "" : context + ": ";
  if (r.cancel_requested || job->cancel_requested) {
    JobUpdate u = base;
    u.set("exit_reason", prefix + "cancelled by request (" + describe_exit(exit) + ")").set("finished_at", now);
    log_status(store_.transition(r.id, JobState::kRunning, JobState::kCancelled, "cancelled: runner stopped", u),
               "cancelling " + r.id);
    metrics_.job_finished(r.id);
    return;
  }
  if (exit.signal == 0 && exit.code == 0) {
    JobUpdate u = base;
    u.set("exit_reason", "").set("finished_at", now);
    log_status(store_.transition(r.id, JobState::kRunning, JobState::kSucceeded, prefix + "runner finished", u),
               "finishing " + r.id);
    metrics_.job_finished(r.id);
    return;
  }
  if (exit.signal == 0 && exit.code == 3) {
    log_status(store_.update(r.id, base), "recording exit of " + r.id);
    return handle_oom(r, *job);
  }
  const std::string detail = !r.last_error.empty() ? r.last_error : log_tail(r.id);
  const std::string what = prefix + describe_exit(exit) + (detail.empty() ? "" : ": " + detail);
  if (exit.signal == 0 && exit.code == 2) {
    JobUpdate u = base;
    u.set("exit_reason", "bad input, not retried: " + what).set("finished_at", now);
    log_status(store_.transition(r.id, JobState::kRunning, JobState::kFailed, "runner refused its input", u),
               "failing " + r.id);
    metrics_.job_finished(r.id);
    return;
  }
  log_status(store_.update(r.id, base), "recording exit of " + r.id);
  fail_or_retry(r, *job, what);
}

void Supervisor::fail_or_retry(Running& r, const JobRecord& job, const std::string& reason) {
  const std::int64_t failures = job.failures + 1;
  const double now = now_seconds();
  if (failures > job.retries) {
    JobUpdate u;
    u.set("failures", failures).set("finished_at", now);
    u.set("exit_reason", reason + " (gave up after " + std::to_string(job.retries) + " retries)");
    log_status(store_.transition(r.id, job.state, JobState::kFailed, "failed: " + reason, u), "failing " + r.id);
    metrics_.job_finished(r.id);
    return;
  }
  const double delay = backoff_for(options_, failures);
  JobUpdate u;
  u.set("failures", failures).set("next_attempt_at", now + delay).set("exit_reason", reason);
  json data = {{"failure", failures}, {"retries", job.retries}, {"backoff_seconds", delay}, {"reason", reason}};
  char msg[96];
  std::snprintf(msg, sizeof msg, "retry %lld of %lld in %.1f s (resumes from the last checkpoint)",
                static_cast<long long>(failures), static_cast<long long>(job.retries), delay);
  log_status(store_.transition(r.id, job.state, JobState::kQueued, msg, u, data.dump()), "retrying " + r.id);
  metrics_.add_retry();
}

void Supervisor::handle_oom(Running& r, const JobRecord& job) {
  const json oom = json::parse(r.last_oom_json.empty() ? "{}" : r.last_oom_json, nullptr, false);
  std::int64_t budget = 0;
  std::optional<strategies::MemoryBreakdown> measured;
  std::int64_t peak = 0;
  if (oom.is_object()) {
    budget = oom.value("budget_bytes", std::int64_t{0});
    if (auto m = oom.find("memory"); m != oom.end() && m->is_object()) {
      strategies::MemoryBreakdown b;
      auto get = [&](const char* k) { return Bytes(m->value(k, std::int64_t{0})); };
      b.weights = get("weights");
      b.gradients = get("gradients");
      b.optimizer_states = get("optimizer_states");
      b.master_weights = get("master_weights");
      b.adapter = get("adapter");
      b.activations = get("activations");
      b.logits = get("logits");
      b.overhead = get("overhead");
      measured = b;
      peak = m->value("peak_bytes", std::int64_t{0});
    }
    // The failing allocation shows what was needed at that moment.
    peak = std::max(peak, oom.value("requested_bytes", std::int64_t{0}) + oom.value("in_use_bytes", std::int64_t{0}));
  }
  const std::int64_t restarts = job.oom_restarts + 1;
  JobUpdate u;
  u.set("oom_restarts", restarts);
  if (peak > 0) u.set("peak_bytes", std::max(peak, job.peak_bytes.value_or(0)));
  const double now = now_seconds();
  auto give_up = [&](const std::string& reason) {
    u.set("exit_reason", reason).set("finished_at", now);
    log_status(store_.transition(r.id, JobState::kRunning, JobState::kFailed, "failed: " + reason, u), "failing " + r.id);
    metrics_.job_finished(r.id);
  };
  if (budget <= 0) return give_up("out of memory (exit 3) without an oom event to re-plan from");
  if (restarts > options_.max_oom_replans) {
    return give_up("out of memory " + std::to_string(restarts) + " times; gave up after " +
                   std::to_string(options_.max_oom_replans) + " re-plans");
  }
  auto failed = strategy_from_plan_json(job.plan_json);
  if (!failed.is_ok()) return give_up("out of memory, and the job's plan is unreadable: " + failed.status().message());
  std::string story;
  auto next = replan_after_oom(job.spec_text, "<request>", options_.planning, *failed, Bytes(budget), measured, story);
  if (!next.is_ok()) return give_up("out of memory: " + next.status().message());
  std::int64_t total = 0;
  const auto components = plan_components(next->plan_json, total);
  std::int64_t reserve = next->plan.chosen.memory.per_device.total().count();
  if (job.memory_limit_bytes) reserve = std::min(reserve, *job.memory_limit_bytes);
  u.set("plan_json", next->plan_json).set("estimated_bytes", reserve).set_null("next_attempt_at");
  u.set("exit_reason", "out of memory at " + Bytes(peak).to_string() + " of a " + Bytes(budget).to_string() + " budget");
  json data = {{"measured_peak_bytes", peak},
               {"budget_bytes", budget},
               {"from", failed->describe()},
               {"to", next->plan.chosen.strategy.describe()},
               {"estimated_bytes", next->plan.chosen.memory.per_device.total().count()},
               {"global_batch", next->plan.global_batch}};
  log_status(store_.transition(r.id, JobState::kRunning, JobState::kQueued,
                               "out of memory; " + story + "; resuming from the last checkpoint", u, data.dump()),
             "re-planning " + r.id);
  log_status(store_.add_event(r.id, {"replan", story, data.dump(), 0}), "recording re-plan of " + r.id);
  metrics_.set_job_estimate(r.id, r.name, components, total);
  metrics_.add_oom_restart();
}

void Supervisor::schedule_queued() {
  auto queued = store_.in_states({JobState::kQueued});
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
    start_job(j, p.gpus, p.bytes);
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
    auto fresh = store_.get(job.id);
    if (fresh.is_ok()) fail_or_retry(r, *fresh, "cannot start tailor-runner: " + why);
  };
  if (ec) return launch_failed("creating " + dir.string() + ": " + ec.message());
  const std::string plan_path = (dir / "plan.json").string();
  if (Status w = write_file_atomic(plan_path, job.plan_json); !w.is_ok()) return launch_failed(w.message());
  LaunchRequest req;
  // --resume always: the first attempt finds no checkpoint and starts at
  // step 1; a retry or re-plan continues from the newest checkpoint.
  req.argv = {options_.runner_path, "--plan", plan_path, "--out", dir.string(), "--resume"};
  if (job.memory_limit_bytes) {
    req.argv.push_back("--memory-limit");
    req.argv.push_back(std::to_string(*job.memory_limit_bytes));
  }
  req.env = options_.runner_env;
  if (!req.env.count("OMP_WAIT_POLICY")) req.env["OMP_WAIT_POLICY"] = "PASSIVE";  // FIELD-NOTES.md
  if (!gpus.empty()) {
    std::string list;
    for (int g : gpus) list += (list.empty() ? "" : ",") + std::to_string(g);
    req.env["CUDA_VISIBLE_DEVICES"] = list;
  }
  req.log_path = (dir / "runner.log").string();
  req.working_dir = dir.string();
  auto proc = launch_process(req);
  if (!proc.is_ok()) return launch_failed(proc.status().message());
  // The pid file covers the moment between fork and the store's commit: a
  // restart finds the runner through it instead of launching a second one.
  log_status(write_file_atomic((dir / "runner.pid").string(),
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
  log_status(store_.transition(job.id, JobState::kPlanning, JobState::kRunning,
                               "runner started (pid " + std::to_string(proc->pid) + ", attempt " +
                                   std::to_string(r.attempt) + ")",
                               u),
             "starting " + job.id);
  std::int64_t total = 0;
  const auto components = plan_components(job.plan_json, total);
  metrics_.set_job_estimate(job.id, job.name, components, total);
  running_[job.id] = std::move(r);
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
      signal_group(it->second.pid, SIGTERM);
      it->second.cancel_sent_at = now_seconds();
    }
  }
  wake();
  return store_.get(id);
}

Status Supervisor::recover() {
  std::lock_guard lock(mu_);
  TAILOR_ASSIGN_OR_RETURN(auto jobs, store_.in_states({JobState::kPlanning, JobState::kRunning}));
  for (const JobRecord& job : jobs) {
    const fs::path dir = job_dir(job.id);
    std::optional<std::int64_t> pid = job.pid, ticks = job.pid_start_ticks;
    if (!pid) {
      std::ifstream f(dir / "runner.pid");
      std::int64_t p = 0, t = 0;
      if (f >> p >> t) {
        pid = p;
        ticks = t;
      }
    }
    Running r;
    r.id = job.id;
    r.name = job.name;
    r.child = false;
    r.attempt = job.attempts;
    r.reserved_bytes = job.gpus_needed > 0 ? 0 : job.estimated_bytes;
    std::stringstream gl(job.assigned_gpus);
    for (std::string g; std::getline(gl, g, ',');) {
      if (!g.empty()) r.gpus.push_back(std::atoi(g.c_str()));
    }
    r.metrics_offset = job.metrics_offset;
    r.events_offset = job.events_offset;
    r.last_step = job.last_step;
    r.peak_bytes = job.peak_bytes;
    r.cancel_requested = job.cancel_requested;
    r.cancel_sent_at = job.cancel_sent_at;
    const bool alive = pid && ticks && process_is(static_cast<pid_t>(*pid), *ticks);
    if (alive) {
      r.pid = static_cast<pid_t>(*pid);
      r.start_ticks = *ticks;
      if (job.state == JobState::kPlanning) {
        JobUpdate u;
        u.set("pid", *pid).set("pid_start_ticks", *ticks).set("attempts", job.attempts + 1);
        r.attempt = job.attempts + 1;
        TAILOR_RETURN_IF_ERROR(store_.transition(job.id, JobState::kPlanning, JobState::kRunning,
                                                 "recovered: re-adopted runner pid " + std::to_string(*pid), u));
      } else {
        TAILOR_RETURN_IF_ERROR(store_.add_event(
            job.id, {"recovered", "tailord restarted; re-adopted runner pid " + std::to_string(*pid), "", 0}));
      }
      running_[job.id] = std::move(r);
      continue;
    }
    if (job.state == JobState::kPlanning) {
      TAILOR_RETURN_IF_ERROR(store_.transition(job.id, JobState::kPlanning, JobState::kQueued,
                                               "recovered: tailord restarted before the runner started"));
      continue;
    }
    // The runner ended while tailord was down: take in what it wrote, then
    // judge the attempt by its last event.
    r.pid = static_cast<pid_t>(pid.value_or(-1));
    ingest(r);
    std::int64_t off = 0;
    auto lines = read_new_lines((dir / "events.jsonl").string(), off, std::int64_t{1} << 30);
    const auto code = lines.is_ok() ? exit_code_from_events(*lines) : std::nullopt;
    finish(r, ProcessExit{code.value_or(-1), code ? 0 : SIGKILL},
           "runner ended while tailord was down");
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
