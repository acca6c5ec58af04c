#include "daemon/executor/slurm_executor.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "daemon/executor/batch_script.h"
#include "daemon/executor/run_files.h"
#include "dsl/spec_loader.h"
#include "platform/files.h"
#include "runner/protocol/events.h"
#include "runner/protocol/heartbeat.h"
#include "runner/protocol/plan_reader.h"

namespace tailor::daemon {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kBatchScript = "slurm-batch.sh";

std::vector<std::string> all_lines(const std::string& path) {
  std::int64_t off = 0;
  auto lines = read_new_lines(path, off, std::int64_t{1} << 30);
  return lines.is_ok() ? *lines : std::vector<std::string>{};
}

// The events file of rank `r` (runner/dist/launcher.h's names).
std::string rank_events(const std::string& dir, int r) {
  return dir + (r == 0 ? "/events.jsonl" : "/events.rank-" + std::to_string(r) + ".jsonl");
}

// The spec's sbatch settings over tailord's, and whether the spec loads.
struct Settings {
  dsl::SlurmSpec slurm;
  std::string load_error;  // empty: it loads
};

Settings settings_of(const JobRecord& job, const PlanningContext& planning) {
  dsl::LoadOptions lo;
  lo.catalog = planning.catalog;
  lo.check_files = false;
  lo.read_root = planning.spec_root;
  auto loaded = dsl::load_job_spec_text(job.spec_text, "<request>", planning.spec_root, lo);
  if (!loaded.ok()) return {planning.slurm, loaded.diagnostics.to_string()};
  return {slurm_settings(*loaded.spec, planning), ""};
}

}  // namespace

std::string SlurmExecutor::tag(const std::string& id, std::int64_t attempt) {
  return id + "/" + std::to_string(attempt);
}

void SlurmExecutor::start() { thread_ = std::thread([this] { read_queue(); }); }

void SlurmExecutor::stop() {
  {
    std::lock_guard lock(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SlurmExecutor::read_queue() {
  for (;;) {
    {
      std::unique_lock lock(stop_mu_);
      stop_cv_.wait_for(lock, std::chrono::duration<double>(options_.poll_seconds), [this] { return stopping_; });
      if (stopping_) return;
    }
    if (following_ > 0) {
      Queue read;
      read.asked_at = now_seconds();
      read.jobs = options_.cluster->client().queue();
      std::lock_guard lock(read_mu_);
      read_ = std::move(read);
      ++reads_;
    }
    // Unavailable: asked again here, so that waiting jobs go as soon as
    // Slurm answers.
    if (!options_.cluster->available()) (void)options_.cluster->probe();
  }
}

void SlurmExecutor::begin_tick() {
  queue_.fresh = false;
  following_ = static_cast<int>(
      std::count_if(attempts_.begin(), attempts_.end(), [](const auto& kv) { return !kv.second.ended; }));
  std::lock_guard lock(read_mu_);
  if (reads_ == reads_seen_) return;
  reads_seen_ = reads_;
  queue_ = read_;
  queue_.fresh = true;
}

std::vector<Placement> SlurmExecutor::place(const std::vector<const JobRecord*>& queued, double now) {
  // Slurm queues and places it; tailord only waits out a backoff, or for
  // Slurm to answer again (asked by the reader, not here).
  std::vector<Placement> out;
  for (const JobRecord* j : queued) {
    if (j->next_attempt_at && *j->next_attempt_at > now) continue;
    Placement p;
    p.id = j->id;
    if (!options_.cluster->available()) {
      p.action = Placement::Action::kWait;
      p.reason = "waiting for Slurm: " + options_.cluster->describe();
    }
    out.push_back(std::move(p));
  }
  return out;
}

Result<Admission> SlurmExecutor::admit(const JobRecord& job, std::int64_t attempt, const Placement&) {
  // While Slurm cannot be asked about the job's partition, the job waits in
  // the queue with the reason, neither submitted nor counted as a failure
  // (an answer about the partition is kept 5 s).
  auto part = options_.cluster->partition(settings_of(job, options_.planning).slurm.partition);
  if (!part.is_ok() && part.status().code() == StatusCode::kUnavailable) {
    return Status::unavailable("waiting for Slurm: " + part.status().message());
  }
  // The attempt is counted before sbatch: a tailord that stops in between
  // finds no job with this attempt's tag and submits the next one.
  Admission a{"submitting to Slurm", {}};
  a.record.set("attempts", attempt).set("executor_job_id", "").set("executor_state", "submitting");
  a.record.set_null("next_attempt_at").set_null("pid").set_null("pid_start_ticks");
  if (!job.started_at) a.record.set("started_at", now_seconds());
  return a;
}

Result<slurm::BatchJob> SlurmExecutor::batch_job(const LaunchRequest& request) const {
  const JobRecord& job = *request.job;
  // The plan's ranks over the nodes it was made for.
  TAILOR_ASSIGN_OR_RETURN(strategies::Strategy strategy, runner::parse_plan_strategy(job.plan_json, "the job's plan"));
  const json plan = json::parse(job.plan_json, nullptr, false);
  int plan_nodes = 1, plan_gpus = 0;
  bool on_cpu = true;
  if (plan.is_object() && plan.contains("hardware") && plan["hardware"].is_object()) {
    const json& hw = plan["hardware"];
    plan_nodes = std::max(1, hw.value("nodes", 1));
    plan_gpus = hw.value("num_gpus", 0);
    on_cpu = hw.value("device", std::string("cpu")) == "cpu";
  }
  slurm::BatchJob b;
  b.tailor_id = tag(job.id, request.attempt);
  b.name = job.name;
  b.attempt = request.attempt;
  b.job_dir = request.dir;
  b.runner = options_.runner_path;
  b.runner_args = runner::runner_args(request.command);
  slurm::lay_out_ranks(static_cast<int>(strategy.num_gpus), plan_nodes, on_cpu ? 0 : plan_gpus / plan_nodes, b);
  const Settings settings = settings_of(job, options_.planning);
  if (!settings.load_error.empty()) return Status::invalid_argument("the job's spec no longer loads: " + settings.load_error);
  b.slurm = settings.slurm;
  // The node's cores split between its ranks (their threads follow them).
  if (auto part = options_.cluster->partition(b.slurm.partition); part.is_ok()) {
    const auto nodes = part->usable_nodes();
    if (!nodes.empty()) {
      int cpus = nodes.front().cpus;
      for (const slurm::Node& n : nodes)
        cpus = std::min(cpus, n.cpus);
      b.cpus_per_task = std::max(1, cpus / std::max(1, b.tasks_per_node));
    }
  }
  b.env = request.env;
  return b;
}

Launched SlurmExecutor::launch(const LaunchRequest& request) {
  const JobRecord& job = *request.job;
  const std::string& dir = request.dir;
  Launched out;
  auto failed = [&](const std::string& why) {
    out.message = "cannot submit to Slurm: " + why;
    return out;
  };
  // The last attempt's rank files would otherwise speak for this one.
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().filename().string().rfind("events.rank-", 0) == 0) fs::remove(entry.path(), ec);
  }
  auto b = batch_job(request);
  if (!b.is_ok()) return failed(b.status().message());
  // The attempt's first line in events.jsonl: its verdict reads nothing
  // older (runner/protocol/events.h).
  {
    const json launch = {{"event", runner::events::kLaunch},
                         {"time", static_cast<std::int64_t>(now_seconds())},
                         {"attempt", request.attempt},
                         {"message", "attempt " + std::to_string(request.attempt) + " submitted to Slurm"}};
    std::ofstream events(rank_events(dir, 0), std::ios::app);
    events << launch.dump() << '\n';
    if (!events.flush()) return failed("cannot write " + rank_events(dir, 0));
  }
  const std::string script = dir + "/" + kBatchScript;
  if (Status w = platform::write_file_atomic(script, slurm::batch_script(*b)); !w.is_ok()) return failed(w.message());
  Attempt a;
  a.attempt = request.attempt;
  a.dir = dir;
  a.ranks = b->ranks;
  auto id = options_.cluster->client().submit(script);
  // Once sbatch has answered, slurmctld knows the job: a queue read begun
  // before then may not list it, and would have it vanish (measured: a read
  // begun while sbatch ran, 0.13 s after the submission, declared it gone,
  // and the job ran beside its retry).
  a.submitted_at = now_seconds();
  if (!id.is_ok() && id.status().code() == StatusCode::kUnavailable) {
    // The controller went away since the partition was read: back to the
    // queue, the attempt not counted, tried again in a few seconds.
    out.state = Launched::State::kNotTaken;
    out.record.set("attempts", job.attempts).set("executor_state", "waiting for Slurm: " + id.status().message());
    out.record.set("next_attempt_at", now_seconds() + std::max(2.0, options_.poll_seconds));
    out.message = "Slurm did not take the job: " + id.status().message() + "; submitted again when it answers";
    return out;
  }
  if (!id.is_ok()) return failed(id.status().message());
  a.slurm_id = *id;
  a.state = a.phase = "submitted";
  attempts_[job.id] = a;
  out.state = Launched::State::kSubmitted;
  out.record.set("executor_job_id", a.slurm_id).set("executor_state", "submitted");
  const std::string layout = std::to_string(b->ranks) + " rank" + (b->ranks > 1 ? "s" : "") + " on " +
                             std::to_string(b->nodes) + " node" + (b->nodes > 1 ? "s" : "");
  out.message = "submitted as Slurm job " + a.slurm_id + " (" + layout + ", attempt " +
                std::to_string(request.attempt) + ")";
  out.data_json = json{{"attempt", request.attempt}, {"slurm_job_id", a.slurm_id}, {"tag", b->tailor_id},
                       {"ranks", b->ranks},          {"nodes", b->nodes},          {"script", script}}
                      .dump();
  return out;
}

void SlurmExecutor::note(Attempt& a, Observation& o, const std::string& state, const std::string& phase) {
  if (state == a.state && phase == a.phase) return;
  o.record.set("executor_state", state);
  if (!a.slurm_id.empty()) o.record.set("executor_job_id", a.slurm_id);
  // An event when the state changes in Tailor's words, not for every new
  // pending reason.
  if (phase != a.phase) {
    const json data = {{"slurm_job_id", a.slurm_id}, {"slurm_state", state}, {"state", phase}};
    o.event = NewEvent{dsl::to_string(kind()), "Slurm job " + (a.slurm_id.empty() ? "?" : a.slurm_id) + ": " + state, data.dump(), 0};
  }
  a.state = state;
  a.phase = phase;
}

Observation SlurmExecutor::poll(const std::string& job_id) {
  Observation o;
  auto it = attempts_.find(job_id);
  if (it == attempts_.end()) return o;
  Attempt& a = it->second;
  // A read begun before the submission cannot know the job.
  if (!queue_.fresh || queue_.asked_at < a.submitted_at) return o;
  if (!queue_.jobs.is_ok()) {
    // slurmctld down or slow: the job stays as it is, with the reason.
    note(a, o, "unreachable: " + queue_.jobs.status().message(), "unreachable");
    return o;
  }
  const std::string mine_tag = tag(job_id, a.attempt);
  std::optional<slurm::Job> mine;
  for (const slurm::Job& j : *queue_.jobs) {
    if (j.comment != mine_tag) continue;
    if (!mine || j.id == a.slurm_id) mine = j;
  }
  if (mine) {
    // tailord stopped between sbatch and recording the id: found by its tag.
    if (mine->id != a.slurm_id) {
      a.slurm_id = mine->id;
      o.record.set("executor_job_id", a.slurm_id);
    }
    if (mine->phase() == slurm::Phase::kRunning && !a.running) {
      // Its ranks beat from now on; each gets the full timeout to start.
      a.running = true;
      for (int k = 0; k < a.ranks; ++k) runner::touch_heartbeat(a.dir + "/" + runner::heartbeat_file_name(k));
      Started s;
      s.message = "running on " + mine->nodes + " (Slurm job " + a.slurm_id + ")";
      s.record.set("executor_state", mine->describe()).set("executor_job_id", a.slurm_id);
      s.data_json = json{{"slurm_job_id", a.slurm_id}}.dump();
      o.started = std::move(s);
    }
    note(a, o, mine->describe(), slurm::tailor_state_name(mine->state));
    // COMPLETING: the batch script (so srun, so every rank) has ended and
    // Slurm is cleaning up, which can take a minute when slurmctld came
    // back after the job ended. Rank 0's last word settles it then.
    if (mine->phase() == slurm::Phase::kEnded ||
        (mine->state == "COMPLETING" &&
         runner::events::exit_from_events(all_lines(rank_events(a.dir, 0))).has_value())) {
      ended(a, o, *mine);
    }
    return o;
  }
  if (a.slurm_id.empty()) {
    // Neither an id nor a tagged job: tailord stopped before sbatch (or
    // Slurm lost the submission). It goes back to the queue, not counted
    // as a failure.
    o.requeue = "recovered: no Slurm job has the tag " + mine_tag + "; submitted again";
    return o;
  }
  // Left the queue (MinJobAge) while tailord was away: the completion log.
  auto f = options_.cluster->client().finished(a.slurm_id);
  if (!f.is_ok()) {
    note(a, o, "unreachable: " + f.status().message(), "unreachable");
    return o;
  }
  slurm::Job gone;
  gone.id = a.slurm_id;
  gone.state = *f ? (*f)->state : "VANISHED";
  if (*f) {
    gone.exit_code = (*f)->exit_code;
    gone.exit_signal = (*f)->exit_signal;
  }
  note(a, o, *f ? gone.describe() : "no longer known to Slurm", slurm::tailor_state_name(gone.state));
  ended(a, o, gone);
  return o;
}

void SlurmExecutor::ended(Attempt& a, Observation& o, const slurm::Job& job) {
  // The ranks' outcomes: the one that decides goes to events.jsonl, so
  // that the verdict (and an OOM re-plan) reads it as from one process.
  std::vector<std::vector<std::string>> by_rank;
  for (int k = 0; k < a.ranks; ++k) by_rank.push_back(all_lines(rank_events(a.dir, k)));
  if (auto line = runner::events::deciding_rank_event(by_rank)) {
    std::ofstream events(rank_events(a.dir, 0), std::ios::app);
    events << *line << '\n';
    by_rank[0].push_back(*line);
  }
  o.exit = exit_in_events(by_rank[0]);
  o.context = "Slurm job " + a.slurm_id + " " + job.describe();
  a.ended = true;
}

bool SlurmExecutor::beating(const std::string& job_id) const {
  auto it = attempts_.find(job_id);
  return it != attempts_.end() && it->second.running;
}

void SlurmExecutor::signal(const std::string& job_id, bool kill) {
  auto it = attempts_.find(job_id);
  if (it == attempts_.end()) return;
  Attempt& a = it->second;
  if (a.slurm_id.empty() || (kill && a.killed)) return;
  // scancel: SIGTERM to every step (the ranks checkpoint and stop), SIGKILL
  // after Slurm's KillWait; --signal=KILL at once when asked to kill.
  const Status s = options_.cluster->client().cancel(a.slurm_id, kill ? "KILL" : "");
  if (kill && s.is_ok()) a.killed = true;
  if (!s.is_ok()) log_error("tailord: cancelling Slurm job " + a.slurm_id + " of " + job_id + ": " + s.to_string());
}

Adoption SlurmExecutor::adopt(const JobRecord& job, const std::string& dir) {
  // Followed through Slurm's queue by its tag from the first tick on:
  // re-adopted when Slurm still has it, judged by its events when it ended
  // meanwhile, queued again when it was never submitted.
  Attempt a;
  a.attempt = job.attempts;
  a.dir = dir;
  a.slurm_id = job.executor_job_id;
  a.state = job.executor_state;
  a.running = job.state == JobState::kRunning;
  if (auto st = runner::parse_plan_strategy(job.plan_json, "the job's plan"); st.is_ok()) {
    a.ranks = static_cast<int>(std::max<std::int64_t>(1, st->num_gpus));
  }
  Adoption out;
  out.attempt = job.attempts;
  out.message = "tailord restarted; following Slurm job " +
                (a.slurm_id.empty() ? "(by its tag " + tag(job.id, job.attempts) + ")" : a.slurm_id);
  attempts_[job.id] = std::move(a);
  return out;
}

}  // namespace tailor::daemon
