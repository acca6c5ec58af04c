// The supervisor's Slurm executor: an attempt is a batch job
// (executor/batch_script.h) tagged "<job id>/<attempt>" in its comment;
// each tick reads Slurm's queue at most once per --slurm-poll and
// reconciles every Slurm attempt with it by that tag (Slurm reuses job ids
// after a controller crash, so the id alone proves nothing). The run files
// are the local executor's: the ranks write them to the job's folder.
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "daemon/executor/batch_script.h"
#include "daemon/executor/run_files.h"
#include "daemon/scheduler/supervisor.h"
#include "daemon/scheduler/supervisor_parts.h"
#include "dsl/spec_loader.h"
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

// What the attempt runs and its estimate, for its "running" event (the
// job's attempt history reads it), as the local executor records them.
std::string start_data(const std::string& plan_json, std::int64_t attempt, const std::string& slurm_id) {
  std::int64_t total = 0;
  supervisor_parts::plan_components(plan_json, total);
  json started = {{"attempt", attempt}, {"estimated_bytes", total}, {"slurm_job_id", slurm_id}};
  if (auto st = runner::parse_plan_strategy(plan_json, "the job's plan"); st.is_ok())
    started["strategy"] = st->describe();
  return started.dump();
}

}  // namespace

std::string Supervisor::slurm_tag(const std::string& id, std::int64_t attempt) {
  return id + "/" + std::to_string(attempt);
}

void Supervisor::refresh_slurm_queue() {
  slurm_queue_.fresh = false;
  if (!options_.slurm) return;
  slurm_following_ = static_cast<int>(std::count_if(running_.begin(), running_.end(), [](const auto& kv) {
    return kv.second.executor == "slurm" && !kv.second.exit;
  }));
  std::lock_guard lock(slurm_mu_);
  if (slurm_reads_ == slurm_reads_seen_) return;
  slurm_reads_seen_ = slurm_reads_;
  slurm_queue_ = slurm_read_;
  slurm_queue_.fresh = true;
}

void Supervisor::poll_slurm() {
  for (;;) {
    {
      std::unique_lock lock(wake_mu_);
      wake_cv_.wait_for(lock, std::chrono::duration<double>(options_.slurm_poll_seconds), [this] { return stopping_; });
      if (stopping_) return;
    }
    if (slurm_following_ > 0) {
      SlurmQueue read;
      read.asked_at = now_seconds();
      read.jobs = options_.slurm->client().queue();
      std::lock_guard lock(slurm_mu_);
      slurm_read_ = std::move(read);
      ++slurm_reads_;
    }
    // Unavailable: asked again here, so that waiting jobs go as soon as
    // Slurm answers.
    if (!options_.slurm->available()) (void)options_.slurm->probe();
  }
}

void Supervisor::note_slurm_state(Running& r, const std::string& state, const std::string& phase) {
  if (state == r.slurm_state && phase == r.slurm_phase) return;
  JobUpdate u;
  u.set("executor_state", state);
  if (!r.slurm_id.empty()) u.set("executor_job_id", r.slurm_id);
  log_status(store_.update(r.id, u), "recording the Slurm state of " + r.id);
  // An event when the state changes in Tailor's words, not for every new
  // pending reason.
  if (phase != r.slurm_phase) {
    const json data = {{"slurm_job_id", r.slurm_id}, {"slurm_state", state}, {"state", phase}};
    log_status(store_.add_event(r.id, {"slurm", "Slurm job " + (r.slurm_id.empty() ? "?" : r.slurm_id) + ": " + state,
                                       data.dump(), 0}),
               "recording the Slurm state of " + r.id);
  }
  r.slurm_state = state;
  r.slurm_phase = phase;
}

bool Supervisor::follow_slurm(Running& r) {
  // A read begun before the submission cannot know the job.
  if (!slurm_queue_.fresh || slurm_queue_.asked_at < r.submitted_at) return true;
  if (!slurm_queue_.jobs.is_ok()) {
    // slurmctld down or slow: the job stays as it is, with the reason.
    note_slurm_state(r, "unreachable: " + slurm_queue_.jobs.status().message(), "unreachable");
    return true;
  }
  const std::string tag = slurm_tag(r.id, r.attempt);
  std::optional<slurm::Job> mine;
  for (const slurm::Job& j : *slurm_queue_.jobs) {
    if (j.comment != tag) continue;
    if (!mine || j.id == r.slurm_id) mine = j;
  }
  std::optional<slurm::Job> ended;
  if (mine) {
    if (mine->id != r.slurm_id) {
      // tailord stopped between sbatch and recording the id: found by its tag.
      r.slurm_id = mine->id;
      log_status(store_.update(r.id, JobUpdate().set("executor_job_id", r.slurm_id)),
                 "recording the Slurm job of " + r.id);
    }
    if (mine->phase() == slurm::Phase::kRunning && !r.slurm_running) {
      // Its ranks beat from now on; each gets the full timeout to start.
      r.slurm_running = true;
      for (int k = 0; k < r.ranks; ++k) {
        runner::touch_heartbeat(job_dir(r.id) + "/" + runner::heartbeat_file_name(k));
      }
      JobUpdate u;
      u.set("executor_state", mine->describe()).set("executor_job_id", r.slurm_id);
      auto job = store_.get(r.id);
      const Status s = store_.transition(r.id, JobState::kPlanning, JobState::kRunning,
                                         "running on " + mine->nodes + " (Slurm job " + r.slurm_id + ")", u,
                                         job.is_ok() ? start_data(job->plan_json, r.attempt, r.slurm_id) : "");
      if (!s.is_ok() && s.code() != StatusCode::kFailedPrecondition) log_status(s, "starting " + r.id);
    }
    note_slurm_state(r, mine->describe(), slurm::tailor_state_name(mine->state));
    if (mine->phase() == slurm::Phase::kEnded) ended = mine;
    // COMPLETING: the batch script (so srun, so every rank) has ended and
    // Slurm is cleaning up, which can take a minute when slurmctld came
    // back after the job ended. Rank 0's last word settles it then.
    if (mine->state == "COMPLETING" &&
        runner::events::exit_from_events(all_lines(rank_events(job_dir(r.id), 0))).has_value()) {
      ended = mine;
    }
  } else if (!r.slurm_id.empty()) {
    // Left the queue (MinJobAge) while tailord was away: the completion log.
    auto f = options_.slurm->client().finished(r.slurm_id);
    if (!f.is_ok()) {
      note_slurm_state(r, "unreachable: " + f.status().message(), "unreachable");
      return true;
    }
    slurm::Job gone;
    gone.id = r.slurm_id;
    gone.state = *f ? (*f)->state : "VANISHED";
    if (*f) {
      gone.exit_code = (*f)->exit_code;
      gone.exit_signal = (*f)->exit_signal;
    }
    ended = gone;
    note_slurm_state(r, *f ? gone.describe() : "no longer known to Slurm", slurm::tailor_state_name(gone.state));
  } else {
    // Neither an id nor a tagged job: tailord stopped before sbatch (or
    // Slurm lost the submission). It goes back to the queue, not counted
    // as a failure.
    const Status s = store_.transition(r.id, JobState::kPlanning, JobState::kQueued,
                                       "recovered: no Slurm job has the tag " + tag + "; submitted again");
    if (s.is_ok() || s.code() == StatusCode::kFailedPrecondition) return false;
    log_status(s, "queueing " + r.id + " again");
    return true;
  }
  if (!ended) return true;
  // The ranks' outcomes: the one that decides goes to events.jsonl, so
  // that the verdict (and an OOM re-plan) reads it as from one process.
  const std::string dir = job_dir(r.id);
  std::vector<std::vector<std::string>> by_rank;
  for (int k = 0; k < r.ranks; ++k)
    by_rank.push_back(all_lines(rank_events(dir, k)));
  if (auto line = runner::events::deciding_rank_event(by_rank)) {
    std::ofstream events(rank_events(dir, 0), std::ios::app);
    events << *line << '\n';
    by_rank[0].push_back(*line);
  }
  r.exit = supervisor_parts::exit_recorded(by_rank[0]);
  r.exit_context = "Slurm job " + r.slurm_id + " " + ended->describe();
  if (!r.lost.empty()) r.exit_context = r.lost + "; " + r.exit_context;
  return true;
}

void Supervisor::signal_attempt(Running& r, bool kill) {
  if (r.executor != "slurm") {
    platform::signal_group(r.pid, kill ? SIGKILL : SIGTERM);
    return;
  }
  if (!options_.slurm || r.slurm_id.empty() || (kill && r.slurm_killed)) return;
  // scancel: SIGTERM to every step (the ranks checkpoint and stop), SIGKILL
  // after Slurm's KillWait; --signal=KILL at once when asked to kill.
  const Status s = options_.slurm->client().cancel(r.slurm_id, kill ? "KILL" : "");
  if (kill && s.is_ok()) r.slurm_killed = true;
  log_status(s, "cancelling Slurm job " + r.slurm_id + " of " + r.id);
}

void Supervisor::start_slurm_job(const JobRecord& job) {
  const std::int64_t attempt = job.attempts + 1;
  // The spec's sbatch settings over tailord's; while Slurm cannot be asked
  // the job waits in the queue with the reason, neither submitted nor
  // counted as a failure (an answer about the partition is kept 5 s).
  dsl::LoadOptions lo;
  lo.catalog = options_.planning.catalog;
  lo.check_files = false;
  lo.read_root = options_.planning.spec_root;
  auto loaded = dsl::load_job_spec_text(job.spec_text, "<request>", options_.planning.spec_root, lo);
  const dsl::SlurmSpec settings =
      loaded.ok() ? slurm_settings(*loaded.spec, options_.planning) : options_.planning.slurm;
  if (options_.slurm) {
    // Slurm known to be down: schedule_queued() does not come here.
    auto part = options_.slurm->partition(settings.partition);
    if (!part.is_ok() && part.status().code() == StatusCode::kUnavailable) {
      const std::string why = "waiting for Slurm: " + part.status().message();
      if (job.executor_state != why) {
        log_status(store_.update(job.id, JobUpdate().set("executor_state", why)), "recording why " + job.id + " waits");
      }
      return;
    }
  }
  JobUpdate planning;
  planning.set("attempts", attempt).set("executor_job_id", "").set("executor_state", "submitting");
  planning.set_null("next_attempt_at").set_null("pid").set_null("pid_start_ticks");
  if (!job.started_at) planning.set("started_at", now_seconds());
  // The attempt is counted before sbatch: a tailord that stops in between
  // finds no job with this attempt's tag and submits the next one.
  Status s = store_.transition(job.id, JobState::kQueued, JobState::kPlanning, "submitting to Slurm", planning);
  if (!s.is_ok()) return log_status(s, "scheduling " + job.id);
  Running r;
  r.id = job.id;
  r.name = job.name;
  r.child = false;
  r.executor = "slurm";
  r.attempt = attempt;
  r.metrics_offset = job.metrics_offset;
  r.events_offset = job.events_offset;
  r.last_step = job.last_step;
  r.peak_bytes = job.peak_bytes;
  r.slurm_state = "submitting";
  auto failed = [&](const std::string& why) {
    r.exit = platform::ProcessExit{runner::exit_status(runner::RunnerExit::kFailure), 0};
    r.launch_error = "cannot submit to Slurm: " + why;
    if (!judge(r)) running_[job.id] = std::move(r);
  };
  if (!options_.slurm) return failed("this tailord has no Slurm executor (--executor slurm|auto)");
  const std::string dir = job_dir(job.id);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return failed("creating " + dir + ": " + ec.message());
  // The last attempt's rank files would otherwise speak for this one.
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (runner::is_heartbeat_file_name(name) || name.rfind("events.rank-", 0) == 0) fs::remove(entry.path(), ec);
  }
  ec.clear();
  const std::string plan_path = dir + "/plan.json";
  if (Status w = platform::write_file_atomic(plan_path, job.plan_json); !w.is_ok()) return failed(w.message());

  // The plan's ranks over the nodes it was made for.
  auto strategy = runner::parse_plan_strategy(job.plan_json, "the job's plan");
  if (!strategy.is_ok()) return failed(strategy.status().message());
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
  b.tailor_id = slurm_tag(job.id, attempt);
  b.name = job.name;
  b.attempt = attempt;
  b.job_dir = dir;
  b.runner = options_.runner_path;
  b.runner_args = {"--plan", plan_path, "--out", dir, "--resume"};
  if (job.memory_limit_bytes) {
    b.runner_args.push_back("--memory-limit");
    b.runner_args.push_back(std::to_string(*job.memory_limit_bytes));
  }
  slurm::lay_out_ranks(static_cast<int>(strategy->num_gpus), plan_nodes, on_cpu ? 0 : plan_gpus / plan_nodes, b);
  r.ranks = b.ranks;
  if (!loaded.ok()) return failed("the job's spec no longer loads: " + loaded.diagnostics.to_string());
  b.slurm = settings;
  // The node's cores split between its ranks (their threads follow them).
  if (auto part = options_.slurm->partition(b.slurm.partition); part.is_ok()) {
    const auto nodes = part->usable_nodes();
    if (!nodes.empty()) {
      int cpus = nodes.front().cpus;
      for (const slurm::Node& n : nodes)
        cpus = std::min(cpus, n.cpus);
      b.cpus_per_task = std::max(1, cpus / std::max(1, b.tasks_per_node));
    }
  }
  b.env = options_.runner_env;
  if (!b.env.count("OMP_WAIT_POLICY")) b.env["OMP_WAIT_POLICY"] = "PASSIVE";
  if (!options_.planning.spec_root.empty()) b.env[runner::kSpecRootEnv] = options_.planning.spec_root;
  if (options_.heartbeat_timeout_seconds > 0) {
    char every[32];
    std::snprintf(every, sizeof every, "%.3f", std::max(0.05, options_.heartbeat_timeout_seconds / 10));
    b.env[runner::kHeartbeatEnv] = every;
  }
  // The attempt's first line in events.jsonl: its verdict reads nothing
  // older (runner/protocol/events.h).
  {
    const json launch = {{"event", runner::events::kLaunch},
                         {"time", static_cast<std::int64_t>(now_seconds())},
                         {"attempt", attempt},
                         {"message", "attempt " + std::to_string(attempt) + " submitted to Slurm"}};
    std::ofstream events(rank_events(dir, 0), std::ios::app);
    events << launch.dump() << '\n';
    if (!events.flush()) return failed("cannot write " + rank_events(dir, 0));
  }
  const std::string script = dir + "/" + kBatchScript;
  if (Status w = platform::write_file_atomic(script, slurm::batch_script(b)); !w.is_ok()) return failed(w.message());
  r.submitted_at = now_seconds();
  auto id = options_.slurm->client().submit(script);
  if (!id.is_ok() && id.status().code() == StatusCode::kUnavailable) {
    // The controller went away since the partition was read: back to the
    // queue, the attempt not counted, tried again in a few seconds.
    JobUpdate back;
    back.set("attempts", job.attempts).set("executor_state", "waiting for Slurm: " + id.status().message());
    back.set("next_attempt_at", now_seconds() + std::max(2.0, options_.slurm_poll_seconds));
    const Status q = store_.transition(
        job.id, JobState::kPlanning, JobState::kQueued,
        "Slurm did not take the job: " + id.status().message() + "; submitted again when it answers", back);
    if (q.is_ok()) return;
    log_status(q, "queueing " + job.id + " again");
  }
  if (!id.is_ok()) return failed(id.status().message());
  r.slurm_id = *id;
  const std::string layout = std::to_string(b.ranks) + " rank" + (b.ranks > 1 ? "s" : "") + " on " +
                             std::to_string(b.nodes) + " node" + (b.nodes > 1 ? "s" : "");
  log_status(store_.update(job.id, JobUpdate().set("executor_job_id", r.slurm_id).set("executor_state", "submitted")),
             "recording the Slurm job of " + job.id);
  const json data = {{"attempt", attempt}, {"slurm_job_id", r.slurm_id}, {"tag", b.tailor_id},
                     {"ranks", b.ranks},   {"nodes", b.nodes},           {"script", script}};
  log_status(store_.add_event(job.id, {"slurm",
                                       "submitted as Slurm job " + r.slurm_id + " (" + layout + ", attempt " +
                                           std::to_string(attempt) + ")",
                                       data.dump(), 0}),
             "recording the submission of " + job.id);
  r.slurm_state = "submitted";
  r.slurm_phase = "submitted";
  std::int64_t total = 0;
  const auto components = supervisor_parts::plan_components(job.plan_json, total);
  metrics_.set_job_estimate(job.id, job.name, components, total);
  running_[job.id] = std::move(r);
}

}  // namespace tailor::daemon
