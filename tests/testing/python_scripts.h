// The tests' Python reference scripts (tests/runner/*_reference.py and the
// like), run with .venv's interpreter through python_forkserver.py: one
// server a test process, started at the first script with the heavy modules
// imported once, each script a fork of it. A binary that ran ten scripts
// paid ten imports of torch, transformers and PEFT (about 6.5 s of CPU
// each); it now pays one.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/testing/text_file.h"

namespace tailor::testing {

// What the reference scripts import: torch, transformers and PEFT.
inline const std::vector<std::string>& reference_modules() {
  static const std::vector<std::string> k = {"torch", "transformers", "peft"};
  return k;
}

class PythonScripts {
 public:
  // The process's server, started at the first call with `modules` imported
  // (later calls' modules are not added: one binary, one set).
  static PythonScripts& shared(const std::vector<std::string>& modules = reference_modules()) {
    static PythonScripts server(modules);
    return server;
  }

  // Runs `script` (a path) with `args` (words split as the shell splits
  // them), stdout and stderr in `log`: success, or the command, its status
  // and the log.
  ::testing::AssertionResult run(const std::string& script, const std::string& args, const std::string& log) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const std::string what = "python " + script + " " + args;
    if (fd_ < 0) return ::testing::AssertionFailure() << what << ": the Python server did not start: " << why_;
    const std::string request = nlohmann::json{{"script", script}, {"args", args}, {"log", log}}.dump() + "\n";
    std::string answer;
    if (!send_all(request) || !read_line(&answer)) {
      return ::testing::AssertionFailure() << what << ": the Python server died; its log " << server_log_ << ":\n"
                                           << read_text(server_log_);
    }
    if (answer == "0") return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << what << " exited " << answer << ":\n" << read_text(log);
  }

  ~PythonScripts() {
    // A process the test forked exits with a copy of this object: the
    // server and its log are the parent's.
    if (::getpid() != owner_) return;
    if (fd_ >= 0) ::close(fd_);  // end of input: the server returns
    if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
    ::unlink(server_log_.c_str());
  }
  PythonScripts(const PythonScripts&) = delete;
  PythonScripts& operator=(const PythonScripts&) = delete;

 private:
  explicit PythonScripts(const std::vector<std::string>& modules) {
    server_log_ = "/tmp/tailor-python-server-" + std::to_string(::getpid()) + ".log";
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
      why_ = "socketpair failed";
      return;
    }
    std::vector<std::string> argv = {std::string(TAILOR_SOURCE_DIR) + "/.venv/bin/python",
                                     std::string(TAILOR_SOURCE_DIR) + "/tests/testing/python_forkserver.py"};
    argv.insert(argv.end(), modules.begin(), modules.end());
    std::vector<char*> cargv;
    for (std::string& a : argv)
      cargv.push_back(a.data());
    cargv.push_back(nullptr);
    const int log_fd = ::open(server_log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    pid_ = ::fork();
    if (pid_ == 0) {
      // dup2 clears close-on-exec on the copies.
      ::dup2(fds[1], 0);
      ::dup2(fds[1], 1);
      if (log_fd >= 0) ::dup2(log_fd, 2);
      ::execv(cargv[0], cargv.data());
      ::_exit(127);
    }
    if (log_fd >= 0) ::close(log_fd);
    ::close(fds[1]);
    if (pid_ < 0) {
      ::close(fds[0]);
      why_ = "fork failed";
      return;
    }
    fd_ = fds[0];
  }

  bool send_all(const std::string& s) {
    for (std::size_t done = 0; done < s.size();) {
      const ssize_t n = ::send(fd_, s.data() + done, s.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<std::size_t>(n);
    }
    return true;
  }

  bool read_line(std::string* line) {
    line->clear();
    for (char c;;) {
      const ssize_t n = ::read(fd_, &c, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      if (c == '\n') return true;
      line->push_back(c);
    }
  }

  std::mutex mutex_;
  pid_t owner_ = ::getpid();
  int fd_ = -1;
  pid_t pid_ = -1;
  std::string server_log_, why_;
};

// Runs tests/runner/`script` (or any path) through the process's server.
inline ::testing::AssertionResult run_python_script(const std::string& script, const std::string& args,
                                                    const std::string& log) {
  return PythonScripts::shared().run(script, args, log);
}

}  // namespace tailor::testing
