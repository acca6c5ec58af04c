#include "runner/dist/launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runner/protocol/events.h"

namespace tailor::runner::dist {
namespace {

volatile sig_atomic_t g_stop_signal = 0;
void on_stop(int sig) { g_stop_signal = sig; }

RunnerExit exit_of(const RankExit& e) {
  if (e.signaled) return RunnerExit::kFailure;
  return runner_exit_from_status(e.status).value_or(RunnerExit::kFailure);
}

bool is_failure(const RankExit& e) {
  const RunnerExit x = exit_of(e);
  return x != RunnerExit::kOk && x != RunnerExit::kCancelled;
}

std::string last_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return last;
}

// The deciding rank's terminal event for events.jsonl, with "rank".
std::string deciding_event(const std::string& out_dir, const RankExit& e, RunnerExit exit) {
  using nlohmann::json;
  if (!e.signaled) {
    json j = json::parse(last_line(rank_events_path(out_dir, e.rank)), nullptr, false);
    if (j.is_object() && j.contains(events::kExitCodeKey)) {
      j["rank"] = e.rank;
      return j.dump();
    }
  }
  json j;
  j["event"] = events::kError;
  j["time"] = static_cast<std::int64_t>(std::time(nullptr));
  j["message"] = e.signaled ? "rank " + std::to_string(e.rank) + " was killed by signal " + std::to_string(e.signal) +
                                  " (" + strsignal(e.signal) + ")"
                            : "rank " + std::to_string(e.rank) + " exited with status " + std::to_string(e.status) +
                                  " without saying why";
  j["rank"] = e.rank;
  j[events::kExitCodeKey] = exit_status(exit);
  return j.dump();
}

}  // namespace

int free_loopback_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return 0;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  int port = 0;
  if (::bind(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 &&
      ::getsockname(s, reinterpret_cast<sockaddr*>(&sa), &len) == 0) {
    port = ntohs(sa.sin_port);
  }
  ::close(s);
  return port;
}

int stop_signal() { return g_stop_signal; }

void catch_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: waitpid returns to pass the signal on
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
}

std::string rank_events_path(const std::string& out_dir, int rank) {
  if (rank == 0) return (std::filesystem::path(out_dir) / "events.jsonl").string();
  return (std::filesystem::path(out_dir) / ("events.rank-" + std::to_string(rank) + ".jsonl")).string();
}

JobOutcome job_outcome(const std::vector<RankExit>& in_order) {
  for (const RankExit& e : in_order) {
    if (is_failure(e)) return {exit_of(e), e.rank};
  }
  for (const RankExit& e : in_order) {
    if (exit_of(e) == RunnerExit::kCancelled) return {RunnerExit::kCancelled, -1};
  }
  return {};
}

int launch_ranks(const LaunchOptions& o) {
  const int port = free_loopback_port();
  if (port == 0) {
    std::fprintf(stderr, "tailor-runner: no free loopback port for the ranks' rendezvous: %s\n", std::strerror(errno));
    return exit_status(RunnerExit::kFailure);
  }
  catch_stop_signals();
  if (g_stop_signal != 0) return exit_status(RunnerExit::kCancelled);

  const pid_t parent = ::getpid();
  const int threads = std::max(1, o.threads / o.world);
  std::vector<pid_t> pids(static_cast<std::size_t>(o.world), -1);
  std::vector<std::string> argv_strings;
  argv_strings.push_back(o.executable);
  argv_strings.insert(argv_strings.end(), o.args.begin(), o.args.end());
  argv_strings.push_back("--threads");
  argv_strings.push_back(std::to_string(threads));
  std::vector<char*> argv;
  for (auto& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  int alive = 0;
  for (int r = 0; r < o.world; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) _exit(exit_status(RunnerExit::kFailure));
      ::signal(SIGTERM, SIG_DFL);
      ::signal(SIGINT, SIG_DFL);
      const std::string t = std::to_string(threads);
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(o.world).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(o.world).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      ::setenv("TAILOR_LAUNCHER_PID", std::to_string(parent).c_str(), 1);
      // BLAS and OpenMP pools sized to the rank's share of the cores.
      ::setenv("OMP_NUM_THREADS", t.c_str(), 1);
      ::setenv("MKL_NUM_THREADS", t.c_str(), 1);
      ::setenv("OPENBLAS_NUM_THREADS", t.c_str(), 1);
      ::execv(o.executable.c_str(), argv.data());
      std::fprintf(stderr, "tailor-runner: cannot start rank %d (%s): %s\n", r, o.executable.c_str(), std::strerror(errno));
      _exit(127);
    }
    if (pid < 0) {
      std::fprintf(stderr, "tailor-runner: cannot start rank %d: %s\n", r, std::strerror(errno));
      for (pid_t p : pids) {
        if (p > 0) ::kill(p, SIGKILL);
      }
      while (alive > 0 && ::waitpid(-1, nullptr, 0) > 0) --alive;
      return exit_status(RunnerExit::kFailure);
    }
    pids[static_cast<std::size_t>(r)] = pid;
    ++alive;
  }

  std::vector<RankExit> exits;
  bool forwarded = false, stopped_others = false;
  while (alive > 0) {
    // (Checked before each wait too: a signal that came while the ranks
    // were being started interrupted no wait.)
    if (g_stop_signal != 0 && !forwarded) {
      forwarded = true;
      for (pid_t p : pids) {
        if (p > 0) ::kill(p, SIGTERM);
      }
    }
    int st = 0;
    const pid_t pid = ::waitpid(-1, &st, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;  // ECHILD: nothing left
    }
    const auto it = std::find(pids.begin(), pids.end(), pid);
    if (it == pids.end()) continue;
    RankExit e;
    e.rank = static_cast<int>(it - pids.begin());
    e.signaled = WIFSIGNALED(st);
    e.signal = e.signaled ? WTERMSIG(st) : 0;
    e.status = WIFEXITED(st) ? WEXITSTATUS(st) : 0;
    // Killed by us after another rank failed: not a cause of its own.
    if (!(stopped_others && e.signaled && e.signal == SIGKILL)) exits.push_back(e);
    *it = -1;
    --alive;
    if (is_failure(e) && !stopped_others) {
      stopped_others = true;
      for (pid_t p : pids) {
        if (p > 0) ::kill(p, SIGKILL);
      }
    }
  }
  const JobOutcome outcome = job_outcome(exits);
  if (outcome.deciding_rank >= 0) {
    const RankExit& e = *std::find_if(exits.begin(), exits.end(),
                                      [&](const RankExit& x) { return x.rank == outcome.deciding_rank; });
    if (o.record_outcome && (e.rank != 0 || e.signaled)) {
      std::ofstream events(rank_events_path(o.out_dir, 0), std::ios::app);
      events << deciding_event(o.out_dir, e, outcome.exit) << '\n';
    }
    std::fprintf(stderr, "tailor-runner: rank %d ended %s (%s)\n", e.rank, o.what.c_str(), to_string(outcome.exit));
  }
  return exit_status(outcome.exit);
}

}  // namespace tailor::runner::dist
