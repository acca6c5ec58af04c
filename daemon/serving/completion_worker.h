// The model process behind an OpenAI completions endpoint: `tailor-runner
// serve` (runner/torch/serve_command.h) started with pipes for its stdin and
// stdout, spoken to one JSON line at a time. It loads the model once and
// answers requests in order; calls from several threads wait their turn.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace tailor::daemon {

struct WorkerReply {
  int status = 200;  // the HTTP status the model process chose
  std::string body;  // its JSON response or error object
};

// CompletionWorker::call's `listening` for a request that an HTTP server
// answers on a worker thread: true until `client_left` (HttpRequest's) says
// its client has gone; always true without it.
inline std::function<bool()> still_there(std::function<bool()> client_left) {
  return [left = std::move(client_left)] { return !left || !left(); };
}

class CompletionWorker {
 public:
  // Starts `argv` (argv[0] the runner's path, then "serve", the folder and
  // its options), its stderr to `log_path` (empty: this process' stderr),
  // and waits up to `ready_timeout` for its ready line. Its errors
  // (FailedPrecondition with the runner's last words where it exits while
  // loading; Unavailable when it takes longer).
  static Result<std::unique_ptr<CompletionWorker>> start(const std::vector<std::string>& argv,
                                                         const std::string& log_path,
                                                         std::chrono::milliseconds ready_timeout);
  // Closes its input, so that it ends; killed when it has not after 5 s.
  ~CompletionWorker();
  CompletionWorker(const CompletionWorker&) = delete;
  CompletionWorker& operator=(const CompletionWorker&) = delete;

  // The ready line (model, context, vocab, device, dtype) as JSON text.
  const std::string& ready() const { return ready_; }

  // One request to `route` (runner/protocol/serve_protocol.h: completions or
  // chat completions), its body a JSON document on one line, and the reply.
  // A streamed reply's chunks (each a JSON object's text) go to `on_chunk`
  // as they come, before the reply (Internal without one). It answers
  // whether the client still listens, and so does `listening`, asked every
  // 200 ms while the process is silent: once either says no, the process is
  // told to stop generating (serve_protocol.h's cancel line), and its later
  // chunks are dropped until the reply, which comes at once. A request whose
  // client left while it waited its turn is not sent (200, body null).
  // Unavailable
  // once the process has ended (saying how); it is not restarted.
  Result<WorkerReply> call(std::string_view route, const std::string& one_line_body,
                           const std::function<bool(std::string chunk)>& on_chunk = {},
                           const std::function<bool()>& listening = {});

  // False once the process has ended or stopped answering.
  bool alive() const;

 private:
  CompletionWorker() = default;
  // The next line of its stdout; Cancelled at `deadline`,
  // Unavailable at its end.
  Result<std::string> read_line(std::chrono::steady_clock::time_point deadline);
  std::string ended_how();

  std::mutex mu_;  // one request at a time
  pid_t pid_ = -1;
  int to_child_ = -1, from_child_ = -1;
  std::string pending_;  // read past the last line
  std::string ready_;
  std::string log_path_;
  std::atomic<bool> dead_{false};  // read without the lock: /healthz never waits on a request
};

}  // namespace tailor::daemon
