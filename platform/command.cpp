#include "platform/command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace tailor::platform {
namespace {

double monotonic_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Pipe {
  int fd[2] = {-1, -1};
  ~Pipe() {
    for (int f : fd) {
      if (f >= 0) ::close(f);
    }
  }
  void close_end(int i) {
    if (fd[i] >= 0) ::close(fd[i]);
    fd[i] = -1;
  }
};

std::vector<std::string> merged_environment(const std::map<std::string, std::string>& extra) {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv(*e);
    const std::string key = kv.substr(0, kv.find('='));
    if (!extra.count(key)) out.push_back(kv);
  }
  for (const auto& [k, v] : extra)
    out.push_back(k + "=" + v);
  return out;
}

}  // namespace

std::string CommandResult::describe() const {
  std::string what = signal ? "killed by signal " + std::to_string(signal) : "exit code " + std::to_string(exit_code);
  std::string first = err.empty() ? out : err;
  if (const auto nl = first.find('\n'); nl != std::string::npos) first.resize(nl);
  return first.empty() ? what : what + ": " + first;
}

Result<CommandResult> run_command(const CommandRequest& request) {
  if (request.argv.empty()) return Status::invalid_argument("run_command: no program");
  Pipe out, err;
  if (::pipe2(out.fd, O_CLOEXEC) != 0 || ::pipe2(err.fd, O_CLOEXEC) != 0) {
    return Status::io_error(std::string("pipe: ") + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out.fd[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err.fd[1], 2);
  // Nothing of the daemon's (its sockets, its database) reaches the command.
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);  // the daemon blocks its stop signals; the command must not
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGINT);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::vector<std::string> env = merged_environment(request.env);
  std::vector<char*> envp, argv;
  for (auto& e : env)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = request.argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return Status::not_found("cannot run " + request.argv[0] + ": " + std::strerror(rc));
  out.close_end(1);
  err.close_end(1);

  CommandResult result;
  const double deadline = monotonic_seconds() + request.timeout_seconds;
  bool timed_out = false, too_much = false;
  std::string* sinks[2] = {&result.out, &result.err};
  int fds[2] = {out.fd[0], err.fd[0]};
  while (fds[0] >= 0 || fds[1] >= 0) {
    const double left = deadline - monotonic_seconds();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p[2];
    int n = 0;
    int which[2];
    for (int i = 0; i < 2; ++i) {
      if (fds[i] < 0) continue;
      p[n] = {fds[i], POLLIN, 0};
      which[n++] = i;
    }
    const int ready = ::poll(p, static_cast<nfds_t>(n), static_cast<int>(left * 1000) + 1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) break;
    for (int k = 0; k < n; ++k) {
      if (!(p[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      const ssize_t got = ::read(p[k].fd, buf, sizeof buf);
      if (got > 0) {
        sinks[which[k]]->append(buf, static_cast<std::size_t>(got));
        if (sinks[which[k]]->size() > request.max_output_bytes) too_much = true;
      } else if (got == 0 || errno != EINTR) {
        fds[which[k]] = -1;  // closed by the Pipe
      }
    }
    if (too_much) break;
  }
  if (timed_out || too_much) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return Status::unavailable(request.argv[0] + " did not finish within " +
                               std::to_string(static_cast<int>(request.timeout_seconds)) + " s");
  }
  if (too_much) return Status::resource_exhausted(request.argv[0] + " printed more than expected");
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  // posix_spawnp reports a missing program as exit 127 from the child on
  // some libcs; glibc returns it as rc, handled above.
  return result;
}

}  // namespace tailor::platform
