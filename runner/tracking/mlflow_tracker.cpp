#include "runner/tracking/mlflow_tracker.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <fstream>

#include "platform/files.h"

namespace tailor::runner::tracking {
namespace {

using Json = nlohmann::json;

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string clip(const std::string& v, std::size_t max) { return v.size() <= max ? v : v.substr(0, max); }

Json key_values(const std::map<std::string, std::string>& pairs, std::size_t max_value) {
  Json out = Json::array();
  for (const auto& [k, v] : pairs) out.push_back({{"key", k}, {"value", clip(v, max_value)}});
  return out;
}

// The server's answer as a Status: 2xx ok; a timeout, 429 and 5xx are
// worth retrying (Unavailable); any other 4xx refuses the request
// (InvalidArgument, with MLflow's error_code and message).
Status judge(const HttpReply& r, const std::string& what) {
  if (r.status >= 200 && r.status < 300) return Status::ok();
  std::string why = "HTTP " + std::to_string(r.status);
  const Json body = Json::parse(r.body, nullptr, false);
  if (body.is_object() && body.contains("error_code")) {
    why += " " + body.value("error_code", std::string()) + ": " + body.value("message", std::string());
  }
  const std::string message = "mlflow: " + what + ": " + why;
  if (r.status == 408 || r.status == 429 || r.status >= 500) return Status::unavailable(message);
  return Status::invalid_argument(message);
}

}  // namespace

MlflowTracker::MlflowTracker(MlflowRun run) : run_(std::move(run)), http_(run_.auth) {
  while (!run_.uri.empty() && run_.uri.back() == '/') run_.uri.pop_back();
}

Result<std::string> MlflowTracker::call(const std::string& path, const std::string& body) {
  const std::string url = run_.uri + "/api/2.0/mlflow/" + path;
  TAILOR_ASSIGN_OR_RETURN(const HttpReply reply, body.empty() ? http_.get(url) : http_.post_json(url, body));
  TAILOR_RETURN_IF_ERROR(judge(reply, path));
  return reply.body;
}

Status MlflowTracker::open(const OpenContext&) {
  if (run_id_.empty()) {
    // A run this job's earlier runner created on the same server continues.
    std::ifstream in(run_.state_path);
    const Json state = in ? Json::parse(in, nullptr, false) : Json();
    if (state.is_object() && state.value("uri", std::string()) == run_.uri) {
      experiment_id_ = state.value("experiment_id", std::string());
      run_id_ = state.value("run_id", std::string());
      params_logged_ = state.value("params_logged", false);
    }
  }
  if (run_id_.empty()) TAILOR_RETURN_IF_ERROR(create_run());
  if (!params_logged_) {
    TAILOR_RETURN_IF_ERROR(log_pairs(run_.params, "params", kMlflowMaxParams, kMlflowMaxParamValue));
    params_logged_ = true;
    TAILOR_RETURN_IF_ERROR(save_state());
  }
  TAILOR_RETURN_IF_ERROR(log_pairs(run_.plan_tags, "tags", kMlflowMaxTags, kMlflowMaxTagValue));
  // A later runner of the job: the run is running again.
  return call("runs/update", Json{{"run_id", run_id_}, {"status", "RUNNING"}}.dump()).status();
}

Result<std::string> MlflowTracker::experiment_id() {
  const std::string by_name = "experiments/get-by-name?experiment_name=" + url_encode(run_.experiment);
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto found = call(by_name, "");
    if (found.is_ok()) {
      const Json j = Json::parse(*found, nullptr, false);
      if (j.is_object() && j.contains("experiment")) return j["experiment"].value("experiment_id", std::string());
      return Status::invalid_argument("mlflow: experiments/get-by-name: unexpected answer " + clip(*found, 200));
    }
    if (found.status().message().find("RESOURCE_DOES_NOT_EXIST") == std::string::npos) return found.status();
    auto created = call("experiments/create", Json{{"name", run_.experiment}}.dump());
    if (created.is_ok()) {
      const Json j = Json::parse(*created, nullptr, false);
      if (j.is_object() && j.contains("experiment_id")) return j.value("experiment_id", std::string());
    }
    // Another client created it meanwhile (RESOURCE_ALREADY_EXISTS): look again.
    if (!created.is_ok() && created.status().message().find("RESOURCE_ALREADY_EXISTS") == std::string::npos) {
      return created.status();
    }
  }
  return Status::unavailable("mlflow: experiment \"" + run_.experiment + "\" could not be found nor created");
}

Status MlflowTracker::create_run() {
  if (experiment_id_.empty()) {
    TAILOR_ASSIGN_OR_RETURN(experiment_id_, experiment_id());
  }
  Json tags = key_values(run_.tags, kMlflowMaxTagValue);
  tags.push_back({{"key", "mlflow.source.name"}, {"value", "tailor"}});
  const Json body{{"experiment_id", experiment_id_}, {"run_name", run_.run_name}, {"start_time", now_ms()}, {"tags", tags}};
  TAILOR_ASSIGN_OR_RETURN(const std::string reply, call("runs/create", body.dump()));
  const Json j = Json::parse(reply, nullptr, false);
  if (!j.is_object() || !j.contains("run")) {
    return Status::invalid_argument("mlflow: runs/create: unexpected answer " + clip(reply, 200));
  }
  run_id_ = j["run"]["info"].value("run_id", std::string());
  return save_state();
}

Status MlflowTracker::save_state() const {
  const Json state{{"uri", run_.uri}, {"experiment_id", experiment_id_}, {"run_id", run_id_},
                   {"params_logged", params_logged_}};
  // Durable: a lost id would make the next runner start a second run.
  return platform::write_file_atomic(run_.state_path, state.dump(2) + "\n");
}

Status MlflowTracker::log_pairs(const std::map<std::string, std::string>& pairs, const char* kind,
                                std::size_t per_call, std::size_t max_value) {
  std::map<std::string, std::string> chunk;
  for (auto it = pairs.begin(); it != pairs.end(); ++it) {
    chunk.insert(*it);
    if (chunk.size() == per_call || std::next(it) == pairs.end()) {
      Json body{{"run_id", run_id_}, {kind, key_values(chunk, max_value)}};
      TAILOR_RETURN_IF_ERROR(call("runs/log-batch", body.dump()).status());
      chunk.clear();
    }
  }
  return Status::ok();
}

Status MlflowTracker::write(const std::vector<MetricRecord>& records) {
  // The worker hands over at most kMlflowMaxMetrics scalars, except a
  // single line with more (many ranks): that one is split.
  Json metrics = Json::array();
  auto flush = [&]() -> Status {
    if (metrics.empty()) return Status::ok();
    Json body{{"run_id", run_id_}, {"metrics", std::move(metrics)}};
    metrics = Json::array();
    return call("runs/log-batch", body.dump()).status();
  };
  for (const MetricRecord& r : records) {
    const std::int64_t ms = static_cast<std::int64_t>(std::llround(r.time * 1000.0));
    for (const Scalar& s : r.scalars) {
      if (!std::isfinite(s.value)) continue;  // JSON has no NaN; MLflow's clients send none either
      metrics.push_back({{"key", s.tag}, {"value", s.value}, {"timestamp", ms}, {"step", r.step}});
      if (metrics.size() == kMlflowMaxMetrics) TAILOR_RETURN_IF_ERROR(flush());
    }
  }
  return flush();
}

Status MlflowTracker::close(RunOutcome outcome) {
  if (!run_.model_path.empty()) {
    TAILOR_RETURN_IF_ERROR(log_pairs({{"tailor.model_path", run_.model_path}}, "tags", 1, kMlflowMaxTagValue));
  }
  const Json body{{"run_id", run_id_}, {"status", to_string(outcome)}, {"end_time", now_ms()}};
  return call("runs/update", body.dump()).status();
}

}  // namespace tailor::runner::tracking
