#include "cli/probe_run.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "platform/executable.h"
#include "platform/files.h"
#include "platform/process.h"
#include "platform/signals.h"
#include "runner/protocol/exit_code.h"
#include "runner/protocol/runner_command.h"

namespace tailor::cli {
namespace fs = std::filesystem;

Result<std::string> run_probe(const std::string& plan_json, Streams io) {
  auto runner = platform::find_executable("tailor-runner", "", "TAILOR_RUNNER");
  if (!runner.is_ok()) return Status::unavailable(runner.status().message());
  std::string dir = (fs::temp_directory_path() / "tailor-probe-XXXXXX").string();
  if (::mkdtemp(dir.data()) == nullptr)
    return Status::io_error("cannot create a scratch folder: " + platform::errno_text());
  // The scratch folder goes whatever happens.
  struct Remove {
    std::string dir;
    ~Remove() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } remove{dir};
  const std::string plan_file = (fs::path(dir) / "plan.json").string();
  TAILOR_RETURN_IF_ERROR(platform::write_file_atomic(plan_file, plan_json));
  runner::RunnerCommand c;
  c.plan = plan_file;
  c.out = dir;
  c.probe_only = true;
  platform::LaunchRequest req;
  req.argv = {*runner};
  for (std::string& a : runner::runner_args(c))
    req.argv.push_back(std::move(a));
  req.own_process_group = false;
  req.parent_death_signal = SIGTERM;
  io.out.flush();
  io.err.flush();
  auto child = platform::launch_process(req);
  if (!child.is_ok()) return Status::unavailable(child.status().message());
  Result<platform::ProcessExit> exit = Status::internal("not waited");
  {
    platform::SignalForwarder forward(child->pid);
    exit = platform::wait_child(child->pid);
  }
  if (!exit.is_ok()) return exit.status();
  if (exit->signal != 0 || exit->code != runner::exit_status(runner::RunnerExit::kOk)) {
    return Status::internal("tailor-runner could not probe the plan (exit " +
                            std::to_string(exit->signal != 0 ? 128 + exit->signal : exit->code) + ")");
  }
  std::ifstream in(fs::path(dir) / "plan.probed.json", std::ios::binary);
  if (!in) return Status::internal("tailor-runner wrote no probed plan");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace tailor::cli
