// The supervisor over the executor seam (daemon/executor/executor.h), with a
// scripted executor in place of the local and Slurm ones: the lifecycle (the
// store's transitions, the verdicts, cancel escalation, recovery) is the
// supervisor's whatever runs the attempt, and every attempt goes to the
// executor its job names.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>

#include "daemon/executor/executor.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/scheduler/supervisor.h"
#include "daemon/store/job_store.h"
#include "runner/protocol/exit_code.h"
#include "runner/protocol/launch_env.h"
#include "tests/testing/eventually.h"
#include "tests/testing/temp_dir.h"

namespace tailor::daemon {
namespace {

namespace fs = std::filesystem;

// Answers as scripted and records what it was asked. The supervisor calls it
// from its thread; the test reads it from its own.
class ScriptedExecutor final : public Executor {
 public:
  explicit ScriptedExecutor(ExecutorKind kind) : kind_(kind) {}

  ExecutorKind kind() const override { return kind_; }
  std::vector<Placement> place(const std::vector<const JobRecord*>& queued, double) override {
    std::lock_guard lock(mu_);
    std::vector<Placement> out;
    for (const JobRecord* j : queued) {
      Placement p;
      p.id = j->id;
      out.push_back(p);
      placed.push_back(j->id);
    }
    return out;
  }
  Result<Admission> admit(const JobRecord&, std::int64_t, const Placement&) override {
    Admission a{"handed to the scripted executor", {}};
    a.record.set("executor_state", "admitted");
    return a;
  }
  Launched launch(const LaunchRequest& r) override {
    std::lock_guard lock(mu_);
    launches.push_back(r);
    launched_plan = std::ifstream(r.dir + "/plan.json").good();
    return launch_answer;
  }
  Observation poll(const std::string&) override {
    std::lock_guard lock(mu_);
    if (script.empty()) return {};
    Observation o = std::move(script.front());
    script.pop_front();
    return o;
  }
  bool beating(const std::string&) const override { return true; }
  void signal(const std::string& id, bool kill) override {
    std::lock_guard lock(mu_);
    signals.emplace_back(id, kill);
  }
  Adoption adopt(const JobRecord&, const std::string&) override {
    std::lock_guard lock(mu_);
    return adoption;
  }
  void forget(const std::string& id) override {
    std::lock_guard lock(mu_);
    forgotten.push_back(id);
  }
  std::string describe() const override { return "scripted"; }

  void then(Observation o) {
    std::lock_guard lock(mu_);
    script.push_back(std::move(o));
  }
  template <class F>
  auto read(F f) {
    std::lock_guard lock(mu_);
    return f();
  }

  Launched launch_answer;
  Adoption adoption;
  std::vector<std::string> placed, forgotten;
  std::vector<LaunchRequest> launches;
  bool launched_plan = false;
  std::vector<std::pair<std::string, bool>> signals;

 private:
  ExecutorKind kind_;
  std::mutex mu_;
  std::deque<Observation> script;
};

Observation ended(int code) {
  Observation o;
  o.exit = platform::ProcessExit{code, 0};
  o.context = "scripted end";
  return o;
}

// Polls `cond` for up to 10 s.
using tailor::testing::eventually;

class SupervisorExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = JobStore::open(dir_.file("tailor.db"), 50);
    ASSERT_TRUE(opened.is_ok()) << opened.status().to_string();
    store_ = std::move(*opened);
  }
  std::string submit(ExecutorKind kind) {
    NewJob nj;
    nj.name = "j";
    nj.spec_text = "name: j\n";
    nj.spec_json = "{}";
    nj.plan_json = R"({"scripted": true})";
    nj.retries = 2;
    nj.executor = kind;
    nj.memory_limit_bytes = 4096;
    auto made = store_->create(nj);
    EXPECT_TRUE(made.is_ok()) << made.status().to_string();
    return made.is_ok() ? made->job.id : "";
  }
  SupervisorOptions options(std::vector<Executor*> executors) const {
    SupervisorOptions o;
    o.data_dir = dir_.file("data");
    o.poll_seconds = 0.01;
    o.cancel_grace_seconds = 0.05;
    o.heartbeat_timeout_seconds = 0;
    o.planning.spec_root = dir_.path().string();
    o.executors = std::move(executors);
    return o;
  }
  JobRecord job(const std::string& id) const {
    auto j = store_->get(id);
    EXPECT_TRUE(j.is_ok());
    return j.is_ok() ? *j : JobRecord{};
  }
  bool has_event(const std::string& id, const std::string& text) const {
    auto events = store_->events(id, 0, 1000);
    if (!events.is_ok()) return false;
    for (const EventRecord& e : *events) {
      if (e.message.find(text) != std::string::npos || e.data_json.find(text) != std::string::npos) return true;
    }
    return false;
  }

  testing::TempDir dir_;
  std::unique_ptr<JobStore> store_;
  DaemonMetrics metrics_;
};

TEST_F(SupervisorExecutorTest, AnAttemptGoesToItsJobsExecutorAndItsStartAndEndAreStored) {
  ScriptedExecutor local(ExecutorKind::kLocal), slurm(ExecutorKind::kSlurm);
  slurm.launch_answer.state = Launched::State::kSubmitted;
  slurm.launch_answer.message = "submitted to the script";
  slurm.launch_answer.record.set("executor_job_id", "s-1");
  const std::string id = submit(ExecutorKind::kSlurm);
  Supervisor sup(*store_, metrics_, options({&local, &slurm}));
  sup.start();
  ASSERT_TRUE(eventually([&] { return job(id).executor_job_id == "s-1"; }));
  EXPECT_EQ(job(id).state, JobState::kPlanning);
  EXPECT_EQ(job(id).executor_state, "admitted");
  // The event is stored after the row it describes (two writes): awaited
  // too, or the check races the supervisor's thread.
  EXPECT_TRUE(eventually([&] { return has_event(id, "submitted to the script"); }));
  EXPECT_TRUE(local.read([&] { return local.placed.empty(); }));

  Observation started;
  started.started = Started{"running on the script", JobUpdate().set("attempts", 1), R"({"where": "script"})"};
  slurm.then(started);
  ASSERT_TRUE(eventually([&] { return job(id).state == JobState::kRunning; }));
  EXPECT_TRUE(has_event(id, "running on the script"));
  EXPECT_TRUE(has_event(id, "\"where\":\"script\""));
  slurm.then(ended(runner::exit_status(runner::RunnerExit::kOk)));
  ASSERT_TRUE(eventually([&] { return job(id).state == JobState::kSucceeded; })) << to_string(job(id).state);
  sup.stop();

  // The runner's command line and environment, from the protocol module.
  const LaunchRequest r = slurm.read([&] { return slurm.launches.at(0); });
  const std::string dir = (fs::path(dir_.file("data")) / "jobs" / id).string();
  EXPECT_EQ(r.dir, dir);
  EXPECT_EQ(r.attempt, 1);
  EXPECT_EQ(r.command.plan, dir + "/plan.json");
  EXPECT_EQ(r.command.out, dir);
  EXPECT_TRUE(r.command.resume);
  EXPECT_EQ(r.command.memory_limit, "4096");
  EXPECT_EQ(r.env.at(runner::kSpecRootEnv), dir_.path().string());
  EXPECT_TRUE(slurm.read([&] { return slurm.launched_plan; }));
  EXPECT_EQ(slurm.read([&] { return slurm.forgotten; }), std::vector<std::string>{id});
}

TEST_F(SupervisorExecutorTest, ACancelAsksTheExecutorToStopTheAttemptThenToKillItAfterTheGrace) {
  ScriptedExecutor local(ExecutorKind::kLocal);
  local.launch_answer.state = Launched::State::kStarted;
  local.launch_answer.started = Started{"started by the script", {}, "{}"};
  const std::string id = submit(ExecutorKind::kLocal);
  Supervisor sup(*store_, metrics_, options({&local}));
  sup.start();
  ASSERT_TRUE(eventually([&] { return job(id).state == JobState::kRunning; }));
  ASSERT_TRUE(sup.cancel(id).is_ok());
  ASSERT_TRUE(eventually([&] { return local.read([&] { return local.signals.size() >= 2; }); }));
  const auto signals = local.read([&] { return local.signals; });
  EXPECT_EQ(signals.at(0), std::make_pair(id, false));
  EXPECT_EQ(signals.at(1), std::make_pair(id, true));
  local.then(ended(runner::exit_status(runner::RunnerExit::kCancelled)));
  ASSERT_TRUE(eventually([&] { return job(id).state == JobState::kCancelled; })) << to_string(job(id).state);
  sup.stop();
}

TEST_F(SupervisorExecutorTest, AJobItsExecutorCannotTakeNowGoesBackToTheQueueUncounted) {
  ScriptedExecutor local(ExecutorKind::kLocal);
  local.launch_answer.state = Launched::State::kNotTaken;
  local.launch_answer.message = "the script is busy";
  local.launch_answer.record.set("next_attempt_at", now_seconds() + 3600);
  const std::string id = submit(ExecutorKind::kLocal);
  Supervisor sup(*store_, metrics_, options({&local}));
  sup.start();
  ASSERT_TRUE(eventually([&] { return has_event(id, "the script is busy"); }));
  sup.stop();
  const JobRecord j = job(id);
  EXPECT_EQ(j.state, JobState::kQueued);
  EXPECT_EQ(j.failures, 0);
  EXPECT_EQ(j.attempts, 0);
}

TEST_F(SupervisorExecutorTest, AJobForAnExecutorThisTailordLacksFailsWithTheReason) {
  ScriptedExecutor local(ExecutorKind::kLocal);
  const std::string id = submit(ExecutorKind::kSlurm);
  Supervisor sup(*store_, metrics_, options({&local}));
  sup.start();
  ASSERT_TRUE(eventually([&] { return is_terminal(job(id).state); }));
  sup.stop();
  EXPECT_EQ(job(id).state, JobState::kFailed);
  EXPECT_NE(job(id).exit_reason.find("no slurm executor"), std::string::npos) << job(id).exit_reason;
  EXPECT_TRUE(local.read([&] { return local.placed.empty(); }));
}

TEST_F(SupervisorExecutorTest, AnAttemptTheExecutorAdoptsAtRecoveryIsFollowedToItsEnd) {
  ScriptedExecutor local(ExecutorKind::kLocal);
  const std::string id = submit(ExecutorKind::kLocal);
  ASSERT_TRUE(store_->transition(id, JobState::kQueued, JobState::kPlanning, "scheduled").is_ok());
  local.adoption.kind = Adoption::Kind::kFollow;
  local.adoption.attempt = 1;
  local.adoption.to_running = true;
  local.adoption.record.set("attempts", 1);
  local.adoption.message = "recovered by the script";
  Supervisor sup(*store_, metrics_, options({&local}));
  ASSERT_TRUE(sup.recover().is_ok());
  EXPECT_EQ(job(id).state, JobState::kRunning);
  EXPECT_EQ(job(id).attempts, 1);
  EXPECT_TRUE(has_event(id, "recovered by the script"));
  sup.start();
  local.then(ended(runner::exit_status(runner::RunnerExit::kOk)));
  ASSERT_TRUE(eventually([&] { return job(id).state == JobState::kSucceeded; })) << to_string(job(id).state);
  sup.stop();
  EXPECT_TRUE(local.read([&] { return local.launches.empty(); }));
}

TEST_F(SupervisorExecutorTest, AnAttemptThatEndedWhileTailordWasDownIsJudgedByItsEventsFile) {
  ScriptedExecutor local(ExecutorKind::kLocal);
  const std::string id = submit(ExecutorKind::kLocal);
  ASSERT_TRUE(store_->transition(id, JobState::kQueued, JobState::kPlanning, "scheduled").is_ok());
  ASSERT_TRUE(store_->transition(id, JobState::kPlanning, JobState::kRunning, "started",
                                 JobUpdate().set("attempts", 1))
                  .is_ok());
  const fs::path dir = fs::path(dir_.file("data")) / "jobs" / id;
  fs::create_directories(dir);
  std::ofstream(dir / "events.jsonl") << R"({"event":"error","message":"refused","exit_code":2})" << "\n";
  local.adoption.kind = Adoption::Kind::kEnded;
  local.adoption.attempt = 1;
  Supervisor sup(*store_, metrics_, options({&local}));
  ASSERT_TRUE(sup.recover().is_ok());
  const JobRecord j = job(id);
  EXPECT_EQ(j.state, JobState::kFailed) << to_string(j.state);
  EXPECT_TRUE(j.failed_as_bad_input()) << j.exit_reason;
  EXPECT_EQ(local.read([&] { return local.forgotten; }), std::vector<std::string>{id});
}

}  // namespace
}  // namespace tailor::daemon
