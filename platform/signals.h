// Passing the signals that stop a foreground command on to the child doing
// its work, so that `tailor run` stopped by SIGTERM (a scheduler, systemd,
// kill) or SIGINT stops its runner too, which checkpoints and exits, and
// no runner is left training under PID 1.
#pragma once

#include <sys/types.h>

#include <csignal>

namespace tailor::platform {

// While alive, SIGINT, SIGTERM and SIGHUP received by this process are sent
// to `child` (the first one also to its process group when it leads one),
// instead of their default action; the previous handlers are restored on
// destruction. One forwarder at a time per process.
class SignalForwarder {
 public:
  explicit SignalForwarder(pid_t child);
  ~SignalForwarder();
  SignalForwarder(const SignalForwarder&) = delete;
  SignalForwarder& operator=(const SignalForwarder&) = delete;

  // The first signal forwarded, or 0.
  int received() const;

 private:
  struct sigaction old_int_{}, old_term_{}, old_hup_{};
};

}  // namespace tailor::platform
