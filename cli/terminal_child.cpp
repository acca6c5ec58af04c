#include "cli/terminal_child.h"

#include <csignal>
#include <ostream>

#include "platform/process.h"

namespace tailor::cli {

int run_in_terminal(const std::vector<std::string>& argv, const char* command, Streams io) {
  platform::LaunchRequest req;
  req.argv = argv;
  req.own_process_group = false;
  req.parent_death_signal = SIGTERM;
  io.out.flush();
  io.err.flush();
  auto child = platform::launch_process(req);
  if (!child.is_ok()) {
    io.err << "tailor " << command << ": " << child.status().message() << "\n";
    return kExitInvalid;
  }
  // A terminal's Ctrl-C reaches the child too (same group): it decides how
  // to end, and its exit code is ours, as system() does it. Set after the
  // fork, so that the child does not inherit the ignored dispositions.
  struct sigaction ignore {}, old_int{}, old_quit{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGINT, &ignore, &old_int);
  sigaction(SIGQUIT, &ignore, &old_quit);
  auto exit = platform::wait_child(child->pid);
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGQUIT, &old_quit, nullptr);
  if (!exit.is_ok()) {
    io.err << "tailor " << command << ": " << exit.status().message() << "\n";
    return kExitInvalid;
  }
  if (exit->signal != 0) return 128 + exit->signal;
  return exit->code;
}

}  // namespace tailor::cli
