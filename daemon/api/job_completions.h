// POST /v1/jobs/{id}/completions and /v1/jobs/{id}/chat/completions:
// OpenAI's completions and chat completions (docs/serving.md) answered by a
// succeeded job's model, so that lm-eval scores a job through
// tailord with its API token. The model is loaded by a `tailor-runner serve`
// process (serving/completion_worker.h) on the CPU at the first request and
// kept for the next ones; one job's model at a time (asking for another
// job's replaces it), closed after `idle_seconds` without a request. One
// request is answered at a time: another that comes meanwhile is 503 with
// Retry-After, so that no API worker thread waits on a model. A request
// with "stream": true is answered as OpenAI streams (server-sent events,
// serving/streamed_reply.h) and holds the slot until its stream ends.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "daemon/http/message.h"
#include "daemon/serving/completion_worker.h"
#include "daemon/store/job_store.h"

namespace tailor::daemon {

// Whether a job has a model to open (completions, exports): 409 when it has
// not succeeded, 404 when its output folder is gone or holds neither
// model/ nor adapter/; nullopt when it has one.
std::optional<HttpResponse> check_job_model(const JobRecord& job, const std::string& output_dir);

class JobCompletions {
 public:
  // `log_dir`: the runner's stderr goes to log_dir/completions-JOB.log.
  JobCompletions(std::string runner_path, std::string log_dir, double idle_seconds = 600);
  ~JobCompletions();  // closes the model process
  JobCompletions(const JobCompletions&) = delete;
  JobCompletions& operator=(const JobCompletions&) = delete;

  // The reply for `body`: 409 when the job has not succeeded, 404 when its
  // folder is gone or holds no model, 503 while another request is answered or when the
  // model cannot be loaded (saying why), else the model's own status and
  // body (OpenAI's error object for a bad request), or its event stream.
  // `route`: runner/protocol/serve_protocol.h's completions or chat completions.
  // `client_left` (HttpRequest's): once it says so, an unstreamed reply's
  // generation stops.
  HttpResponse complete(const JobRecord& job, const std::string& output_dir, std::string_view route,
                        const std::string& body, const std::function<bool()>& client_left = {});

 private:
  // What the reaper, the handlers and a streamed reply's relay share: a
  // stream gives the slot back when it ends, after its handler returned
  // (and, at shutdown, after this object is gone).
  struct State {
    std::mutex mu;  // guards the fields below; never held while a model answers
    bool busy = false;
    std::string job_id;
    std::shared_ptr<CompletionWorker> worker;
    std::chrono::steady_clock::time_point last_used;
    bool stopping = false;
    std::condition_variable wake;
    void release();  // the request holding the slot ended
  };

  void close_when_idle();

  std::string runner_;
  std::string log_dir_;
  std::chrono::duration<double> idle_;
  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::thread reaper_;
};

}  // namespace tailor::daemon
