// The `tailor` client commands against a real tailord (and tailor-runner) on
// 127.0.0.1, run in-process with captured output.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sstream>

#include "cli/commands.h"
#include "tests/daemon/daemon_harness.h"
#include "tests/testing/temp_dir.h"

namespace tailor::cli {
namespace {

using daemon::testing::DaemonProcess;

struct Result {
  int code;
  std::string out, err;
};

Result tailor(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int code = run_tailor(args, {out, err});
  return {code, out.str(), err.str()};
}

// tiny-cpu with `steps` steps, its data path absolute (inside the daemon's spec root).
std::string write_spec(const tailor::testing::TempDir& dir, const std::string& name, int steps) {
  std::string text = daemon::testing::tiny_spec(name, steps, 1000);
  const std::string rel = "data/tiny-corpus.txt";
  text.replace(text.find(rel), rel.size(), std::string(TAILOR_SOURCE_DIR) + "/configs/" + rel);
  return dir.write(name + ".yaml", text);
}

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (daemon::testing::runner_path().empty()) GTEST_SKIP() << "no tailor-runner built";
    daemon_ = std::make_unique<DaemonProcess>(dir_.file("data"));
    ASSERT_TRUE(daemon_->ok()) << "tailord did not start; log: " << daemon_->log();
  }
  std::vector<std::string> remote() const { return {"--data-dir", dir_.file("data")}; }
  std::vector<std::string> with_remote(std::vector<std::string> args) const {
    for (const auto& a : remote()) args.push_back(a);
    return args;
  }

  tailor::testing::TempDir dir_;
  std::unique_ptr<DaemonProcess> daemon_;
};

TEST_F(ClientTest, SubmitWaitFollowsTheJobToSuccessAndListAndStatusShowIt) {
  const std::string spec = write_spec(dir_, "client-ok", 6);
  const Result sub = tailor(with_remote({"submit", "--wait", "--output", "json", spec}));
  ASSERT_EQ(sub.code, kExitOk) << sub.err;
  const auto job = nlohmann::json::parse(sub.out);
  EXPECT_EQ(job["state"], "succeeded");
  for (const char* key : {"id", "name", "state", "created_at", "plan", "exit_reason"}) {
    EXPECT_TRUE(job.contains(key)) << key;
  }
  const std::string id = job["id"];

  const Result list = tailor(with_remote({"list", "--output", "json"}));
  ASSERT_EQ(list.code, kExitOk) << list.err;
  const auto jobs = nlohmann::json::parse(list.out)["jobs"];
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0]["id"], id);

  const Result text = tailor(with_remote({"list"}));
  EXPECT_NE(text.out.find(id), std::string::npos);
  EXPECT_NE(text.out.find("succeeded"), std::string::npos);

  const Result status = tailor(with_remote({"status", id}));
  ASSERT_EQ(status.code, kExitOk) << status.err;
  EXPECT_NE(status.out.find("succeeded"), std::string::npos);
  EXPECT_NE(status.out.find("measured"), std::string::npos) << status.out;

  // Following a finished job prints its last progress and exits with its outcome.
  const Result logs = tailor(with_remote({"logs", "-f", id}));
  EXPECT_EQ(logs.code, kExitOk) << logs.err;
  EXPECT_NE(logs.out.find("step"), std::string::npos) << "the raw runner log: " << logs.out;
}

TEST_F(ClientTest, PlanRemoteAsksTheDaemonAndQueuesNothing) {
  const std::string spec = write_spec(dir_, "client-plan", 5);
  const Result plan = tailor(with_remote({"plan", "--remote", "--output", "json", spec}));
  ASSERT_EQ(plan.code, kExitOk) << plan.err;
  const auto doc = nlohmann::json::parse(plan.out);
  EXPECT_TRUE(doc["fits"].get<bool>());
  EXPECT_TRUE(doc.contains("strategy"));
  const Result text = tailor(with_remote({"plan", "--remote", spec}));
  EXPECT_EQ(text.code, kExitOk) << text.err;
  EXPECT_NE(text.out.find("fits"), std::string::npos) << text.out;
  EXPECT_EQ(nlohmann::json::parse(tailor(with_remote({"list", "--output", "json"})).out)["jobs"].size(), 0u);
}

TEST_F(ClientTest, CancelStopsARunningJobAndWaitReportsCancelled) {
  const std::string spec = write_spec(dir_, "client-cancel", 100000);
  const Result sub = tailor(with_remote({"submit", "--quiet", spec}));
  ASSERT_EQ(sub.code, kExitOk) << sub.err;
  const std::string id = sub.out.substr(0, sub.out.find('\n'));
  ASSERT_TRUE(daemon_->wait_state(id, "running", std::chrono::seconds(60)));
  const Result top = tailor(with_remote({"top", "--output", "json"}));
  ASSERT_EQ(top.code, kExitOk) << top.err;
  const auto rows = nlohmann::json::parse(top.out);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["id"], id);
  EXPECT_EQ(rows[0]["state"], "running");
  const Result cancel = tailor(with_remote({"cancel", "--wait", "--output", "json", id}));
  ASSERT_EQ(cancel.code, kExitOk) << cancel.err;
  EXPECT_EQ(nlohmann::json::parse(cancel.out)["state"], "cancelled");
  EXPECT_EQ(tailor(with_remote({"logs", "-f", id})).code, kExitCancelled);
}

TEST_F(ClientTest, AnInvalidSpecIsReportedLocallyWithItsPositionAndNothingIsSubmitted) {
  const std::string spec = dir_.write("bad.yaml", "apiVersion: tailor/v1\nkind: TrainingJob\ntraining:\n  lr: abc\n");
  const Result sub = tailor(with_remote({"submit", spec}));
  EXPECT_EQ(sub.code, kExitInvalid);
  EXPECT_NE(sub.err.find("bad.yaml:4:"), std::string::npos) << sub.err;
  EXPECT_EQ(nlohmann::json::parse(tailor(with_remote({"list", "--output", "json"})).out)["jobs"].size(), 0u);
}

TEST_F(ClientTest, AWrongTokenIsRefusedWithAHint) {
  const Result r = tailor({"list", "--addr", daemon_->address(), "--token", "not-the-token"});
  EXPECT_NE(r.code, kExitOk);
  EXPECT_NE(r.err.find("token was refused"), std::string::npos) << r.err;
  const Result none = tailor({"list", "--addr", daemon_->address(), "--token", ""});
  EXPECT_NE(none.code, kExitOk);
}

TEST_F(ClientTest, AnUnknownJobIsNotFound) {
  const Result r = tailor(with_remote({"status", "j-0000000000000000"}));
  EXPECT_EQ(r.code, kExitInvalid);
  EXPECT_FALSE(r.err.empty());
}

TEST(ClientWithoutDaemonTest, SaysWhereItLookedWhenNothingListens) {
  // Port 1 (tcpmux) has no listener on any machine this runs on.
  const Result r = tailor({"list", "--addr", "127.0.0.1:1"});
  EXPECT_EQ(r.code, kExitRunFailed);
  EXPECT_NE(r.err.find("cannot reach tailord at 127.0.0.1:1"), std::string::npos) << r.err;
  const Result bad = tailor({"list", "--addr", "no-port"});
  EXPECT_EQ(bad.code, kExitUsage);
  EXPECT_NE(bad.err.find("HOST:PORT"), std::string::npos) << bad.err;
}

TEST(ClientWithoutDaemonTest, EveryClientCommandHasHelp) {
  for (const char* cmd : {"submit", "list", "status", "logs", "cancel", "top"}) {
    const Result r = tailor({cmd, "--help"});
    EXPECT_EQ(r.code, kExitOk) << cmd;
    EXPECT_NE(r.out.find(std::string("usage: tailor ") + cmd), std::string::npos) << cmd;
    EXPECT_NE(r.out.find("--addr"), std::string::npos) << cmd;
  }
}

}  // namespace
}  // namespace tailor::cli
