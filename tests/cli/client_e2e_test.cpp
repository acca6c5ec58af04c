// The `tailor` client commands against a real tailord (and tailor-runner) on
// 127.0.0.1, run in-process with captured output.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

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
  for (const char* key : {"id", "name", "state", "created_at", "plan", "exit_reason", "output_dir"}) {
    EXPECT_TRUE(job.contains(key)) << key;
  }
  const std::string id = job["id"];
  // It followed the job's event stream, not by polling: one stream and one
  // read of the whole job at the end.
  const std::string exposition = daemon_->get("/metrics").body;
  auto requests = [&](const std::string& route) {
    double n = 0;
    const std::string key = "route=\"" + route + "\"";
    std::istringstream lines(exposition);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("tailor_http_requests_total{", 0) == 0 && line.find(key) != std::string::npos) {
        n += std::stod(line.substr(line.rfind(' ') + 1));
      }
    }
    return n;
  };
  EXPECT_EQ(requests("/v1/jobs/{id}/events"), 1) << exposition;
  EXPECT_EQ(requests("/v1/jobs/{id}"), 1) << exposition;
  EXPECT_EQ(requests("/v1/jobs/{id}/metrics"), 0) << exposition;

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
  // Where the job's files are: its folder, with the trained model in it.
  const std::string folder = job["output_dir"];
  EXPECT_EQ(std::filesystem::path(folder), std::filesystem::path(dir_.file("data")) / "jobs" / id);
  EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(folder) / "model" / "config.json")) << folder;
  EXPECT_NE(status.out.find("(model: " + folder + "/model)"), std::string::npos) << status.out;

  // Following a finished job prints its last progress and exits with its outcome.
  const Result logs = tailor(with_remote({"logs", "-f", id}));
  EXPECT_EQ(logs.code, kExitOk) << logs.err;
  EXPECT_NE(logs.out.find("step"), std::string::npos) << "the raw runner log: " << logs.out;

  // The job's model generates, found by the job's id (tailor-runner writes
  // the text to this test's stdout).
  ::setenv("TAILOR_RUNNER", daemon::testing::runner_path().c_str(), 1);
  const Result gen = tailor(with_remote({"generate", id, "--prompt", "The", "--max-tokens", "4", "--quiet"}));
  EXPECT_EQ(gen.code, kExitOk) << gen.err;
}

// A job with a tracking section: `tailor status` says where it reports and
// how to open it (TensorBoard on its folder, W&B through tailor-wandb).
TEST_F(ClientTest, StatusSaysWhereAJobReportsAndHowToOpenIt) {
  const std::string spec = write_spec(dir_, "client-tracked", 2);
  std::ofstream(spec, std::ios::app) << "tracking:\n  tensorboard:\n    dir: tb\n";
  const Result sub = tailor(with_remote({"submit", "--wait", "--output", "json", spec}));
  ASSERT_EQ(sub.code, kExitOk) << sub.err;
  const auto job = nlohmann::json::parse(sub.out);
  const std::string tb = job["output_dir"].get<std::string>() + "/tb";
  const Result status = tailor(with_remote({"status", job["id"]}));
  ASSERT_EQ(status.code, kExitOk) << status.err;
  EXPECT_NE(status.out.find("tensorboard --logdir " + tb + "\n"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("tailor-wandb " + tb), std::string::npos) << status.out;
  bool event_file = false;
  for (const auto& f : std::filesystem::directory_iterator(tb)) {
    event_file = event_file || f.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  }
  EXPECT_TRUE(event_file) << tb;
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
  // Only a job that succeeded has a model to generate with.
  const Result gen = tailor(with_remote({"generate", id, "--prompt", "The"}));
  EXPECT_EQ(gen.code, kExitInvalid);
  EXPECT_NE(gen.err.find("has not succeeded (state: cancelled)"), std::string::npos) << gen.err;
  // Nor to serve.
  const Result serve = tailor(with_remote({"serve", id, "--port", "0"}));
  EXPECT_EQ(serve.code, kExitInvalid);
  EXPECT_NE(serve.err.find("tailor serve: job " + id + " has not succeeded"), std::string::npos) << serve.err;
  // A finished job can go, and then it is not found.
  const Result del = tailor(with_remote({"delete", id}));
  ASSERT_EQ(del.code, kExitOk) << del.err;
  EXPECT_EQ(del.out, id + " deleted\n");
  EXPECT_EQ(tailor(with_remote({"status", id})).code, kExitInvalid);
  EXPECT_EQ(tailor(with_remote({"delete", id})).code, kExitInvalid);
}

TEST_F(ClientTest, ACancelledJobIsRetriedFromItsCheckpointAndASucceededOneIsNot) {
  std::string text = daemon::testing::tiny_spec("client-retry", 40, 5);
  const std::string rel = "data/tiny-corpus.txt";
  text.replace(text.find(rel), rel.size(), std::string(TAILOR_SOURCE_DIR) + "/configs/" + rel);
  const std::string spec = dir_.write("client-retry.yaml", text);
  const Result sub = tailor(with_remote({"submit", "--quiet", spec}));
  ASSERT_EQ(sub.code, kExitOk) << sub.err;
  const std::string id = sub.out.substr(0, sub.out.find('\n'));
  ASSERT_TRUE(daemon::testing::wait_for(
      [&] {
        const auto events = daemon_->get("/v1/jobs/" + id + "/events").json()["events"];
        for (const auto& e : events) {
          if (e.value("kind", "") == "runner.checkpoint") return true;
        }
        return false;
      },
      std::chrono::seconds(120)));
  const Result cancel = tailor(with_remote({"cancel", "--wait", id}));
  ASSERT_EQ(cancel.code, kExitOk) << cancel.err;
  const Result retry = tailor(with_remote({"retry", "--wait", "--output", "json", id}));
  ASSERT_EQ(retry.code, kExitOk) << retry.err;
  const auto job = nlohmann::json::parse(retry.out);
  EXPECT_EQ(job["state"], "succeeded");
  EXPECT_EQ(job["last_step"], 40);
  int resumed = 0;
  const auto events = daemon_->get("/v1/jobs/" + id + "/events").json();
  for (const auto& e : events["events"]) {
    resumed += e.value("kind", "") == "runner.resume";
  }
  EXPECT_EQ(resumed, 1) << events.dump(1);
  const Result again = tailor(with_remote({"retry", id}));
  EXPECT_NE(again.code, kExitOk);
  EXPECT_NE(again.err.find("submit its spec again"), std::string::npos) << again.err;
}

std::string file_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

TEST_F(ClientTest, ADownloadedModelEqualsTheJobsAndABrokenDownloadResumes) {
  const Result sub =
      tailor(with_remote({"submit", "--wait", "--output", "json", write_spec(dir_, "client-download", 4)}));
  ASSERT_EQ(sub.code, kExitOk) << sub.err;
  const std::string id = nlohmann::json::parse(sub.out)["id"];
  const std::filesystem::path job = std::filesystem::path(dir_.file("data")) / "jobs" / id;
  const std::filesystem::path to = dir_.file("out");
  const Result got = tailor(with_remote({"download", "--to", to.string(), id}));
  ASSERT_EQ(got.code, kExitOk) << got.err;
  std::size_t files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(job / "model")) {
    if (!e.is_regular_file()) continue;
    ++files;
    const auto rel = e.path().lexically_relative(job);
    EXPECT_EQ(file_bytes(to / rel), file_bytes(e.path())) << rel;
  }
  EXPECT_GE(files, 2u);  // config.json and the weights at least
  // A download that broke off halfway through the weights.
  const std::filesystem::path weights = to / "model" / "model.safetensors";
  const std::string whole = file_bytes(weights);
  ASSERT_GT(whole.size(), 1000u);
  std::filesystem::remove(weights);
  std::ofstream(weights.string() + ".part", std::ios::binary) << whole.substr(0, whole.size() / 2);
  const Result again = tailor(with_remote({"download", "--to", to.string(), id}));
  ASSERT_EQ(again.code, kExitOk) << again.err;
  EXPECT_NE(again.err.find("model/model.safetensors"), std::string::npos) << again.err;
  EXPECT_NE(again.err.find("resumed at"), std::string::npos) << again.err;
  EXPECT_NE(again.err.find("up to date"), std::string::npos) << again.err;  // config.json
  EXPECT_EQ(file_bytes(weights), whole);
  EXPECT_FALSE(std::filesystem::exists(weights.string() + ".part"));
  const Result listed = tailor(with_remote({"download", "--list", id}));
  EXPECT_NE(listed.out.find("model/model.safetensors"), std::string::npos) << listed.out;
  EXPECT_EQ(tailor(with_remote({"download", id, "nothing"})).code, kExitInvalid);
}

// A LoRA job's output is its adapter: `tailor download` gets adapter/ (no
// merged model was written), at adapter size, and --tar gets the folder as
// one archive that tar unpacks into the same files.
TEST_F(ClientTest, ALoraJobDownloadsItsAdapterFileByFileOrAsOneArchive) {
  std::string text = daemon::testing::tiny_spec("client-lora", 3, 1000);
  const std::string rel = "data/tiny-corpus.txt";
  text.replace(text.find(rel), rel.size(), std::string(TAILOR_SOURCE_DIR) + "/configs/" + rel);
  text.replace(text.find("adapter: none"), 13, "adapter: lora");
  const Result sub = tailor(with_remote({"submit", "--wait", "--output", "json", dir_.write("client-lora.yaml", text)}));
  ASSERT_EQ(sub.code, kExitOk) << sub.err;
  const std::string id = nlohmann::json::parse(sub.out)["id"];
  const std::filesystem::path job = std::filesystem::path(dir_.file("data")) / "jobs" / id;
  EXPECT_FALSE(std::filesystem::exists(job / "model"));  // output.merge: false, the adapters' default
  const std::filesystem::path to = dir_.file("out");
  const Result got = tailor(with_remote({"download", "--to", to.string(), id}));
  ASSERT_EQ(got.code, kExitOk) << got.err;
  std::uintmax_t adapter_bytes = 0;
  for (const char* f : {"adapter/adapter_config.json", "adapter/adapter_model.safetensors"}) {
    EXPECT_EQ(file_bytes(to / f), file_bytes(job / f)) << f;
    adapter_bytes += std::filesystem::file_size(job / f);
  }
  // The base: 3.04M parameters, 12 MB in fp32.
  EXPECT_LT(adapter_bytes, 3'040'000u * 4 / 10) << adapter_bytes;
  const Result tar = tailor(with_remote({"download", "--tar", "--to", to.string(), id, "adapter"}));
  ASSERT_EQ(tar.code, kExitOk) << tar.err;
  const std::filesystem::path archive = to / (id + "-adapter.tar");
  ASSERT_TRUE(std::filesystem::exists(archive)) << tar.err;
  const std::filesystem::path unpacked = dir_.file("unpacked");
  std::filesystem::create_directories(unpacked);
  ASSERT_EQ(std::system(("tar -xf " + archive.string() + " -C " + unpacked.string()).c_str()), 0);
  for (const char* f : {"adapter/adapter_config.json", "adapter/adapter_model.safetensors"}) {
    EXPECT_EQ(file_bytes(unpacked / f), file_bytes(job / f)) << f;
  }
  const Result file_tar = tailor(with_remote({"download", "--tar", id, "adapter/adapter_config.json"}));
  EXPECT_EQ(file_tar.code, kExitUsage) << file_tar.err;
}

// The id of the one job once it runs; empty if it never does.
std::string running_job(const DaemonProcess& d) {
  std::string id;
  daemon::testing::wait_for(
      [&] {
        const auto jobs = d.get("/v1/jobs").json();
        if (!jobs.is_object() || jobs["jobs"].size() != 1 || jobs["jobs"][0]["state"] != "running") return false;
        id = jobs["jobs"][0]["id"];
        return true;
      },
      std::chrono::seconds(60));
  return id;
}

TEST_F(ClientTest, SubmitWaitRidesOutADaemonRestartAndReportsTheOutcome) {
  const std::string spec = write_spec(dir_, "client-restart", 80);
  Result sub;
  std::thread waiter([&] { sub = tailor(with_remote({"submit", "--wait", spec})); });
  const std::string id = running_job(*daemon_);
  // tailord dies while the job runs and comes back on the same folder (on
  // another ephemeral port); the runner goes on and is adopted.
  daemon_->kill_daemon(SIGKILL);
  daemon_ = std::make_unique<DaemonProcess>(dir_.file("data"));
  const bool restarted = daemon_->ok();
  waiter.join();
  ASSERT_FALSE(id.empty()) << "the job never ran";
  ASSERT_TRUE(restarted) << "tailord did not start again; log: " << daemon_->log();
  EXPECT_EQ(sub.code, kExitOk) << sub.err;
  EXPECT_NE(sub.out.find(id + " succeeded"), std::string::npos) << sub.out;
  EXPECT_NE(sub.err.find("cannot reach tailord"), std::string::npos) << sub.err;
  EXPECT_NE(sub.err.find("waiting up to 2m00s for tailord to come back"), std::string::npos) << sub.err;
  EXPECT_NE(sub.err.find("tailord is back at " + daemon_->address()), std::string::npos) << sub.err;
  EXPECT_EQ(daemon_->job(id)["state"], "succeeded");
}

TEST_F(ClientTest, FollowingGivesUpWithItsOwnExitCodeWhenTailordStaysAway) {
  const std::string spec = write_spec(dir_, "client-away", 100000);
  Result sub;
  std::thread waiter([&] { sub = tailor(with_remote({"submit", "--wait", "--reconnect", "1", spec})); });
  const std::string id = running_job(*daemon_);
  const auto pid = id.empty() ? 0 : daemon_->job(id)["pid"].get<pid_t>();
  daemon_->kill_daemon(SIGKILL);
  waiter.join();
  if (pid > 1) ::kill(-pid, SIGKILL);  // no daemon is left to stop it
  ASSERT_FALSE(id.empty()) << "the job never ran";
  EXPECT_EQ(sub.code, kExitUnreachable) << sub.err;
  EXPECT_NE(sub.err.find("gave up after 1s (the job may still be running: tailor logs -f)"), std::string::npos)
      << sub.err;
  // A window that is not a number of seconds is a usage error.
  EXPECT_EQ(tailor(with_remote({"submit", "--wait", "--reconnect", "soon", spec})).code, kExitUsage);
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
  // Neither a folder nor a job: generate says it looked for both.
  const Result gen = tailor(with_remote({"generate", "j-0000000000000000", "--prompt", "x"}));
  EXPECT_EQ(gen.code, kExitInvalid);
  EXPECT_NE(gen.err.find("no model folder or job j-0000000000000000"), std::string::npos) << gen.err;
  const Result serve = tailor(with_remote({"serve", "j-0000000000000000"}));
  EXPECT_EQ(serve.code, kExitInvalid);
  EXPECT_NE(serve.err.find("no model folder or job j-0000000000000000"), std::string::npos) << serve.err;
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
  for (const char* cmd :
       {"submit", "list", "status", "logs", "cancel", "retry", "download", "delete", "top", "generate", "serve"}) {
    const Result r = tailor({cmd, "--help"});
    EXPECT_EQ(r.code, kExitOk) << cmd;
    EXPECT_NE(r.out.find(std::string("usage: tailor ") + cmd), std::string::npos) << cmd;
    EXPECT_NE(r.out.find("--addr"), std::string::npos) << cmd;
  }
}

}  // namespace
}  // namespace tailor::cli
