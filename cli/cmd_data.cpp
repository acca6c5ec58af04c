// `tailor data preview JOB.yaml`: runs tailor-data (runner/data_main.cpp),
// which holds the data pipeline (tokenizers, chat templates) this library
// does not link, with the terminal as its output.
#include <csignal>
#include <ostream>

#include "cli/commands.h"
#include "platform/executable.h"
#include "platform/process.h"

namespace tailor::cli {

int run_data(const Argv& argv, Streams io) {
  auto tool = platform::find_executable("tailor-data", "", "TAILOR_DATA");
  if (!tool.is_ok()) {
    io.err << "tailor data: " << tool.status().message() << "\n";
    return kExitInvalid;
  }
  platform::LaunchRequest req;
  req.argv = {*tool};
  req.argv.insert(req.argv.end(), argv.begin(), argv.end());
  req.own_process_group = false;  // Ctrl-C reaches it as it reaches us
  req.parent_death_signal = SIGTERM;
  io.out.flush();
  io.err.flush();
  auto child = platform::launch_process(req);
  if (!child.is_ok()) {
    io.err << "tailor data: " << child.status().message() << "\n";
    return kExitInvalid;
  }
  auto exit = platform::wait_child(child->pid);
  if (!exit.is_ok()) {
    io.err << "tailor data: " << exit.status().message() << "\n";
    return kExitInvalid;
  }
  if (exit->signal != 0) return 128 + exit->signal;
  return exit->code;
}

}  // namespace tailor::cli
