// `tailor data preview|stats JOB.yaml` and `tailor cache show|prune|clear`:
// run tailor-data (runner/data_main.cpp), which holds the data pipeline
// (tokenizers, chat templates) and the cache's formats this library does
// not link, with the terminal as its output.
#include <ostream>

#include "cli/commands.h"
#include "cli/terminal_child.h"
#include "platform/executable.h"

namespace tailor::cli {

int run_data(const Argv& argv, Streams io) {
  auto tool = platform::find_executable("tailor-data", "", "TAILOR_DATA");
  if (!tool.is_ok()) {
    io.err << "tailor data: " << tool.status().message() << "\n";
    return kExitInvalid;
  }
  std::vector<std::string> command = {*tool};
  command.insert(command.end(), argv.begin(), argv.end());
  return run_in_terminal(command, "data", io);
}

int run_cache(const Argv& argv, Streams io) {
  auto tool = platform::find_executable("tailor-data", "", "TAILOR_DATA");
  if (!tool.is_ok()) {
    io.err << "tailor cache: " << tool.status().message() << "\n";
    return kExitInvalid;
  }
  std::vector<std::string> command = {*tool, "cache"};
  command.insert(command.end(), argv.begin(), argv.end());
  return run_in_terminal(command, "cache", io);
}

}  // namespace tailor::cli
