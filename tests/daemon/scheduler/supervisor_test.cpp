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
#include <fstream>
#include <functional>
#include <thread>

#include "daemon/metrics/daemon_metrics.h"
#include "daemon/scheduler/supervisor.h"
#include "daemon/store/job_store.h"
#include "daemon/store/sqlite.h"
#include "platform/file_lock.h"
#include "platform/process.h"
#include "tests/testing/eventually.h"
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

struct RecoveryCase {
  const char* name;
  std::vector<std::string> events;
  JobState state;
  std::int64_t failures;
  const char* reason;
};

TEST(SupervisorRecoverTest, ARunnerThatEndedWhileTailordWasDownIsJudgedByItsRecordedExit) {
  const RecoveryCase cases[] = {
      // The bug: a refused input was retried as a crash after a restart.
      {"refused input",
       {R"({"event":"start"})", R"({"event":"error","message":"token id 300 is outside","exit_code":2})"},
       JobState::kFailed,
       0,
       "bad input"},
      {"failure",
       {R"({"event":"start"})", R"({"event":"error","message":"LibTorch: boom","exit_code":1})"},
       JobState::kQueued,
       1,
       "LibTorch: boom"},
      {"done", {R"({"event":"start"})", R"({"event":"done","steps":3,"exit_code":0})"}, JobState::kSucceeded, 0, ""},
      {"killed", {R"({"event":"start"})"}, JobState::kQueued, 1, "signal 9"},
  };
  for (const RecoveryCase& c : cases) {
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
      for (const auto& e : c.events)
        f << e << "\n";
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
    // Refused input is not offered a retry: it would be refused again.
    if (c.state == JobState::kFailed) {
      EXPECT_FALSE(job->retryable()) << c.name;
      auto retried = sup.retry_job(id);
      ASSERT_FALSE(retried.is_ok()) << c.name;
      EXPECT_EQ(retried.status().code(), StatusCode::kFailedPrecondition);
      EXPECT_NE(retried.status().message().find("fix the spec or its data"), std::string::npos)
          << retried.status().message();
      EXPECT_EQ((*store)->get(id)->state, JobState::kFailed) << c.name;
    }
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

// Polls `cond` for up to 10 s.
using tailor::testing::eventually;

// A store with one job (small_job) in it, and the data folder beside it.
class SupervisorJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = JobStore::open(dir_.file("tailor.db"), 50);
    ASSERT_TRUE(opened.is_ok()) << opened.status().to_string();
    store_ = std::move(*opened);
    auto made = store_->create(small_job());
    ASSERT_TRUE(made.is_ok()) << made.status().to_string();
    id_ = made->job.id;
  }
  fs::path job_dir() const { return fs::path(dir_.file("data")) / "jobs" / id_; }
  SupervisorOptions options() const {
    SupervisorOptions o;
    o.data_dir = dir_.file("data");
    return o;
  }
  // Options for a supervisor that runs the job with `runner`, ticking
  // every 10 ms.
  SupervisorOptions options_running(const std::string& runner) const {
    SupervisorOptions o = options();
    o.runner_path = runner;
    o.host_budget_bytes = 1 << 20;
    o.poll_seconds = 0.01;
    o.heartbeat_timeout_seconds = 0;
    o.planning.spec_root = dir_.path().string();
    return o;
  }
  // The store still has the job as planning, and its runner ran to its end
  // while tailord was down, with or without the pid file tailord writes
  // after the fork: recovery judges it by its events (succeeded, one attempt).
  void expect_a_finished_unrecorded_run_is_judged_by_its_events(bool pid_file) {
    ASSERT_TRUE(store_->transition(id_, JobState::kQueued, JobState::kPlanning, "scheduled").is_ok());
    fs::create_directories(job_dir());
    if (pid_file) std::ofstream(job_dir() / "runner.pid") << dead_pid() << " 1\n";
    std::ofstream(job_dir() / "events.jsonl") << R"({"event":"start"})"
                                                 "\n"
                                                 R"({"event":"done","steps":3,"exit_code":0})"
                                                 "\n";
    Supervisor sup(*store_, metrics_, options());
    ASSERT_TRUE(sup.recover().is_ok());
    const JobRecord j = job();
    EXPECT_EQ(j.state, JobState::kSucceeded) << to_string(j.state) << " (" << j.exit_reason << ")";
    EXPECT_EQ(j.attempts, 1);
  }
  JobRecord job() const {
    auto j = store_->get(id_);
    EXPECT_TRUE(j.is_ok());
    return j.is_ok() ? *j : JobRecord{};
  }

  testing::TempDir dir_;
  std::unique_ptr<JobStore> store_;
  std::string id_;
  DaemonMetrics metrics_;
};

TEST_F(SupervisorJobTest, ARunnerLaunchedBeforeTailordRecordedItIsReadoptedByItsLockNotLaunchedAgain) {
  // tailord died after the fork: the job is still planning, with no pid in
  // the store and no pid file.
  ASSERT_TRUE(store_->transition(id_, JobState::kQueued, JobState::kPlanning, "scheduled").is_ok());
  LockedRunner runner(job_dir());
  ASSERT_GT(runner.process.pid, 0);
  Supervisor sup(*store_, metrics_, options());
  ASSERT_TRUE(sup.recover().is_ok());
  const JobRecord j = job();
  EXPECT_EQ(j.state, JobState::kRunning) << to_string(j.state);
  EXPECT_EQ(j.pid, runner.process.pid);
  EXPECT_EQ(j.pid_start_ticks, runner.process.start_ticks);
  EXPECT_EQ(j.attempts, 1);
}

TEST_F(SupervisorJobTest, NoAttemptStartsWhileAnEarlierRunnerStillHoldsTheJobsLock) {
  LockedRunner earlier(job_dir());
  SupervisorOptions o = options();
  o.runner_path = "/bin/true";
  o.host_budget_bytes = 1 << 20;
  o.poll_seconds = 0.01;
  o.backoff_seconds = 60;
  o.heartbeat_timeout_seconds = 0;
  Supervisor sup(*store_, metrics_, o);
  sup.start();
  ASSERT_TRUE(eventually([&] { return job().failures > 0; }));
  sup.stop();
  const JobRecord j = job();
  EXPECT_EQ(j.state, JobState::kQueued) << to_string(j.state);
  EXPECT_EQ(j.failures, 1);
  EXPECT_EQ(j.attempts, 0);
  EXPECT_NE(j.exit_reason.find("runner.lock"), std::string::npos) << j.exit_reason;
}

// A tick reads only the head of the queue (queue_window): a queue longer
// than that still starts every job, by priority then submission order, as
// the head empties.
TEST_F(SupervisorJobTest, AQueueLongerThanATicksWindowStartsEveryJobByPriorityThenSubmission) {
  SupervisorOptions o = options_running("/bin/true");
  o.queue_window = 3;
  // One job at a time: each needs the whole host budget.
  ASSERT_TRUE(store_->update(id_, JobUpdate().set("estimated_bytes", o.host_budget_bytes)).is_ok());
  std::vector<std::string> expected;
  std::vector<std::string> low = {id_};
  for (int i = 0; i < 9; ++i) {
    NewJob nj = small_job();
    nj.estimated_bytes = o.host_budget_bytes;
    nj.priority = i >= 5 ? 5 : 0;
    auto made = store_->create(nj);
    ASSERT_TRUE(made.is_ok()) << made.status().to_string();
    (nj.priority > 0 ? expected : low).push_back(made->job.id);
  }
  expected.insert(expected.end(), low.begin(), low.end());
  Supervisor sup(*store_, metrics_, o);
  sup.start();
  ASSERT_TRUE(eventually([&] {
    auto n = store_->count_by_state();
    return n.is_ok() && n->at(JobState::kSucceeded) == 10;
  })) << metrics_.render();
  sup.stop();
  auto events = store_->all_events(0, 1000);
  ASSERT_TRUE(events.is_ok());
  std::vector<std::string> started;
  for (const EventRecord& e : *events) {
    if (e.kind == "state" && e.to_state == "planning") started.push_back(e.job_id);
  }
  EXPECT_EQ(started, expected);
}

TEST_F(SupervisorJobTest, ARunnerWhoseStartWasNeverStoredIsJudgedByItsEventsNotLaunchedAgain) {
  // Launched (its pid file is there), ran to the end, but the store still
  // says planning: tailord could not store the start, then stopped.
  expect_a_finished_unrecorded_run_is_judged_by_its_events(/*pid_file=*/true);
}

// Issue 37, item 3: tailord stopped after the fork and before the pid file,
// and the runner finished before the restart. Nothing but the runner's own
// events says it ran; the job was queued and trained a second time.
TEST_F(SupervisorJobTest, ARunnerThatLeftNoPidFileIsJudgedByTheEventsItWroteNotLaunchedAgain) {
  expect_a_finished_unrecorded_run_is_judged_by_its_events(/*pid_file=*/false);
}

// The events of earlier attempts, all taken in, do not speak for this one:
// with nothing past them, the attempt never started and is queued again.
TEST_F(SupervisorJobTest, AnAttemptWhoseRunnerWroteNothingPastTheEarlierOnesIsQueuedAgain) {
  const std::string earlier = R"({"event":"start"})"
                              "\n"
                              R"({"event":"error","message":"x","exit_code":1})"
                              "\n";
  ASSERT_TRUE(store_->update(id_, JobUpdate().set("events_offset", static_cast<std::int64_t>(earlier.size()))
                                       .set("attempts", 1)).is_ok());
  ASSERT_TRUE(store_->transition(id_, JobState::kQueued, JobState::kPlanning, "scheduled").is_ok());
  fs::create_directories(job_dir());
  std::ofstream(job_dir() / "events.jsonl") << earlier;
  Supervisor sup(*store_, metrics_, options());
  ASSERT_TRUE(sup.recover().is_ok());
  const JobRecord j = job();
  EXPECT_EQ(j.state, JobState::kQueued) << to_string(j.state) << " (" << j.exit_reason << ")";
  EXPECT_EQ(j.attempts, 1);
}

// The defect: the supervisor logged the failed write and forgot the runner,
// so the job stayed "running" with a dead pid until tailord restarted.
TEST_F(SupervisorJobTest, TheEndOfARunnerIsStoredOnceAnotherProcessLetsGoOfTheDatabase) {
  // A runner that ends when told to: a file "go" in its folder.
  const std::string runner = dir_.file("runner.sh");
  std::ofstream(runner) << "#!/bin/sh\necho \"$TAILOR_SPEC_ROOT\" > spec-root\n"
                           "while [ ! -e go ]; do sleep 0.01; done\nexit 0\n";
  fs::permissions(runner, fs::perms::owner_all);
  Supervisor sup(*store_, metrics_, options_running(runner));
  sup.start();
  ASSERT_TRUE(eventually([&] { return job().state == JobState::kRunning; }));
  auto other = Database::open(dir_.file("tailor.db"));
  ASSERT_TRUE(other.is_ok());
  ASSERT_TRUE(other->exec("BEGIN EXCLUSIVE").is_ok());
  std::ofstream(job_dir() / "go") << "";
  // The runner ends; storing its verdict fails while the lock is held.
  ASSERT_TRUE(eventually([&] { return !store_->health().writable; }));
  EXPECT_EQ(job().state, JobState::kRunning);
  ASSERT_TRUE(other->exec("ROLLBACK").is_ok());
  EXPECT_TRUE(eventually([&] { return job().state == JobState::kSucceeded; })) << to_string(job().state);
  sup.stop();
  const JobRecord j = job();
  EXPECT_FALSE(j.pid.has_value());
  EXPECT_EQ(j.attempts, 1);
  EXPECT_TRUE(store_->health().writable);
  // The runner was told where the files its spec names must be read from.
  std::ifstream told(job_dir() / "spec-root");
  std::string root;
  std::getline(told, root);
  EXPECT_EQ(root, dir_.path().string());
}

// A runner whose metrics outran tailord (it was down, or the runner logs
// fast) and that has exited: every row is stored before the job ends,
// however many reads of a few MiB that takes.
TEST_F(SupervisorJobTest, EveryMetricRowOfAnExitedRunnerIsStoredBeforeItsJobEnds) {
  constexpr int kRows = 100'000;  // about 10 MB of metrics.jsonl
  const std::string runner = dir_.file("runner.sh");
  std::ofstream(runner) << "#!/bin/sh\n"
                           "awk 'BEGIN { for (i = 1; i <= " << kRows << "; i++) printf \"{\\\"step\\\":%d,\\\"loss\\\":%.6f,"
                           "\\\"lr\\\":0.001,\\\"tokens\\\":4096,\\\"memory\\\":{\\\"peak_bytes\\\":%d}}\\n\", i, 1.0 / i, 1000 + i }' "
                           "> metrics.tmp && mv metrics.tmp metrics.jsonl\nexit 0\n";
  fs::permissions(runner, fs::perms::owner_all);
  Supervisor sup(*store_, metrics_, options_running(runner));
  sup.start();
  ASSERT_TRUE(eventually([&] { return is_terminal(job().state); }));
  sup.stop();
  auto rows = store_->metrics(id_, 0, 2 * kRows);
  ASSERT_TRUE(rows.is_ok()) << rows.status().to_string();
  ASSERT_EQ(rows->size(), static_cast<std::size_t>(kRows));
  EXPECT_EQ(rows->back().step, kRows);
  EXPECT_EQ(job().last_step, kRows);
  EXPECT_EQ(job().peak_bytes, 1000 + kRows);
}

}  // namespace
}  // namespace tailor::daemon
