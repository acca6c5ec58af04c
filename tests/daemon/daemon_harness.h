// End-to-end harness: a real tailord process on 127.0.0.1 with an
// ephemeral port (read from DATA/address), a real HTTP client (Boost.Beast,
// synchronous), and clean-up of the daemon and every runner it started.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/testing/temp_dir.h"

namespace tailor::daemon::testing {

struct HttpResult {
  int status = 0;  // 0: no response (connection failed)
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string error;
  nlohmann::json json() const { return nlohmann::json::parse(body, nullptr, false); }
};

// Replies a load test did not expect, each with the request that got it,
// so that a failure under load names the request, its status and what the
// server said. Thread-safe.
class UnexpectedReplies {
 public:
  void add(const std::string& request, const HttpResult& reply);
  bool none() const;
  // "3 unexpected replies: REQUEST -> 500 BODY; ..." (the first five whole).
  std::string text() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::string> seen_;
};

HttpResult http_request(const std::string& address, const std::string& method, const std::string& target,
                        const std::string& body = {}, const std::map<std::string, std::string>& headers = {});

// tailor-runner for end-to-end runs: the build's own (TAILOR_RUNNER_PATH),
// else $TAILOR_RUNNER; empty when neither exists.
std::string runner_path();

// Polls `cond` until it holds or `timeout` passes.
bool wait_for(const std::function<bool()>& cond, std::chrono::milliseconds timeout);

// tiny-cpu.yaml for the daemon's spec root (TAILOR_SOURCE_DIR/configs):
// `steps` optimizer steps, a checkpoint every `checkpoint_every`; `small`
// halves the batch and the sequence length (steps of a fraction of a second).
std::string tiny_spec(const std::string& name, int steps, int checkpoint_every, int priority = 0, bool small = true);

class DaemonProcess {
 public:
  // Starts tailord on DATA = dir/data with `args` appended; the spec root is
  // the source tree's configs/ unless `args` names one.
  explicit DaemonProcess(const std::string& data_dir, std::vector<std::string> args = {},
                         const std::string& runner = runner_path());
  ~DaemonProcess();  // SIGTERM and wait; SIGKILLs runners of every job of the store it knows

  bool ok() const { return !address_.empty(); }
  const std::string& address() const { return address_; }
  std::string token() const;  // DATA/token as it is now
  const std::string& log() const { return log_path_; }
  // The last `bytes` of tailord's log (every run on this data folder), for failure messages.
  std::string log_tail(std::size_t bytes = 6000) const;
  pid_t pid() const { return pid_; }

  HttpResult get(const std::string& target) const;
  HttpResult post(const std::string& target, const std::string& body, const std::string& content_type = "application/yaml",
                  std::map<std::string, std::string> headers = {}) const;
  nlohmann::json job(const std::string& id) const;
  // Polls until the job's state is `state` (or a terminal state if `state` is empty).
  bool wait_state(const std::string& id, const std::string& state, std::chrono::milliseconds timeout) const;
  // Polls until the job ends, for as long as it moves: false once neither its
  // state nor its last step changed for `stall`. A loaded machine trains
  // slower; it does not stop.
  bool wait_ended_while_moving(const std::string& id, std::chrono::milliseconds stall) const;

  // Kills tailord with `sig` and reaps it. Runners stay, and this object
  // no longer kills them: the next daemon on the folder owns them.
  void kill_daemon(int sig);
  // Kills every runner process group recorded in the jobs of this daemon.
  void kill_runners();
  // Whether tailord ended by itself within `timeout` (reaped if so).
  bool exited_within(std::chrono::milliseconds timeout);

 private:
  std::string data_dir_;
  std::string log_path_;
  pid_t pid_ = -1;
  std::string address_;
  std::vector<pid_t> runner_pids_;
};

}  // namespace tailor::daemon::testing
