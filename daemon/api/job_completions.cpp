#include "daemon/api/job_completions.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "daemon/http/errors.h"

namespace tailor::daemon {

namespace fs = std::filesystem;

JobCompletions::JobCompletions(std::string runner_path, std::string log_dir, double idle_seconds)
    : runner_(std::move(runner_path)), log_dir_(std::move(log_dir)), idle_(idle_seconds) {
  reaper_ = std::thread([this] { close_when_idle(); });
}

JobCompletions::~JobCompletions() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  reaper_.join();
}

void JobCompletions::close_when_idle() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (!worker_ || busy_) {
      wake_.wait(lock);
      continue;
    }
    const auto due = last_used_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(idle_);
    if (std::chrono::steady_clock::now() < due) {
      wake_.wait_until(lock, due);
      continue;
    }
    std::shared_ptr<CompletionWorker> idle = std::move(worker_);
    log_info("completions: job " + job_id_ + "'s model closed after " + std::to_string(int(idle_.count())) +
             " s without a request");
    job_id_.clear();
    lock.unlock();
    idle.reset();  // waits for the process to end: outside the lock
    lock.lock();
  }
  std::shared_ptr<CompletionWorker> last = std::move(worker_);
  lock.unlock();
}

std::optional<HttpResponse> check_job_model(const JobRecord& job, const std::string& output_dir) {
  if (job.state != JobState::kSucceeded) {
    return error_response(ApiError::kConflict, "job " + job.id + " has not succeeded (state: " +
                                                   std::string(to_string(job.state)) +
                                                   "); only a finished job has a model");
  }
  std::error_code ec;
  if (output_dir.empty() || !fs::is_directory(output_dir, ec)) {
    return error_response(ApiError::kNotFound, "job " + job.id + "'s output folder is gone");
  }
  // What the runner's commands open in a run's folder: its model/, else its adapter/.
  const fs::path out(output_dir);
  if (!fs::exists(out / "model" / "config.json", ec) && !fs::exists(out / "adapter" / "adapter_config.json", ec)) {
    return error_response(ApiError::kNotFound, "job " + job.id + "'s output folder has no model (model/ or adapter/)");
  }
  return std::nullopt;
}

HttpResponse JobCompletions::complete(const JobRecord& job, const std::string& output_dir, std::string_view route,
                                      const std::string& body) {
  if (auto refused = check_job_model(job, output_dir)) return *refused;
  std::error_code ec;
  const auto request = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded()) return error_response(ApiError::kInvalidArgument, "the request body is not JSON");
  if (request.is_object() && request.contains("stream") && request["stream"] == true) {
    // OpenAI's error object, as the model's own refusals.
    nlohmann::json error;
    error["error"] = {
        {"message", "stream: tailord answers without streaming (tailor serve streams); ask without stream"},
        {"type", "invalid_request_error"},
        {"param", "stream"},
        {"code", nullptr}};
    return HttpResponse::json(400, error.dump());
  }
  if (runner_.empty()) return error_response(ApiError::kUnavailable, "this tailord has no runner to serve a model with");

  std::shared_ptr<CompletionWorker> worker, replaced;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (busy_) {
      return error_response(ApiError::kUnavailable,
                            "tailord is answering another completion request (one at a time); try again");
    }
    busy_ = true;
    if (worker_ && (job_id_ != job.id || !worker_->alive())) replaced = std::move(worker_);
    worker = worker_;
  }
  // From here this request holds the slot: given back however it ends.
  struct Release {
    JobCompletions& c;
    ~Release() {
      {
        std::lock_guard<std::mutex> lock(c.mu_);
        c.busy_ = false;
        c.last_used_ = std::chrono::steady_clock::now();
      }
      c.wake_.notify_all();
    }
  } release{*this};
  replaced.reset();
  if (!worker) {
    fs::create_directories(log_dir_, ec);
    const std::string log = (fs::path(log_dir_) / ("completions-" + job.id + ".log")).string();
    auto started = CompletionWorker::start({runner_, "serve", output_dir, "--device", "cpu", "--name", job.id}, log,
                                           std::chrono::minutes(10));
    if (!started.is_ok()) {
      return error_response(ApiError::kUnavailable, "job " + job.id + "'s model: " + started.status().message());
    }
    worker = std::move(*started);
    log_info("completions: job " + job.id + "'s model loaded");
    std::lock_guard<std::mutex> lock(mu_);
    worker_ = worker;
    job_id_ = job.id;
  }
  auto reply = worker->call(route, request.dump());
  if (!reply.is_ok()) return error_response(ApiError::kUnavailable, "job " + job.id + "'s model: " + reply.status().message());
  return HttpResponse::json(reply->status, std::move(reply->body));
}

}  // namespace tailor::daemon
