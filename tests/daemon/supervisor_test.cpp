// Supervisor::recover on a real SQLite store: a runner that ended while
// tailord was down is judged by the exit its events file records.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "daemon/metrics/daemon_metrics.h"
#include "daemon/scheduler/supervisor.h"
#include "daemon/store/job_store.h"
#include "tests/testing/temp_dir.h"

namespace tailor::daemon {
namespace {

namespace fs = std::filesystem;

// The pid of a process that has ended (and been reaped).
pid_t dead_pid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

struct Case {
  const char* name;
  std::vector<std::string> events;
  JobState state;
  std::int64_t failures;
  const char* reason;
};

TEST(SupervisorRecoverTest, ARunnerThatEndedWhileTailordWasDownIsJudgedByItsRecordedExit) {
  const Case cases[] = {
      // The bug: a refused input was retried as a crash after a restart.
      {"refused input", {R"({"event":"start"})", R"({"event":"error","message":"token id 300 is outside","exit_code":2})"},
       JobState::kFailed, 0, "bad input"},
      {"failure", {R"({"event":"start"})", R"({"event":"error","message":"LibTorch: boom","exit_code":1})"},
       JobState::kQueued, 1, "LibTorch: boom"},
      {"done", {R"({"event":"start"})", R"({"event":"done","steps":3,"exit_code":0})"}, JobState::kSucceeded, 0, ""},
      {"killed", {R"({"event":"start"})"}, JobState::kQueued, 1, "signal 9"},
  };
  for (const Case& c : cases) {
    testing::TempDir dir;
    auto store = JobStore::open(dir.file("tailor.db"));
    ASSERT_TRUE(store.is_ok()) << store.status().to_string();
    NewJob nj;
    nj.name = "j";
    nj.spec_text = "name: j\n";
    nj.spec_json = "{}";
    nj.plan_json = "{}";
    nj.retries = 2;
    auto made = (*store)->create(nj);
    ASSERT_TRUE(made.is_ok());
    const std::string id = made->job.id;
    ASSERT_TRUE((*store)->transition(id, JobState::kQueued, JobState::kPlanning, "scheduled").is_ok());
    JobUpdate u;
    u.set("pid", static_cast<std::int64_t>(dead_pid())).set("pid_start_ticks", std::int64_t{1}).set("attempts", 1);
    ASSERT_TRUE((*store)->transition(id, JobState::kPlanning, JobState::kRunning, "runner started", u).is_ok());
    const fs::path job_dir = fs::path(dir.file("data")) / "jobs" / id;
    fs::create_directories(job_dir);
    {
      std::ofstream f(job_dir / "events.jsonl");
      for (const auto& e : c.events) f << e << "\n";
    }
    DaemonMetrics metrics;
    SupervisorOptions o;
    o.data_dir = dir.file("data");
    Supervisor sup(**store, metrics, o);
    ASSERT_TRUE(sup.recover().is_ok()) << c.name;
    auto job = (*store)->get(id);
    ASSERT_TRUE(job.is_ok());
    EXPECT_EQ(job->state, c.state) << c.name << ": " << to_string(job->state) << " (" << job->exit_reason << ")";
    EXPECT_EQ(job->failures, c.failures) << c.name;
    EXPECT_NE(job->exit_reason.find(c.reason), std::string::npos) << c.name << ": " << job->exit_reason;
  }
}

}  // namespace
}  // namespace tailor::daemon
