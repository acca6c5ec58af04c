#include "daemon/api/job_completions.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "daemon/http/errors.h"
#include "daemon/serving/streamed_reply.h"

namespace tailor::daemon {

namespace fs = std::filesystem;

JobCompletions::JobCompletions(std::string runner_path, std::string log_dir, double idle_seconds)
    : runner_(std::move(runner_path)), log_dir_(std::move(log_dir)), idle_(idle_seconds) {
  reaper_ = std::thread([this] { close_when_idle(); });
}

JobCompletions::~JobCompletions() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stopping = true;
  }
  state_->wake.notify_all();
  reaper_.join();
}

void JobCompletions::State::release() {
  {
    std::lock_guard<std::mutex> lock(mu);
    busy = false;
    last_used = std::chrono::steady_clock::now();
  }
  wake.notify_all();
}

void JobCompletions::close_when_idle() {
  State& st = *state_;
  std::unique_lock<std::mutex> lock(st.mu);
  while (!st.stopping) {
    if (!st.worker || st.busy) {
      st.wake.wait(lock);
      continue;
    }
    const auto due = st.last_used + std::chrono::duration_cast<std::chrono::steady_clock::duration>(idle_);
    if (std::chrono::steady_clock::now() < due) {
      st.wake.wait_until(lock, due);
      continue;
    }
    std::shared_ptr<CompletionWorker> idle = std::move(st.worker);
    log_info("completions: job " + st.job_id + "'s model closed after " + std::to_string(int(idle_.count())) +
             " s without a request");
    st.job_id.clear();
    lock.unlock();
    idle.reset();  // waits for the process to end: outside the lock
    lock.lock();
  }
  std::shared_ptr<CompletionWorker> last = std::move(st.worker);
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
                                      const std::string& body, const std::function<bool()>& client_left) {
  if (auto refused = check_job_model(job, output_dir)) return *refused;
  std::error_code ec;
  const auto request = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded()) return error_response(ApiError::kInvalidArgument, "the request body is not JSON");
  if (runner_.empty()) return error_response(ApiError::kUnavailable, "this tailord has no runner to serve a model with");

  std::shared_ptr<CompletionWorker> worker, replaced;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->busy) {
      return error_response(ApiError::kUnavailable,
                            "tailord is answering another completion request (one at a time); try again");
    }
    state_->busy = true;
    if (state_->worker && (state_->job_id != job.id || !state_->worker->alive())) replaced = std::move(state_->worker);
    worker = state_->worker;
  }
  // From here this request holds the slot: given back however it ends, by
  // a stream when it ends.
  struct Release {
    std::shared_ptr<State> state;
    ~Release() {
      if (state) state->release();
    }
  } release{state_};
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
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->worker = worker;
    state_->job_id = job.id;
  }
  auto failed = [id = job.id](const Status& s) {
    return error_response(ApiError::kUnavailable, "job " + id + "'s model: " + s.message());
  };
  if (request.is_object() && request.contains("stream") && request["stream"] == true) {
    std::shared_ptr<State> state = std::move(release.state);  // the stream's now
    HttpResponse res = answer_streamed(
        worker, std::string(route), request.dump(), [state] { state->release(); }, failed);
    // At shutdown or eviction: OpenAI's error object, then the end of the stream.
    if (res.stream) {
      res.stream_farewell = [](const std::string& reason) {
        nlohmann::json error;
        error["error"] = {{"message", "tailord closed the stream: " + reason},
                          {"type", "server_error"},
                          {"param", nullptr},
                          {"code", nullptr}};
        return "data: " + error.dump() + "\n\ndata: [DONE]\n\n";
      };
    }
    return res;
  }
  // A client that leaves before its reply stops the generation it asked for.
  auto reply = worker->call(route, request.dump(), {}, still_there(client_left));
  if (!reply.is_ok()) return failed(reply.status());
  return HttpResponse::json(reply->status, std::move(reply->body));
}

}  // namespace tailor::daemon
