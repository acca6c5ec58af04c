// The trackers (runner/tracking/): TensorBoard's record format, the
// metrics lines as scalars, the worker's cursor and replay, and the proof
// against the real peers: TensorBoard's own event accumulator and a real
// `mlflow server` (loopback, SQLite in the test's folder) read back through
// MLflow's client (tracking_check.py in .venv), through an outage of the
// server, and a `tailor run` reporting to both.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "platform/process.h"
#include "runner/tracking/http_client.h"
#include "runner/tracking/metric_records.h"
#include "runner/tracking/mlflow_tracker.h"
#include "runner/tracking/tensorboard_format.h"
#include "runner/tracking/tensorboard_tracker.h"
#include "runner/tracking/tracker_worker.h"
#include "tests/testing/temp_dir.h"

namespace tailor::runner::tracking {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using namespace std::chrono_literals;

const std::string kPython = std::string(TAILOR_SOURCE_DIR) + "/.venv/bin/python";
const std::string kCheck = std::string(TAILOR_SOURCE_DIR) + "/tests/runner/tracking/tracking_check.py";

// Runs a command; its exit status and what it printed.
std::pair<int, std::string> run_command(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return {-1, "popen failed"};
  char buf[4096];
  for (std::size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// A metrics line as the runner writes one: losses, a learning rate,
// memory by component, the host's ledger, two ranks, and at some steps an
// evaluation.
std::string metrics_line(std::int64_t step, bool eval) {
  nlohmann::json j{{"step", step},
                   {"time", 1795000000.0 + static_cast<double>(step) * 0.25},
                   {"loss", 5.0 / static_cast<double>(step + 1) + 0.1234567},
                   {"lr", 1e-3 * static_cast<double>(step) / 10.0},
                   {"grad_norm", 0.75 + static_cast<double>(step) * 0.01},
                   {"tokens", 2048},
                   {"tokens_per_second", 8123.456 + static_cast<double>(step)},
                   {"skipped", step == 3},
                   {"memory",
                    {{"weights_bytes", 6070784},
                     {"activations_bytes", 82116608 + step},
                     {"allocated_bytes", 12345678},
                     {"peak_bytes", 98765432 + step}}},
                   {"host", {{"optimizer_states_bytes", 24283136}, {"bytes", 30000000}}},
                   {"ranks",
                    {{{"rank", 0}, {"peak_bytes", 98765432 + step}, {"allocated_bytes", 1}},
                     {{"rank", 1}, {"peak_bytes", 90000000 + step}, {"allocated_bytes", 2}}}}};
  if (eval) {
    j["eval_loss"] = 2.5 - static_cast<double>(step) * 0.01;
    j["eval_perplexity"] = 12.18;
    j["eval_tokens"] = 4096;
  }
  return j.dump() + "\n";
}

void append(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::app);
  out << text;
}

// What the worker reported, for tests to wait on.
class States {
 public:
  StateSink sink() {
    return [this](const TrackerState& s) {
      std::lock_guard<std::mutex> lk(mu_);
      seen_.push_back(s);
      cv_.notify_all();
    };
  }
  // Waits until `state` has been reported more than `after` times in all.
  bool wait_for(const std::string& state, std::size_t count = 1, std::chrono::seconds timeout = 120s) {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_for(lk, timeout, [&] { return this->count(state) >= count; });
  }
  std::size_t count(const std::string& state) const {
    std::size_t n = 0;
    for (const auto& s : seen_) n += s.state == state;
    return n;
  }
  std::vector<TrackerState> all() {
    std::lock_guard<std::mutex> lk(mu_);
    return seen_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<TrackerState> seen_;
};

TEST(TensorboardFormatTest, Crc32cIsCastagnolisAndRecordsCarryItMasked) {
  // RFC 3720's check value and TensorFlow's crc32c_test vectors.
  EXPECT_EQ(crc32c("123456789"), 0xe3069283u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8a9136aau);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62a8ab43u);
  const std::uint32_t c = crc32c("a");
  EXPECT_EQ(masked_crc32c("a"), ((c >> 15) | (c << 17)) + 0xa282ead8u);
  const std::string rec = tf_record("hello");
  ASSERT_EQ(rec.size(), 8u + 4u + 5u + 4u);
  EXPECT_EQ(static_cast<unsigned char>(rec[0]), 5u);
  EXPECT_EQ(rec.substr(12, 5), "hello");
}

TEST(MetricRecordsTest, EveryNumberOfALineIsAScalarNamedByWhereItSits) {
  auto r = parse_metrics_line(metrics_line(4, true), 0);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->step, 4);
  EXPECT_DOUBLE_EQ(r->time, 1795000001.0);
  std::map<std::string, double> by_tag;
  for (const Scalar& s : r->scalars) by_tag[s.tag] = s.value;
  EXPECT_DOUBLE_EQ(by_tag.at("train/loss"), 5.0 / 5.0 + 0.1234567);
  EXPECT_DOUBLE_EQ(by_tag.at("train/skipped"), 0.0);
  EXPECT_DOUBLE_EQ(by_tag.at("memory/activations_bytes"), 82116612.0);
  EXPECT_DOUBLE_EQ(by_tag.at("memory_host/optimizer_states_bytes"), 24283136.0);
  EXPECT_DOUBLE_EQ(by_tag.at("rank1/peak_bytes"), 90000004.0);
  EXPECT_DOUBLE_EQ(by_tag.at("eval/loss"), 2.46);
  EXPECT_EQ(by_tag.count("train/step"), 0u);
  EXPECT_EQ(by_tag.count("rank0/rank"), 0u);
  EXPECT_FALSE(parse_metrics_line("{\"loss\": 1}", 0));
  EXPECT_FALSE(parse_metrics_line("not json", 0));
}

// A destination that takes records while `up`, for the worker's own
// logic (the real ones are proved below).
class Ledger : public Tracker {
 public:
  const char* name() const override { return "ledger"; }
  std::size_t max_scalars_per_write() const override { return 40; }
  Status open(const OpenContext& c) override {
    std::lock_guard<std::mutex> lk(mu);
    if (!up) return Status::unavailable("ledger is down");
    opened.push_back(c);
    return Status::ok();
  }
  Status write(const std::vector<MetricRecord>& records) override {
    std::lock_guard<std::mutex> lk(mu);
    if (!up) return Status::unavailable("ledger is down");
    for (const auto& r : records) steps.push_back(r.step);
    ++writes;
    return Status::ok();
  }
  Status close(RunOutcome o) override {
    std::lock_guard<std::mutex> lk(mu);
    if (!up) return Status::unavailable("ledger is down");
    closed = o;
    return Status::ok();
  }
  std::mutex mu;
  bool up = true;
  std::vector<OpenContext> opened;
  std::vector<std::int64_t> steps;
  int writes = 0;
  std::optional<RunOutcome> closed;
};

TEST(TrackerWorkerTest, AnOutageLosesNothingAndTheNextWorkerSendsOnlyWhatIsLeft) {
  TempDir dir;
  const std::string metrics = dir.file("metrics.jsonl");
  WorkerOptions o;
  o.metrics_path = metrics;
  o.cursor_path = dir.file("ledger.cursor");
  o.first_backoff = 20ms;
  o.max_backoff = 100ms;
  auto* ledger = new Ledger;
  States states;
  {
    TrackerWorker w(std::unique_ptr<Tracker>(ledger), o, states.sink());
    for (int s = 1; s <= 5; ++s) append(metrics, metrics_line(s, false));
    w.notify();
    ASSERT_TRUE(states.wait_for("up"));
    {
      std::lock_guard<std::mutex> lk(ledger->mu);
      ledger->up = false;
    }
    for (int s = 6; s <= 10; ++s) append(metrics, metrics_line(s, s == 10));
    w.notify();
    ASSERT_TRUE(states.wait_for("down"));
    {
      std::lock_guard<std::mutex> lk(ledger->mu);
      ledger->up = true;
    }
    ASSERT_TRUE(w.finish(RunOutcome::kKilled, 60s));
    std::lock_guard<std::mutex> lk(ledger->mu);
    EXPECT_EQ(ledger->steps, (std::vector<std::int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
    // 16 scalars a line, at most 40 a write: two lines a write.
    EXPECT_GE(ledger->writes, 5);
    EXPECT_EQ(ledger->closed, RunOutcome::kKilled);
    EXPECT_TRUE(ledger->opened.at(0).fresh);
  }
  EXPECT_GE(states.count("down"), 1u);
  EXPECT_EQ(states.count("closed"), 1u);
  // A later runner of the job (a retry): only the new lines, and the
  // tracker told it is not fresh.
  for (int s = 11; s <= 12; ++s) append(metrics, metrics_line(s, false));
  // Step 13's line is still being written: no newline yet, so not taken.
  const std::string partial = metrics_line(13, false);
  append(metrics, partial.substr(0, partial.size() - 1));
  auto* again = new Ledger;
  TrackerWorker w2(std::unique_ptr<Tracker>(again), o, nullptr);
  w2.notify();
  ASSERT_TRUE(w2.finish(RunOutcome::kFinished, 60s));
  EXPECT_EQ(again->steps, (std::vector<std::int64_t>{11, 12}));
  ASSERT_EQ(again->opened.size(), 1u);
  EXPECT_FALSE(again->opened[0].fresh);
  EXPECT_EQ(again->opened[0].step, 10);
}

TEST(TrackerWorkerTest, ATrackerStillDownAtTheEndIsLeftBehindWithItsCursor) {
  TempDir dir;
  const std::string metrics = dir.file("metrics.jsonl");
  for (int s = 1; s <= 3; ++s) append(metrics, metrics_line(s, false));
  WorkerOptions o;
  o.metrics_path = metrics;
  o.cursor_path = dir.file("ledger.cursor");
  o.first_backoff = 10ms;
  auto* ledger = new Ledger;
  ledger->up = false;
  States states;
  TrackerWorker w(std::unique_ptr<Tracker>(ledger), o, states.sink());
  w.notify();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(w.finish(RunOutcome::kFinished, 300ms));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s);
  EXPECT_EQ(states.count("behind"), 1u);
  const auto all = states.all();
  EXPECT_GT(all.back().pending_bytes, 0);
  EXPECT_FALSE(fs::exists(o.cursor_path)) << "nothing was sent, so no cursor moved";
}

// `lines` metrics lines (an evaluation every `eval_every`th) sent through a
// TensorboardTracker into `tb`, as rank 0's runner sends them; the path of
// their metrics.jsonl.
std::string write_tensorboard_run(const TempDir& dir, const std::string& tb, int lines, int eval_every,
                                  std::optional<MetricRecord> preamble = std::nullopt) {
  const std::string metrics = dir.file("metrics.jsonl");
  for (int s = 1; s <= lines; ++s) append(metrics, metrics_line(s, s % eval_every == 0));
  TensorboardRun run;
  run.dir = tb;
  run.spec_yaml = "apiVersion: tailor/v1\nkind: TrainingJob\nname: t\n";
  run.plan_markdown = "**bf16, micro-batch 4**\n";
  WorkerOptions o;
  o.metrics_path = metrics;
  o.cursor_path = dir.file("tensorboard.cursor");
  o.preamble = std::move(preamble);
  TrackerWorker w(std::make_unique<TensorboardTracker>(run), o, nullptr);
  w.notify();
  EXPECT_TRUE(w.finish(RunOutcome::kFinished, 60s));
  return metrics;
}

TEST(TensorboardTrackerTest, TensorBoardsAccumulatorReadsEveryScalarAndTheTexts) {
  TempDir dir;
  MetricRecord estimates;
  estimates.time = 1795000000.0;
  estimates.scalars = {{"memory_estimated/weights_bytes", 6070784}, {"memory_estimated/total_bytes", 126875136}};
  const std::string tb = dir.file("tb");
  const std::string metrics = write_tensorboard_run(dir, tb, 30, 10, estimates);
  const auto [rc, out] = run_command(kPython + " " + kCheck + " tensorboard " + tb + " " + metrics);
  ASSERT_EQ(rc, 0) << out;
  const auto summary = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(summary["scalars_checked"], 30 * 16 + 3 * 3);
  EXPECT_EQ(summary["estimated"], 2);
}

// Weights & Biases through TensorBoard: tailor-wandb makes an offline run
// of a job's event folder (no account, no network: wandb's own library
// writes it), whose history holds every number of every metrics line at
// its step; `wandb sync` would upload it.
TEST(WandbTest, TailorWandbMakesAnOfflineRunOfATensorboardFolder) {
  TempDir dir;
  const std::string tb = dir.file("job");
  const std::string metrics = write_tensorboard_run(dir, tb, 12, 4);
  // wandb's files stay in the test's folder (its cache and settings too).
  const std::string env = "HOME=" + dir.path().string() + " WANDB_CACHE_DIR=" + dir.file("cache") +
                          " WANDB_CONFIG_DIR=" + dir.file("config") + " WANDB_DATA_DIR=" + dir.file("data") + " ";
  const std::string tool = std::string(TAILOR_BINARY_DIR) + "/bin/tailor-wandb";
  const auto [rc, out] = run_command(env + kPython + " " + tool + " " + tb + " --project tests --output json");
  ASSERT_EQ(rc, 0) << out;
  const auto converted = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(converted["steps"], 12);
  const auto [check_rc, check] = run_command(env + kPython + " " + kCheck + " wandb " +
                                             converted["run_dir"].get<std::string>() + " " + metrics);
  ASSERT_EQ(check_rc, 0) << check;
  EXPECT_EQ(nlohmann::json::parse(check.substr(check.find('{')))["points_checked"], 12 * 16 + 3 * 3);
  // A folder without event files: it says so and fails.
  dir.write("empty/.keep", "");
  const auto [empty_rc, empty] = run_command(env + kPython + " " + tool + " " + dir.file("empty"));
  EXPECT_EQ(empty_rc, 1);
  EXPECT_NE(empty.find("no TensorBoard scalars"), std::string::npos) << empty;
}

// A real MLflow tracking server on a free loopback port, its store in `dir`.
class MlflowServer {
 public:
  explicit MlflowServer(const fs::path& dir, int port = 0) : dir_(dir), port_(port ? port : free_port()) {}
  ~MlflowServer() { stop(); }
  std::string uri() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }

  // Starts it and waits (up to 3 minutes on a loaded machine) until it answers.
  bool start() {
    platform::LaunchRequest req;
    req.argv = {std::string(TAILOR_SOURCE_DIR) + "/.venv/bin/mlflow", "server", "--host", "127.0.0.1", "--port",
                std::to_string(port_), "--backend-store-uri", "sqlite:///" + (dir_ / "mlflow.db").string(),
                "--artifacts-destination", (dir_ / "artifacts").string(), "--workers", "1"};
    req.log_path = (dir_ / "mlflow-server.log").string();
    req.env["PYTHONUNBUFFERED"] = "1";
    auto p = platform::launch_process(req);
    if (!p.is_ok()) return false;
    pid_ = p->pid;
    HttpClient http({}, 2);
    const auto deadline = std::chrono::steady_clock::now() + 180s;
    while (std::chrono::steady_clock::now() < deadline) {
      auto r = http.get(uri() + "/health");
      if (r.is_ok() && r->status == 200) return true;
      if (auto ended = platform::reap_child(pid_); ended.is_ok() && *ended) {
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(200ms);  // polling its readiness, not synchronising on time
    }
    return false;
  }
  // Kills it as a crash would (the whole process group: uvicorn's workers too).
  void stop() {
    if (pid_ <= 0) return;
    platform::signal_group(pid_, SIGKILL);
    (void)platform::wait_child(pid_);
    pid_ = -1;
  }
  std::string log() const {
    std::ifstream in(dir_ / "mlflow-server.log");
    std::stringstream s;
    s << in.rdbuf();
    const std::string t = s.str();
    return t.size() > 3000 ? t.substr(t.size() - 3000) : t;
  }

 private:
  static int free_port() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    close(fd);
    return ntohs(a.sin_port);
  }

  fs::path dir_;
  int port_;
  pid_t pid_ = -1;
};

MlflowRun mlflow_run(const std::string& uri, const TempDir& dir) {
  MlflowRun m;
  m.uri = uri;
  m.experiment = "tailor-tests";
  m.run_name = "outage";
  m.tags = {{"tailor.job", "outage"}, {"team", "infra"}};
  m.params = {{"spec.model.preset", "tiny-llama-byte"}, {"spec.training.max_steps", "40"}, {"plan.precision", "bf16"},
              {"plan.micro_batch_size", "4"}};
  m.plan_tags = {{"plan.precision", "bf16"}, {"plan.micro_batch_size", "4"}};
  m.state_path = dir.file("mlflow.json");
  return m;
}

// Killed for a stretch in the middle of a job, the server still ends with
// every metric at its step and the final status: the worker kept them in
// metrics.jsonl behind its cursor and sent them when the server was back.
TEST(MlflowTrackerTest, ARealServerGetsEveryMetricAndTheStatusThroughAnOutage) {
  TempDir dir;
  MlflowServer server(dir.path());
  ASSERT_TRUE(server.start()) << server.log();
  const std::string metrics = dir.file("metrics.jsonl");
  WorkerOptions o;
  o.metrics_path = metrics;
  o.cursor_path = dir.file("mlflow.cursor");
  o.first_backoff = 100ms;
  o.max_backoff = 1000ms;
  States states;
  auto tracker = std::make_unique<MlflowTracker>(mlflow_run(server.uri(), dir));
  MlflowTracker* mlflow = tracker.get();
  TrackerWorker w(std::move(tracker), o, states.sink());
  for (int s = 1; s <= 15; ++s) append(metrics, metrics_line(s, s % 10 == 0));
  w.notify();
  ASSERT_TRUE(states.wait_for("up")) << server.log();
  server.stop();
  // Lines written while it is down (the next write fails and reports it).
  for (int s = 16; s <= 40; ++s) {
    append(metrics, metrics_line(s, s % 10 == 0));
    w.notify();
  }
  ASSERT_TRUE(states.wait_for("down"));
  MlflowServer again(dir.path(), server.port());
  ASSERT_TRUE(again.start()) << again.log();
  ASSERT_TRUE(w.finish(RunOutcome::kFinished, 120s)) << again.log();
  EXPECT_EQ(states.count("closed"), 1u);
  const auto [rc, out] = run_command(kPython + " " + kCheck + " mlflow " + again.uri() + " " + mlflow->run_id() + " " +
                                     metrics + " FINISHED");
  ASSERT_EQ(rc, 0) << out;
  const auto summary = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(summary["metrics_checked"], 40 * 16 + 4 * 3);
  EXPECT_EQ(summary["steps"], 40);
}

// A server that cannot be reached leaves the tracker down, saying where,
// and a run's end does not wait for it beyond the deadline.
TEST(MlflowTrackerTest, AnUnreachableServerLeavesTheTrackerDownWithTheReason) {
  TempDir dir;
  States states;
  WorkerOptions o;
  o.metrics_path = dir.file("metrics.jsonl");
  o.cursor_path = dir.file("mlflow.cursor");
  o.first_backoff = 10ms;
  MlflowRun m = mlflow_run("http://127.0.0.1:1", dir);  // nothing listens on port 1
  TrackerWorker w(std::make_unique<MlflowTracker>(m), o, states.sink());
  w.notify();
  ASSERT_TRUE(states.wait_for("down", 1, 60s));
  const auto all = states.all();
  EXPECT_NE(all.front().error.find("127.0.0.1:1"), std::string::npos) << all.front().error;
  EXPECT_FALSE(w.finish(RunOutcome::kFinished, 200ms));
}

// `tailor run` with both trackers: TensorBoard and the MLflow server hold
// every number of every metrics line, the spec and plan, and the run's
// FINISHED status; the job's events say each tracker was up and closed.
TEST(TrackingRunTest, TailorRunReportsEveryStepToTensorBoardAndMlflow) {
  const fs::path bin = fs::path(TAILOR_BINARY_DIR) / "bin";
  TempDir dir;
  MlflowServer server(dir.path());
  ASSERT_TRUE(server.start()) << server.log();
  const std::string out = dir.file("run");
  platform::LaunchRequest req;
  req.argv = {(bin / "tailor").string(), "run", std::string(TAILOR_SOURCE_DIR) + "/configs/examples/tiny-cpu.yaml",
              "--out", out, "--set", "training.max_steps=6", "--set", "checkpoint.every_steps=0",
              "--set", "tracking.tensorboard.dir=tb", "--set", "tracking.mlflow.uri=" + server.uri(),
              "--set", "tracking.mlflow.experiment=e2e", "--set", "tracking.mlflow.run_name=e2e-run",
              "--set", "tracking.mlflow.tags.team=infra"};
  req.log_path = dir.file("run.log");
  req.env["OMP_WAIT_POLICY"] = "PASSIVE";
  auto p = platform::launch_process(req);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  auto exit = platform::wait_child(p->pid);
  std::ifstream log_in(req.log_path);
  std::stringstream log;
  log << log_in.rdbuf();
  ASSERT_TRUE(exit.is_ok());
  ASSERT_EQ(exit->code, 0) << log.str();

  std::ifstream state_in(out + "/tracking/mlflow.json");
  const auto state = nlohmann::json::parse(state_in);
  const std::string metrics = out + "/metrics.jsonl";
  const auto [rc, check] = run_command(kPython + " " + kCheck + " mlflow " + server.uri() + " " +
                                       state["run_id"].get<std::string>() + " " + metrics + " FINISHED");
  ASSERT_EQ(rc, 0) << check;
  EXPECT_EQ(nlohmann::json::parse(check.substr(check.find('{')))["steps"], 6);
  // The spec's run name and tags, as the server holds them.
  auto got = HttpClient({}).get(server.uri() + "/api/2.0/mlflow/runs/get?run_id=" + state["run_id"].get<std::string>());
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  const auto run = nlohmann::json::parse(got->body)["run"];
  EXPECT_EQ(run["info"]["run_name"], "e2e-run");
  std::map<std::string, std::string> tags;
  for (const auto& t : run["data"]["tags"]) tags[t["key"]] = t["value"];
  EXPECT_EQ(tags["team"], "infra");
  EXPECT_EQ(tags["tailor.job"], "tiny-cpu");
  EXPECT_EQ(tags["tailor.model_path"], out + "/model");
  const auto [tb_rc, tb] = run_command(kPython + " " + kCheck + " tensorboard " + out + "/tb " + metrics);
  ASSERT_EQ(tb_rc, 0) << tb;

  std::map<std::string, std::vector<std::string>> states;
  std::ifstream events(out + "/events.jsonl");
  for (std::string line; std::getline(events, line);) {
    const auto e = nlohmann::json::parse(line);
    if (e["event"] == "tracker") states[e["tracker"]].push_back(e["state"]);
  }
  for (const char* t : {"tensorboard", "mlflow"}) {
    ASSERT_FALSE(states[t].empty()) << t;
    EXPECT_EQ(states[t].front(), "up") << t;
    EXPECT_EQ(states[t].back(), "closed") << t;
  }
}

}  // namespace
}  // namespace tailor::runner::tracking
