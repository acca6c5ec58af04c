#include "daemon/executor/local_executor.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/log.h"
#include "core/units.h"
#include "daemon/executor/run_files.h"
#include "platform/failpoint.h"
#include "platform/file_lock.h"
#include "platform/files.h"

namespace tailor::daemon {
namespace {

namespace fs = std::filesystem;
using platform::ProcessExit;

// Held from before tailord starts a job's runner until the runner and
// everything that inherited the descriptor have ended (platform/file_lock.h).
// Its content is the attempt's runner's pid and start time, written between
// the spawn and the store's commit: a restart finds the runner through it
// instead of launching a second one. Empty until then.
constexpr const char* kRunnerLockFile = "runner.lock";
// Where tailord before 2026-11-30 wrote that pid (a folder of a runner it
// started is read as it left it).
constexpr const char* kPidFile = "runner.pid";

// The pid and start time a job folder records for its attempt's runner.
std::optional<std::pair<std::int64_t, std::int64_t>> recorded_runner(const fs::path& dir) {
  for (const char* name : {kPidFile, kRunnerLockFile}) {
    std::ifstream f(dir / name);
    std::int64_t p = 0, t = 0;
    if (f >> p >> t) return std::pair{p, t};
  }
  return std::nullopt;
}

// A runner tailord never recorded (it died between fork and its commit):
// the process group of whoever holds the job's lock, or the holder itself
// once the group's leader is gone.
// A runner that is exiting still holds the lock between the check and
// the scan of /proc (its descriptors go as it ends), so a lock with no
// holder in sight is checked again: one that is no longer held had a
// runner that ended, which is not a reason to leave the job alone.
std::optional<platform::Process> runner_holding_lock(const fs::path& dir, std::string& why_not) {
  const std::string path = (dir / kRunnerLockFile).string();
  constexpr int kLooks = 5;
  for (int look = 0; look < kLooks; ++look) {
    if (look > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20 << look));
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
  }
  why_not = path + " is locked, but no process holding it can be seen";
  return std::nullopt;
}

// Whether the job's events file has grown past `offset`, the end of what
// tailord took in from earlier attempts: the attempt's runner wrote there.
bool runner_wrote_since(const std::string& dir, std::int64_t offset) {
  std::error_code ec;
  const auto size = fs::file_size(fs::path(dir) / "events.jsonl", ec);
  return !ec && static_cast<std::int64_t>(size) > offset;
}

std::string gpu_list(const std::vector<int>& gpus) {
  std::string list;
  for (int g : gpus) list += (list.empty() ? "" : ",") + std::to_string(g);
  return list;
}

}  // namespace

std::vector<Placement> LocalExecutor::place(const std::vector<const JobRecord*>& queued, double now) {
  Capacity cap;
  cap.host_total_bytes = options_.host_budget_bytes;
  cap.host_free_bytes = options_.host_budget_bytes;
  cap.gpu_total = static_cast<int>(options_.gpus.size());
  std::vector<bool> busy(options_.gpus.size(), false);
  for (const auto& [id, a] : attempts_) {
    cap.host_free_bytes -= a.reserved_bytes;
    for (int g : a.gpus) {
      if (g >= 0 && g < static_cast<int>(busy.size())) busy[static_cast<std::size_t>(g)] = true;
    }
  }
  for (std::size_t g = 0; g < busy.size(); ++g) {
    if (!busy[g]) cap.free_gpus.push_back(static_cast<int>(g));
  }
  std::vector<QueuedJob> order;
  for (const JobRecord* j : queued) {
    order.push_back({j->id, j->gpus_needed, j->gpus_needed > 0 ? 0 : j->estimated_bytes, j->next_attempt_at});
  }
  return schedule(order, cap, now);
}

Result<Admission> LocalExecutor::admit(const JobRecord&, std::int64_t, const Placement& where) {
  std::string text = where.gpus.empty() ? Bytes(where.bytes).to_string() + " of the host budget" : "GPUs";
  for (int g : where.gpus) text += " " + std::to_string(g);
  return Admission{"scheduled: " + text, {}};
}

Launched LocalExecutor::launch(const LaunchRequest& request) {
  const JobRecord& job = *request.job;
  const fs::path dir = request.dir;
  Launched out;
  std::error_code ec;
  // An earlier attempt's pid must not stand for this attempt should
  // tailord stop before it records this one's (adopt() reads it).
  fs::remove(dir / kPidFile, ec);
  platform::LaunchRequest req;
  req.argv = {options_.runner_path};
  for (std::string& a : runner::runner_args(request.command)) req.argv.push_back(std::move(a));
  req.env = request.env;
  if (!request.placement.gpus.empty()) req.env["CUDA_VISIBLE_DEVICES"] = gpu_list(request.placement.gpus);
  req.log_path = (dir / "runner.log").string();
  req.working_dir = dir.string();
  // Taken before the fork and inherited by the runner: from here on, a
  // crash of tailord at any moment leaves a held lock that the next
  // tailord finds (adopt()), so no job ever gets a second runner.
  auto lock = platform::FileLock::acquire((dir / kRunnerLockFile).string());
  if (!lock.is_ok()) {
    out.message = lock.status().code() == StatusCode::kFailedPrecondition
                      ? "a process of an earlier attempt still holds " + std::string(kRunnerLockFile)
                      : lock.status().message();
    return out;
  }
  if (::ftruncate(lock->fd(), 0) != 0) {
    out.message = "emptying " + (dir / kRunnerLockFile).string() + ": " + std::strerror(errno);
    return out;
  }
  req.inherit_fd = lock->fd();
  auto proc = platform::launch_process(req);
  if (!proc.is_ok()) {
    out.message = proc.status().message();
    return out;
  }
  // The narrowest window: the runner runs and nothing but its own files
  // says so (adopt() reads them).
  platform::crash_point("launch.after_fork");
  // Into the lock file, through the descriptor the runner shares (no file
  // of its own: one inode fewer per job). For a tailord that crashes: the
  // runner it names dies with the machine, so it need not survive a power
  // cut. A few bytes at offset 0 in one write: a reader sees all or none.
  const std::string pid_text = std::to_string(proc->pid) + " " + std::to_string(proc->start_ticks) + "\n";
  if (::pwrite(lock->fd(), pid_text.data(), pid_text.size(), 0) != static_cast<ssize_t>(pid_text.size())) {
    log_error("tailord: recording the runner's pid of " + job.id + " in " + kRunnerLockFile + ": " +
              std::strerror(errno));
  }
  attempts_[job.id] = {proc->pid, proc->start_ticks, true, request.placement.bytes, request.placement.gpus,
                       dir.string()};
  out.state = Launched::State::kStarted;
  JobUpdate& u = out.started.record;
  u.set("pid", static_cast<std::int64_t>(proc->pid)).set("pid_start_ticks", proc->start_ticks);
  u.set("attempts", request.attempt).set("assigned_gpus", gpu_list(request.placement.gpus));
  u.set_null("next_attempt_at").set("estimated_bytes", request.placement.bytes);
  if (!job.started_at) u.set("started_at", now_seconds());
  out.started.message =
      "runner started (pid " + std::to_string(proc->pid) + ", attempt " + std::to_string(request.attempt) + ")";
  out.started.data_json = "{}";
  return out;
}

Observation LocalExecutor::poll(const std::string& job_id) {
  Observation o;
  auto it = attempts_.find(job_id);
  if (it == attempts_.end()) return o;
  Attempt& a = it->second;
  if (a.child) {
    auto reaped = platform::reap_child(a.pid);
    if (reaped.is_ok()) {
      o.exit = *reaped;
    } else {
      a.child = false;  // reaped elsewhere; judged like an adopted runner
    }
  }
  // Not our child: its exit status is gone; its events file tells.
  if (!a.child && !o.exit && !platform::process_is(a.pid, a.start_ticks)) o.exit = exit_in_events_file(a.dir);
  return o;
}

void LocalExecutor::signal(const std::string& job_id, bool kill) {
  auto it = attempts_.find(job_id);
  if (it != attempts_.end()) platform::signal_group(it->second.pid, kill ? SIGKILL : SIGTERM);
}

Adoption LocalExecutor::adopt(const JobRecord& job, const std::string& dir) {
  std::optional<std::int64_t> pid = job.pid, ticks = job.pid_start_ticks;
  if (!pid) {
    if (auto recorded = recorded_runner(dir)) {
      pid = recorded->first;
      ticks = recorded->second;
    }
  }
  Attempt a;
  a.child = false;
  a.dir = dir;
  a.reserved_bytes = job.gpus_needed > 0 ? 0 : job.estimated_bytes;
  std::stringstream gl(job.assigned_gpus);
  for (std::string g; std::getline(gl, g, ',');) {
    if (!g.empty()) a.gpus.push_back(std::atoi(g.c_str()));
  }
  Adoption out;
  out.attempt = job.attempts;
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
      // Launching would fail on the lock too; the operator sees why.
      out.kind = Adoption::Kind::kLeaveAlone;
      out.message = why_not;
      return out;
    }
  }
  if (alive) {
    a.pid = static_cast<pid_t>(*pid);
    a.start_ticks = *ticks;
    attempts_[job.id] = a;
    out.kind = Adoption::Kind::kFollow;
    if (job.state == JobState::kPlanning) {
      out.to_running = true;
      out.attempt = job.attempts + 1;
      out.record.set("pid", *pid).set("pid_start_ticks", *ticks).set("attempts", out.attempt);
      out.message = "recovered: re-adopted runner pid " + std::to_string(*pid) + found_by;
    } else {
      if (!found_by.empty()) out.record.set("pid", *pid).set("pid_start_ticks", *ticks);
      out.message = "tailord restarted; re-adopted runner pid " + std::to_string(*pid) + found_by;
    }
    return out;
  }
  // Planning: the attempt was being launched when tailord stopped. Its
  // runner ran if tailord wrote its pid file, or, should tailord have
  // stopped before even that, if the runner wrote events past what the
  // earlier attempts left. One that ended without a word did nothing worth
  // keeping, and runs again.
  const bool ran = pid.has_value() || runner_wrote_since(dir, job.events_offset);
  if (job.state == JobState::kPlanning && !ran) {
    out.kind = Adoption::Kind::kRequeue;
    out.message = "recovered: tailord restarted before the runner started";
    return out;
  }
  a.pid = static_cast<pid_t>(pid.value_or(-1));
  attempts_[job.id] = a;
  out.kind = Adoption::Kind::kEnded;
  if (job.state == JobState::kPlanning) {
    // The attempt ran although its start was never stored, and it has
    // ended. Launching it again would run the job twice.
    out.to_running = true;
    out.attempt = job.attempts + 1;
    out.record.set("attempts", out.attempt);
    if (pid) {
      out.record.set("pid", *pid).set("pid_start_ticks", ticks.value_or(0));
      out.message = "recovered: runner pid " + std::to_string(*pid) + " started before tailord stopped";
    } else {
      out.message = "recovered: the runner of attempt " + std::to_string(out.attempt) +
                    " started before tailord stopped, as its events say, and has ended";
    }
  }
  return out;
}

std::string LocalExecutor::describe() const {
  std::string gpus = options_.gpus.empty() ? "no GPUs" : std::to_string(options_.gpus.size()) + " GPU(s)";
  return "this machine: " + Bytes(options_.host_budget_bytes).to_string() + " for CPU jobs, " + gpus;
}

void LocalExecutor::publish(DaemonMetrics& metrics, const std::map<std::string, std::int64_t>& peaks) const {
  std::int64_t reserved = 0;
  std::vector<std::int64_t> gpu_used(options_.gpus.size(), 0);
  for (const auto& [id, a] : attempts_) {
    reserved += a.reserved_bytes;
    const auto peak = peaks.find(id);
    for (int g : a.gpus) {
      if (g >= 0 && g < static_cast<int>(gpu_used.size()) && peak != peaks.end()) {
        gpu_used[static_cast<std::size_t>(g)] += peak->second;
      }
    }
  }
  metrics.set_host_memory(options_.host_budget_bytes, reserved);
  for (std::size_t g = 0; g < options_.gpus.size(); ++g) {
    metrics.set_gpu_memory(static_cast<int>(g), options_.gpus[g].name, options_.gpus[g].memory.count(), gpu_used[g]);
  }
}

}  // namespace tailor::daemon
