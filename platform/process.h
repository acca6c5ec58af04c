// Child processes (tailor-runner, started by `tailor run` and by tailord):
// launched so that "cannot start" is an error and not an exit status
// (posix_spawn's result, or an error pipe after a fork), in their own
// process group with output captured to a file
// (tailord) or in the caller's group and terminal (`tailor run`); reaped
// when they are this process' children, and recognised after a restart by
// pid plus kernel start time (a reused pid has another start time).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace tailor::platform {

struct LaunchRequest {
  std::vector<std::string> argv;           // argv[0]: the executable's path
  std::map<std::string, std::string> env;  // added to (or replacing in) the daemon's environment
  std::string log_path;                    // stdout and stderr, appended; empty: inherited
  std::string working_dir;                 // empty: the caller's
  bool own_process_group = true;           // false: stays in the caller's group (and terminal)
  int parent_death_signal = 0;             // sent to the child when this process dies; 0 = none
  // A descriptor the child keeps across exec, as descriptor 4 (a FileLock's,
  // so that the lock lives as long as the child); -1: none.
  int inherit_fd = -1;
  // Descriptors that become the child's stdin and stdout (the ends of pipes
  // to speak with it), in place of /dev/null and the log or what this
  // process has; -1: none.
  int stdin_fd = -1;
  int stdout_fd = -1;
};

struct Process {
  pid_t pid = -1;              // also the process group id
  std::int64_t start_ticks = 0;  // /proc/PID/stat field 22
};

// posix_spawn, or fork (+ setpgid) + exec where a parent-death signal is
// asked for (posix_spawn cannot set one): the same child either way. Every
// descriptor but 0-2 (and inherit_fd) is closed in the child
// (a daemon's listening socket and database must not leak into a runner). Fails
// with the reason when the executable cannot be started (reported by the
// child through a close-on-exec pipe, so "no such file" is not a job exit).
Result<Process> launch_process(const LaunchRequest& request);

struct ProcessExit {
  int code = -1;    // exit status, or -1 when killed by a signal
  int signal = 0;   // the signal that killed it, or 0
};

// Child processes: the exit when `pid` has ended (reaping it), nullopt while
// it runs. NotFound when `pid` is not a child of this process.
Result<std::optional<ProcessExit>> reap_child(pid_t pid);

// Waits for the child `pid` to end (through EINTR) and reaps it.
Result<ProcessExit> wait_child(pid_t pid);

// The kernel start time of `pid`, or nullopt when it does not exist or is a
// zombie.
std::optional<std::int64_t> process_start_ticks(pid_t pid);

// True when `pid` exists, is not a zombie and started at `start_ticks`.
bool process_is(pid_t pid, std::int64_t start_ticks);

// kill(-pgid, sig); quietly ignores a group that is already gone.
void signal_group(pid_t pgid, int sig);

}  // namespace tailor::platform
