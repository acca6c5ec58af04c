// Supervisor::recover on a real SQLite store: a runner that ended while
// tailord was down is judged by the exit its events file records; one whose
// pid tailord never recorded is found by the job's lock and re-adopted, and
// no attempt starts while that lock is held; one whose start was never
// stored is judged, not launched again; and the end of a runner that the
// store could not take (another process held it) is written once it can.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <fstream>
#include <thread>

#include "daemon/metrics/daemon_metrics.h"
#include "daemon/scheduler/supervisor.h"
#include "daemon/store/job_store.h"
#include "daemon/store/sqlite.h"
#include "platform/file_lock.h"
#include "platform/process.h"
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

// A job whose runner holds the job's lock, as tailord hands it over at
// launch: `sleep` stands in for tailor-runner.
struct LockedRunner {
  platform::Process process;
  explicit LockedRunner(const fs::path& job_dir) {
    fs::create_directories(job_dir);
    auto lock = platform::FileLock::acquire((job_dir / "runner.lock").string());
    EXPECT_TRUE(lock.is_ok()) << lock.status().to_string();
    platform::LaunchRequest req;
    req.argv = {"/bin/sleep", "120"};
    req.log_path = (job_dir / "runner.log").string();
    req.inherit_fd = lock->fd();
    auto p = platform::launch_process(req);
    EXPECT_TRUE(p.is_ok()) << p.status().to_string();
    if (p.is_ok()) process = *p;
  }
  ~LockedRunner() {
    platform::signal_group(process.pid, SIGKILL);
    (void)platform::wait_child(process.pid);
  }
};

NewJob small_job() {
  NewJob nj;
  nj.name = "j";
  nj.spec_text = "name: j\n";
  nj.spec_json = "{}";
  nj.plan_json = "{}";
  nj.retries = 2;
  nj.estimated_bytes = 1;
  return nj;
}

TEST(SupervisorRecoverTest, ARunnerLaunchedBeforeTailordRecordedItIsReadoptedByItsLockNotLaunchedAgain) {
  testing::TempDir dir;
  auto store = JobStore::open(dir.file("tailor.db"));
  ASSERT_TRUE(store.is_ok());
  auto made = (*store)->create(small_job());
  ASSERT_TRUE(made.is_ok());
  const std::string id = made->job.id;
  // tailord died after the fork: the job is still planning, with no pid in
  // the store and no pid file.
  ASSERT_TRUE((*store)->transition(id, JobState::kQueued, JobState::kPlanning, "scheduled").is_ok());
  LockedRunner runner(fs::path(dir.file("data")) / "jobs" / id);
  ASSERT_GT(runner.process.pid, 0);
  DaemonMetrics metrics;
  SupervisorOptions o;
  o.data_dir = dir.file("data");
  Supervisor sup(**store, metrics, o);
  ASSERT_TRUE(sup.recover().is_ok());
  auto job = (*store)->get(id);
  ASSERT_TRUE(job.is_ok());
  EXPECT_EQ(job->state, JobState::kRunning) << to_string(job->state);
  EXPECT_EQ(job->pid, runner.process.pid);
  EXPECT_EQ(job->pid_start_ticks, runner.process.start_ticks);
  EXPECT_EQ(job->attempts, 1);
}

TEST(SupervisorStartTest, NoAttemptStartsWhileAnEarlierRunnerStillHoldsTheJobsLock) {
  testing::TempDir dir;
  auto store = JobStore::open(dir.file("tailor.db"));
  ASSERT_TRUE(store.is_ok());
  auto made = (*store)->create(small_job());
  ASSERT_TRUE(made.is_ok());
  const std::string id = made->job.id;
  LockedRunner earlier(fs::path(dir.file("data")) / "jobs" / id);
  DaemonMetrics metrics;
  SupervisorOptions o;
  o.data_dir = dir.file("data");
  o.runner_path = "/bin/true";
  o.host_budget_bytes = 1 << 20;
  o.poll_seconds = 0.01;
  o.backoff_seconds = 60;
  o.heartbeat_timeout_seconds = 0;
  Supervisor sup(**store, metrics, o);
  sup.start();
  std::optional<JobRecord> job;
  for (int i = 0; i < 2000 && !(job && job->failures > 0); ++i) {
    auto j = (*store)->get(id);
    if (j.is_ok()) job = *j;
    usleep(5000);
  }
  sup.stop();
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->state, JobState::kQueued) << to_string(job->state);
  EXPECT_EQ(job->failures, 1);
  EXPECT_EQ(job->attempts, 0);
  EXPECT_NE(job->exit_reason.find("runner.lock"), std::string::npos) << job->exit_reason;
}

TEST(SupervisorRecoverTest, ARunnerWhoseStartWasNeverStoredIsJudgedByItsEventsNotLaunchedAgain) {
  testing::TempDir dir;
  auto store = JobStore::open(dir.file("tailor.db"));
  ASSERT_TRUE(store.is_ok());
  auto made = (*store)->create(small_job());
  ASSERT_TRUE(made.is_ok());
  const std::string id = made->job.id;
  // Launched (its pid file is there), ran to the end, but the store still
  // says planning: tailord could not store the start, then stopped.
  ASSERT_TRUE((*store)->transition(id, JobState::kQueued, JobState::kPlanning, "scheduled").is_ok());
  const fs::path job_dir = fs::path(dir.file("data")) / "jobs" / id;
  fs::create_directories(job_dir);
  std::ofstream(job_dir / "runner.pid") << dead_pid() << " 1\n";
  std::ofstream(job_dir / "events.jsonl") << R"({"event":"start"})" "\n" R"({"event":"done","steps":3,"exit_code":0})" "\n";
  DaemonMetrics metrics;
  SupervisorOptions o;
  o.data_dir = dir.file("data");
  Supervisor sup(**store, metrics, o);
  ASSERT_TRUE(sup.recover().is_ok());
  auto job = (*store)->get(id);
  ASSERT_TRUE(job.is_ok());
  EXPECT_EQ(job->state, JobState::kSucceeded) << to_string(job->state) << " (" << job->exit_reason << ")";
  EXPECT_EQ(job->attempts, 1);
}

// Polls `cond` for up to 10 s.
bool eventually(const std::function<bool()>& cond) {
  for (int i = 0; i < 2000; ++i) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

// The defect: the supervisor logged the failed write and forgot the runner,
// so the job stayed "running" with a dead pid until tailord restarted.
TEST(SupervisorStartTest, TheEndOfARunnerIsStoredOnceAnotherProcessLetsGoOfTheDatabase) {
  testing::TempDir dir;
  auto store = JobStore::open(dir.file("tailor.db"), 50);
  ASSERT_TRUE(store.is_ok());
  auto made = (*store)->create(small_job());
  ASSERT_TRUE(made.is_ok());
  const std::string id = made->job.id;
  // A runner that ends when told to: a file "go" in its folder.
  const std::string runner = dir.file("runner.sh");
  std::ofstream(runner) << "#!/bin/sh\necho \"$TAILOR_SPEC_ROOT\" > spec-root\n"
                           "while [ ! -e go ]; do sleep 0.01; done\nexit 0\n";
  fs::permissions(runner, fs::perms::owner_all);
  DaemonMetrics metrics;
  SupervisorOptions o;
  o.data_dir = dir.file("data");
  o.runner_path = runner;
  o.host_budget_bytes = 1 << 20;
  o.poll_seconds = 0.01;
  o.heartbeat_timeout_seconds = 0;
  o.planning.spec_root = dir.path().string();
  Supervisor sup(**store, metrics, o);
  sup.start();
  auto state = [&] {
    auto j = (*store)->get(id);
    return j.is_ok() ? j->state : JobState::kQueued;
  };
  ASSERT_TRUE(eventually([&] { return state() == JobState::kRunning; }));
  auto other = Database::open(dir.file("tailor.db"));
  ASSERT_TRUE(other.is_ok());
  ASSERT_TRUE(other->exec("BEGIN EXCLUSIVE").is_ok());
  std::ofstream(fs::path(dir.file("data")) / "jobs" / id / "go") << "";
  // The runner ends; storing its verdict fails while the lock is held.
  ASSERT_TRUE(eventually([&] { return !(*store)->health().writable; }));
  EXPECT_EQ(state(), JobState::kRunning);
  ASSERT_TRUE(other->exec("ROLLBACK").is_ok());
  EXPECT_TRUE(eventually([&] { return state() == JobState::kSucceeded; })) << to_string(state());
  sup.stop();
  auto job = (*store)->get(id);
  ASSERT_TRUE(job.is_ok());
  EXPECT_FALSE(job->pid.has_value());
  EXPECT_EQ(job->attempts, 1);
  EXPECT_TRUE((*store)->health().writable);
  // The runner was told where the files its spec names must be read from.
  std::ifstream told(fs::path(dir.file("data")) / "jobs" / id / "spec-root");
  std::string root;
  std::getline(told, root);
  EXPECT_EQ(root, dir.path().string());
}

}  // namespace
}  // namespace tailor::daemon
