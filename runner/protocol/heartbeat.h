// The runner's heartbeat: while a runner process is scheduled, a thread of
// its own touches a file in the output folder every interval, so that
// tailord can tell a runner that stopped (SIGSTOP, a frozen cgroup, a
// machine that stalls) from one busy with a long step, a checkpoint or a
// slow collective, and declare it lost after a timeout rather than keep
// its memory reserved forever. The file is on the job's folder, so the same
// check works where tailord cannot see the process (Slurm nodes).
//
// tailord sets TAILOR_HEARTBEAT_SECONDS for the runners it starts; each
// process of a job beats into a file of its own: `heartbeat` (a one-process
// runner, or the ranks' launcher) and `heartbeat.rank-R` (rank R).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace tailor::runner {

inline constexpr const char* kHeartbeatEnv = "TAILOR_HEARTBEAT_SECONDS";

// "heartbeat", or "heartbeat.rank-R" for rank `rank` of a multi-rank job.
std::string heartbeat_file_name(std::optional<int> rank);
// Whether a file name is one of a job's heartbeat files.
bool is_heartbeat_file_name(const std::string& name);
// The interval from TAILOR_HEARTBEAT_SECONDS; nullopt when unset, zero or
// not a number of seconds.
std::optional<std::chrono::milliseconds> heartbeat_interval_from_env();

class Heartbeat {
 public:
  // Touches `path` now and then every `interval` until destroyed (creating
  // it when missing; a folder not there yet is skipped until it is).
  Heartbeat(std::string path, std::chrono::milliseconds interval);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  void run();

  std::string path_;
  std::chrono::milliseconds interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// Touches `path` (creating it); false when that failed.
bool touch_heartbeat(const std::string& path);

}  // namespace tailor::runner
