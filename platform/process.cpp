#include "platform/process.h"

#include <sys/prctl.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

extern char** environ;

namespace tailor::platform {
namespace {

void close_from(int first) {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, static_cast<unsigned>(first), ~0U, 0) == 0) return;
#endif
  const long max = sysconf(_SC_OPEN_MAX);
  for (long fd = first; fd < (max > 0 ? max : 4096); ++fd) close(static_cast<int>(fd));
}

// argv and envp as execve takes them, over strings that outlive the call.
struct ExecStrings {
  std::vector<std::string> env_strings, args;
  std::vector<char*> envp, argv;

  explicit ExecStrings(const LaunchRequest& request) : args(request.argv) {
    for (char** e = environ; *e; ++e) {
      const std::string kv(*e);
      const auto eq = kv.find('=');
      if (eq != std::string::npos && request.env.count(kv.substr(0, eq))) continue;
      env_strings.push_back(kv);
    }
    for (const auto& [k, v] : request.env)
      env_strings.push_back(k + "=" + v);
    for (auto& e : env_strings)
      envp.push_back(e.data());
    envp.push_back(nullptr);
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
  }
};

// A descriptor numbered 5 or above with the same file (a close-on-exec
// copy, `owned` to close it after the spawn): the spawn's actions write
// descriptors 0-4, which must not be a source they overwrite first.
int above_four(int fd, int& owned) {
  if (fd < 0 || fd > 4) return fd;
  owned = ::fcntl(fd, F_DUPFD_CLOEXEC, 10);
  return owned;
}

// posix_spawn: glibc's clone(CLONE_VM | CLONE_VFORK) shares tailord's
// memory with the child until it execs, so no page table is copied (with a
// fork, copying them, and the copy-on-write faults after, were a share of
// each submission's cost at 64 clients: docs/benchmarks.md). The same child
// as the fork below, but for a parent-death signal, which posix_spawn cannot
// set.
Result<Process> spawn_process(const LaunchRequest& request) {
  ExecStrings exec(request);
  const bool capture = !request.log_path.empty();
  int log_owned = -1, in_owned = -1, out_owned = -1, keep_owned = -1;
  const int opened = capture ? ::open(request.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
  if (capture && opened < 0) return Status::io_error("opening " + request.log_path + ": " + std::strerror(errno));
  const int log_fd = above_four(opened, log_owned);
  const int in_fd = above_four(request.stdin_fd, in_owned);
  const int out_fd = above_four(request.stdout_fd, out_owned);
  const int keep_fd = above_four(request.inherit_fd, keep_owned);
  if ((capture && log_fd < 0) || (request.stdin_fd >= 0 && in_fd < 0) || (request.stdout_fd >= 0 && out_fd < 0) ||
      (request.inherit_fd >= 0 && keep_fd < 0)) {
    const int err = errno;
    for (int fd : {opened, log_owned, in_owned, out_owned, keep_owned}) {
      if (fd >= 0) ::close(fd);
    }
    return Status::io_error(std::string("duplicating a descriptor for ") + request.argv[0] + ": " + std::strerror(err));
  }

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  if (capture) {
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, log_fd, 1);
    posix_spawn_file_actions_adddup2(&actions, log_fd, 2);
  }
  if (in_fd >= 0) posix_spawn_file_actions_adddup2(&actions, in_fd, 0);
  if (out_fd >= 0) posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  if (keep_fd >= 0) {
    posix_spawn_file_actions_adddup2(&actions, keep_fd, 4);  // dup2 clears close-on-exec
  } else {
    posix_spawn_file_actions_addclose(&actions, 4);
  }
  posix_spawn_file_actions_addclose(&actions, 3);
  posix_spawn_file_actions_addclosefrom_np(&actions, 5);
  if (!request.working_dir.empty()) posix_spawn_file_actions_addchdir_np(&actions, request.working_dir.c_str());
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  sigset_t none, defaults;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  if (request.own_process_group) {
    // Own process group: cancel signals the runner and anything it starts,
    // and a terminal's Ctrl-C to tailord does not reach it.
    flags |= POSIX_SPAWN_SETPGROUP;
    posix_spawnattr_setpgroup(&attr, 0);
  }
  posix_spawnattr_setflags(&attr, flags);
  pid_t pid = -1;
  const int err = ::posix_spawn(&pid, exec.argv[0], &actions, &attr, exec.argv.data(), exec.envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  for (int fd : {opened, log_owned, in_owned, out_owned, keep_owned}) {
    if (fd >= 0) ::close(fd);
  }
  if (err != 0) return Status::failed_precondition("cannot start " + request.argv[0] + ": " + std::strerror(err));
  Process p;
  p.pid = pid;
  p.start_ticks = process_start_ticks(pid).value_or(0);
  return p;
}

}  // namespace

Result<Process> launch_process(const LaunchRequest& request) {
  if (request.argv.empty()) return Status::invalid_argument("empty command");
  if (request.parent_death_signal == 0) return spawn_process(request);
  // Everything the child needs is prepared before fork: after it, only
  // async-signal-safe calls.
  ExecStrings exec(request);
  std::vector<char*>& argv = exec.argv;
  std::vector<char*>& envp = exec.envp;

  const bool capture = !request.log_path.empty();
  const int log_fd = capture ? ::open(request.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
  if (capture && log_fd < 0) return Status::io_error("opening " + request.log_path + ": " + std::strerror(errno));
  const pid_t parent = ::getpid();
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    if (capture) ::close(log_fd);
    return Status::io_error(std::string("pipe: ") + std::strerror(errno));
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    if (capture) ::close(log_fd);
    ::close(report[0]);
    ::close(report[1]);
    return Status::unavailable(std::string("fork: ") + std::strerror(err));
  }
  if (pid == 0) {
    // Own process group: cancel signals the runner and anything it starts,
    // and a terminal's Ctrl-C to tailord does not reach it.
    if (request.own_process_group) ::setpgid(0, 0);
    // The parent may have died between fork and prctl: then the signal
    // would never come.
    if (request.parent_death_signal != 0 &&
        (::prctl(PR_SET_PDEATHSIG, request.parent_death_signal) != 0 || ::getppid() != parent)) {
      _exit(127);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    if (capture) {
      const int null_fd = ::open("/dev/null", O_RDONLY);
      if (null_fd >= 0) ::dup2(null_fd, 0);
      ::dup2(log_fd, 1);
      ::dup2(log_fd, 2);
    }
    if (request.stdin_fd >= 0) ::dup2(request.stdin_fd, 0);
    if (request.stdout_fd >= 0) ::dup2(request.stdout_fd, 1);
    // Out of the way of descriptors 3 and 4 first, whatever its number.
    const int inherit = request.inherit_fd >= 0 ? ::fcntl(request.inherit_fd, F_DUPFD_CLOEXEC, 10) : -1;
    if (request.inherit_fd >= 0 && inherit < 0) {
      const int err = errno;
      (void)!::write(report[1], &err, sizeof err);
      _exit(127);
    }
    const int keep = report[1];
    // Move the report pipe to fd 3 so close_from(4) keeps it (it is CLOEXEC).
    if (keep != 3) {
      ::dup3(keep, 3, O_CLOEXEC);
    }
    if (inherit >= 0) ::dup2(inherit, 4);  // dup2 clears close-on-exec
    close_from(inherit >= 0 ? 5 : 4);
    if (!request.working_dir.empty() && ::chdir(request.working_dir.c_str()) != 0) {
      const int err = errno;
      (void)!::write(3, &err, sizeof err);
      _exit(127);
    }
    ::execve(argv[0], argv.data(), envp.data());
    const int err = errno;
    (void)!::write(3, &err, sizeof err);
    _exit(127);
  }
  // Also in the parent: no window where the group does not exist yet.
  if (request.own_process_group) ::setpgid(pid, pid);
  if (capture) ::close(log_fd);
  ::close(report[1]);
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(report[0], &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  ::close(report[0]);
  if (n == sizeof child_errno) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return Status::failed_precondition("cannot start " + request.argv[0] + ": " + std::strerror(child_errno));
  }
  Process p;
  p.pid = pid;
  p.start_ticks = process_start_ticks(pid).value_or(0);
  return p;
}

Result<std::optional<ProcessExit>> reap_child(pid_t pid) {
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return std::optional<ProcessExit>();
  if (r < 0) {
    if (errno == ECHILD) return Status::not_found("process " + std::to_string(pid) + " is not a child of tailord");
    return Status::io_error(std::string("waitpid: ") + std::strerror(errno));
  }
  ProcessExit e;
  if (WIFEXITED(status)) e.code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
  return std::optional<ProcessExit>(e);
}

Result<ProcessExit> wait_child(pid_t pid) {
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid, &status, 0);
  } while (r < 0 && errno == EINTR);
  if (r < 0) return Status::io_error("waitpid " + std::to_string(pid) + ": " + std::strerror(errno));
  ProcessExit e;
  if (WIFEXITED(status)) e.code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
  return e;
}

std::optional<std::int64_t> process_start_ticks(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string stat = ss.str();
  // The command name (field 2) may hold spaces and parentheses: fields are
  // counted after the last ')'.
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  rest >> field;  // field 3: state
  if (field == "Z" || field == "X") return std::nullopt;
  for (int i = 4; i <= 22; ++i) {
    if (!(rest >> field)) return std::nullopt;
  }
  try {
    return std::stoll(field);
  } catch (...) {
    return std::nullopt;
  }
}

bool process_is(pid_t pid, std::int64_t start_ticks) {
  const auto t = process_start_ticks(pid);
  return t && *t == start_ticks;
}

void signal_group(pid_t pgid, int sig) {
  if (pgid > 1) ::kill(-pgid, sig);
}

}  // namespace tailor::platform
