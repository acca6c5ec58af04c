#include "cli/model_target.h"

#include <filesystem>
#include <ostream>

#include "cli/job_view.h"
#include "cli/rest_client.h"
#include "cli/terminal_child.h"
#include "platform/executable.h"

namespace tailor::cli {
namespace {

// A job's output folder, once the job has succeeded.
Result<std::string> job_output(const Args& args, const std::string& id, const char* command, Streams io,
                               int& exit_code) {
  Remote r = connect_remote(args, command, io);
  if (!r.client) {
    exit_code = r.exit_code;
    return Status::cancelled("");
  }
  auto job = get_json(*r.client, "/v1/jobs/" + url_encode(id));
  if (!job.is_ok()) return job.status().prefixed("no model folder or job " + id);
  const std::string state = job->value("state", std::string());
  if (state != "succeeded") {
    return Status::invalid_argument("job " + id + " has not succeeded (state: " + state +
                                    "); only a finished job has a model");
  }
  const std::string dir = job->value("output_dir", std::string());
  std::error_code ec;
  if (dir.empty() || !std::filesystem::is_directory(dir, ec)) {
    return Status::invalid_argument("job " + id + "'s output folder " + dir +
                                    " is not on this machine; `tailor download " + id +
                                    "` copies it here, then give that folder");
  }
  return dir;
}

}  // namespace

std::string model_folder(const Args& args, const std::string& target, const char* command, Streams io,
                         int& exit_code) {
  std::error_code ec;
  if (std::filesystem::exists(target, ec)) return target;
  exit_code = kExitOk;
  auto dir = job_output(args, target, command, io, exit_code);
  if (dir.is_ok()) return *dir;
  if (exit_code == kExitOk) {
    io.err << "tailor " << command << ": " << dir.status().message() << "\n";
    exit_code = kExitInvalid;
  }
  return "";
}

int run_on_model(const ModelTool& tool, const Argv& argv, Streams io) {
  const std::string help = help_of(tool.usage);
  auto command = parse_command(argv, with_remote_flags(tool.flags), tool.command, help.c_str(), io);
  if (!command.args) return command.exit_code;
  const Args& args = *command.args;
  if (args.positional().size() != 1) {
    io.err << "tailor " << tool.command << ": expected one MODEL_DIR or JOB_ID\n" << help;
    return kExitUsage;
  }
  int exit_code = kExitOk;
  const std::string folder = model_folder(args, args.positional()[0], tool.command, io, exit_code);
  if (folder.empty()) return exit_code;
  auto program = platform::find_executable(tool.program, "", tool.env_var);
  if (!program.is_ok()) {
    io.err << "tailor " << tool.command << ": " << program.status().message() << "\n";
    return kExitInvalid;
  }
  std::vector<std::string> child = {*program, tool.subcommand, folder};
  for (const FlagSpec& f : tool.flags) {
    if (!args.has(f.name)) continue;
    if (!f.takes_value) {
      child.push_back("--" + f.name);
      continue;
    }
    for (const std::string& v : args.all(f.name)) {
      child.push_back("--" + f.name);
      child.push_back(v);
    }
  }
  return run_in_terminal(child, tool.command, io);
}

}  // namespace tailor::cli
