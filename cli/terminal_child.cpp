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
  auto exit = platform::wait_child(child->pid);
  if (!exit.is_ok()) {
    io.err << "tailor " << command << ": " << exit.status().message() << "\n";
    return kExitInvalid;
  }
  if (exit->signal != 0) return 128 + exit->signal;
  return exit->code;
}

}  // namespace tailor::cli
