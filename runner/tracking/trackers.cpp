#include "runner/tracking/trackers.h"

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <filesystem>

#include "runner/tracking/mlflow_tracker.h"
#include "runner/tracking/tensorboard_tracker.h"

namespace tailor::runner::tracking {
namespace {

namespace fs = std::filesystem;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

HttpAuth mlflow_auth_from_environment() {
  HttpAuth a;
  a.bearer_token = env("MLFLOW_TRACKING_TOKEN");
  a.username = env("MLFLOW_TRACKING_USERNAME");
  a.password = env("MLFLOW_TRACKING_PASSWORD");
  const std::string insecure = env("MLFLOW_TRACKING_INSECURE_TLS");
  a.insecure_tls = insecure == "true" || insecure == "TRUE" || insecure == "1";
  return a;
}

Trackers::Trackers(const dsl::JobSpec& spec, const RunInfo& run, StateSink sink) {
  const dsl::TrackingSpec& t = spec.tracking;
  if (!t.any()) return;
  init_http();  // before any worker thread
  const fs::path state_dir = fs::path(run.out_dir) / "tracking";
  std::error_code ec;
  // A new run in this folder is a new run for the trackers too.
  if (!run.resume) fs::remove_all(state_dir, ec);
  fs::create_directories(state_dir, ec);
  const nlohmann::json plan = nlohmann::json::parse(run.plan_json, nullptr, false);
  const nlohmann::json plan_doc = plan.is_object() ? plan : nlohmann::json::object();
  auto options = [&](const char* name) {
    WorkerOptions o;
    o.metrics_path = (fs::path(run.out_dir) / "metrics.jsonl").string();
    o.cursor_path = (state_dir / (std::string(name) + ".cursor")).string();
    o.preamble = plan_estimates(plan_doc, static_cast<double>(std::time(nullptr)));
    return o;
  };
  if (t.tensorboard.on()) {
    TensorboardRun tb;
    tb.dir = (fs::path(run.out_dir) / t.tensorboard.dir).lexically_normal().string();
    tb.spec_yaml = run.spec_yaml;
    tb.plan_markdown = plan_markdown(plan_doc);
    workers_.push_back(std::make_unique<TrackerWorker>(std::make_unique<TensorboardTracker>(std::move(tb)),
                                                       options("tensorboard"), sink));
  }
  if (t.mlflow.on()) {
    MlflowRun m;
    m.uri = t.mlflow.uri;
    m.experiment = t.mlflow.experiment.empty() ? "Default" : t.mlflow.experiment;
    m.run_name = t.mlflow.run_name.empty() ? spec.name : t.mlflow.run_name;
    m.tags = t.mlflow.tags;
    m.tags["tailor.job"] = spec.name;
    m.tags["tailor.run_dir"] = fs::absolute(run.out_dir, ec).lexically_normal().string();
    m.params = spec_params(plan_doc);
    for (auto& [k, v] : plan_params(plan_doc)) m.params[k] = v;
    m.plan_tags = plan_params(plan_doc);
    m.state_path = (state_dir / "mlflow.json").string();
    m.model_path = run.model_path;
    m.auth = mlflow_auth_from_environment();
    workers_.push_back(
        std::make_unique<TrackerWorker>(std::make_unique<MlflowTracker>(std::move(m)), options("mlflow"), sink));
  }
  for (auto& w : workers_) w->notify();  // open at once, and send what an earlier runner left
}

void Trackers::notify() {
  for (auto& w : workers_) w->notify();
}

bool Trackers::finish(RunOutcome outcome, std::chrono::milliseconds timeout) {
  // Every tracker drains at once; the deadline is shared.
  for (auto& w : workers_) w->request_finish(outcome);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool all = true;
  for (auto& w : workers_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    all = w->finish(outcome, std::max(left, std::chrono::milliseconds(0))) && all;
  }
  return all;
}

}  // namespace tailor::runner::tracking
