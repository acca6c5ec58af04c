#include "daemon/serving/completion_worker.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "platform/process.h"
#include "runner/protocol/serve_protocol.h"

namespace tailor::daemon {
namespace {

// The last `n` lines of a file, for "why did it end".
std::string tail_of(const std::string& path, std::size_t n) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
    if (lines.size() > n) lines.erase(lines.begin());
  }
  std::string out;
  for (const auto& l : lines) out += (out.empty() ? "" : "\n") + l;
  return out;
}

bool write_all(int fd, const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<CompletionWorker>> CompletionWorker::start(const std::vector<std::string>& argv,
                                                                  const std::string& log_path,
                                                                  std::chrono::milliseconds ready_timeout) {
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0) return Status::io_error(std::string("pipe: ") + std::strerror(errno));
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]);
    ::close(in[1]);
    return Status::io_error(std::string("pipe: ") + std::strerror(errno));
  }
  platform::LaunchRequest request;
  request.argv = argv;
  request.log_path = log_path;  // its stderr; stdout is the pipe
  request.stdin_fd = in[0];
  request.stdout_fd = out[1];
  request.own_process_group = false;  // Ctrl-C in a terminal reaches it too
  request.parent_death_signal = SIGTERM;
  auto launched = platform::launch_process(request);
  ::close(in[0]);
  ::close(out[1]);
  if (!launched.is_ok()) {
    ::close(in[1]);
    ::close(out[0]);
    return launched.status();
  }
  std::unique_ptr<CompletionWorker> w(new CompletionWorker());
  w->pid_ = launched->pid;
  w->to_child_ = in[1];
  w->from_child_ = out[0];
  w->log_path_ = log_path;
  auto line = w->read_line(std::chrono::steady_clock::now() + ready_timeout);
  if (!line.is_ok()) {
    if (line.status().code() == StatusCode::kCancelled) {
      return Status::unavailable("the model was not loaded within " +
                                       std::to_string(ready_timeout.count() / 1000) + " s");
    }
    return Status::failed_precondition("the model process ended while loading the model (" + w->ended_how() + ")");
  }
  const auto ready = nlohmann::json::parse(*line, nullptr, /*allow_exceptions=*/false);
  if (!ready.is_object() || ready.value("event", "") != "ready") {
    return Status::internal("the model process said \"" + *line + "\" where its ready line was expected");
  }
  w->ready_ = *line;
  return w;
}

CompletionWorker::~CompletionWorker() {
  if (to_child_ >= 0) ::close(to_child_);
  if (pid_ > 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (true) {
      auto exit = platform::reap_child(pid_);
      if (!exit.is_ok() || exit->has_value()) break;
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        (void)platform::wait_child(pid_);
        break;
      }
      // Waits on its stdout, which closes when it ends, rather than sleeping.
      pollfd p{from_child_, POLLIN, 0};
      if (::poll(&p, 1, 100) > 0) {
        char sink[4096];
        (void)!::read(from_child_, sink, sizeof sink);
      }
    }
  }
  if (from_child_ >= 0) ::close(from_child_);
}

Result<std::string> CompletionWorker::read_line(std::chrono::steady_clock::time_point deadline) {
  while (true) {
    const auto nl = pending_.find('\n');
    if (nl != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      return line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Status::cancelled("no answer from the model process in time");
    pollfd p{from_child_, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 60'000)));
    if (ready < 0 && errno != EINTR) return Status::io_error(std::string("poll: ") + std::strerror(errno));
    if (ready <= 0) continue;
    char buf[65536];
    const ssize_t n = ::read(from_child_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      dead_ = true;
      return Status::unavailable("the model process ended");
    }
    pending_.append(buf, static_cast<std::size_t>(n));
  }
}

std::string CompletionWorker::ended_how() {
  std::string how = "it has ended";
  if (auto exit = platform::wait_child(pid_); exit.is_ok()) {
    how = exit->signal ? "killed by signal " + std::to_string(exit->signal)
                       : "exit code " + std::to_string(exit->code);
    pid_ = -1;
  }
  if (!log_path_.empty()) {
    const std::string tail = tail_of(log_path_, 5);
    if (!tail.empty()) how += "; its last words: " + tail;
  }
  return how;
}

namespace {

// How often a streamed reply's client is asked whether it still listens
// while the model process is silent.
constexpr std::chrono::milliseconds kListenCheck{200};

}  // namespace

Result<WorkerReply> CompletionWorker::call(std::string_view route, const std::string& one_line_body,
                                           const std::function<bool(std::string chunk)>& on_chunk,
                                           const std::function<bool()>& listening) {
  std::lock_guard<std::mutex> lock(mu_);
  if (dead_) return Status::unavailable("the model process has ended");
  if (listening && !listening()) return WorkerReply{200, "null"};  // nobody waits for it any more
  if (!write_all(to_child_, runner::serve_request_line(route, one_line_body) + "\n")) {
    dead_ = true;
    return Status::unavailable("the model process has ended (" + ended_how() + ")");
  }
  // Once the client has left (a chunk refused, or `listening` says so),
  // the process is told to stop, and what it sends meanwhile is dropped.
  bool stopped = false;
  bool ended = false;
  auto stop = [&] {
    stopped = true;
    ended = !write_all(to_child_, std::string(runner::kCancelLine) + "\n");
  };
  // No deadline of its own: a long generation is the client's to time out;
  // with `listening`, asked every kListenCheck meanwhile.
  auto next_line = [&]() -> Result<std::string> {
    while (true) {
      if (!listening || stopped) return read_line(std::chrono::steady_clock::time_point::max());
      auto line = read_line(std::chrono::steady_clock::now() + kListenCheck);
      if (line.is_ok() || line.status().code() != StatusCode::kCancelled) return line;
      if (!listening()) stop();
      if (ended) return Status::unavailable("the model process ended");
    }
  };
  auto line = next_line();
  // A streamed reply's chunks, each passed on as it comes.
  while (line.is_ok() && line->rfind(runner::kChunkLinePrefix, 0) == 0 &&
         line->size() > runner::kChunkLinePrefix.size()) {
    if (!on_chunk) return Status::internal("the model process streamed a reply nobody asked to stream");
    if (!stopped &&
        !on_chunk(line->substr(runner::kChunkLinePrefix.size(), line->size() - runner::kChunkLinePrefix.size() - 1))) {
      stop();
    }
    if (ended) break;
    line = next_line();
  }
  if (ended) {
    dead_ = true;
    return Status::unavailable("the model process has ended (" + ended_how() + ")");
  }
  if (!line.is_ok()) return Status::unavailable("the model process has ended (" + ended_how() + ")");
  // {"status": N, "body": ...}; ordered, so the body keeps its fields' order.
  const auto parsed = nlohmann::ordered_json::parse(*line, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object() || !parsed.contains("status") || !parsed["status"].is_number_integer() ||
      !parsed.contains("body")) {
    return Status::internal("the model process answered \"" + line->substr(0, 200) + "\"");
  }
  return WorkerReply{parsed["status"].get<int>(), parsed["body"].dump()};
}

bool CompletionWorker::alive() const { return !dead_; }

}  // namespace tailor::daemon
