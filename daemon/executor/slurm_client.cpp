#include "daemon/executor/slurm_client.h"

#include "core/text.h"
#include "platform/command.h"

namespace tailor::daemon::slurm {

Result<std::string> Client::run(const std::string& program, const std::vector<std::string>& args) const {
  platform::CommandRequest req;
  req.argv.push_back(options_.bin_dir.empty() ? program : options_.bin_dir + "/" + program);
  req.argv.insert(req.argv.end(), args.begin(), args.end());
  req.env = options_.env;
  req.timeout_seconds = options_.timeout_seconds;
  auto r = platform::run_command(req);
  if (!r.is_ok()) return Status::unavailable("Slurm: " + r.status().message());
  if (!r->ok()) {
    std::string words(trim(r->err.empty() ? r->out : r->err));
    if (const auto nl = words.find('\n'); nl != std::string::npos) words.resize(nl);
    return Status::unavailable(
        "Slurm: " + program + " failed (" +
        (r->signal ? "signal " + std::to_string(r->signal) : "exit " + std::to_string(r->exit_code)) + ")" +
        (words.empty() ? "" : ": " + words));
  }
  return std::move(r->out);
}

Result<Partition> Client::partition(const std::string& name) const {
  TAILOR_ASSIGN_OR_RETURN(std::string parts, run("scontrol", {"show", "partition", "-o"}));
  TAILOR_ASSIGN_OR_RETURN(std::string nodes, run("scontrol", {"show", "node", "-o"}));
  return parse_partition(parts, nodes, name);
}

Result<std::string> Client::submit(const std::string& script_path) const {
  TAILOR_ASSIGN_OR_RETURN(std::string out, run("sbatch", {"--parsable", script_path}));
  // "ID" or "ID;cluster"
  std::string id(trim(out));
  id = id.substr(0, id.find(';'));
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos) {
    return Status::internal("sbatch printed \"" + std::string(trim(out)) + "\", not a job id");
  }
  return id;
}

Result<std::vector<Job>> Client::queue() const {
  TAILOR_ASSIGN_OR_RETURN(std::string out, run("squeue", {"-h", "-t", "all", "-o", kSqueueFormat}));
  return parse_squeue(out);
}

Result<std::optional<Job>> Client::finished(const std::string& id) const {
  TAILOR_ASSIGN_OR_RETURN(std::string out, run("sacct", {"-c", "-n", "-P", "-o", kSacctFields, "-j", id}));
  return parse_sacct(out, id);
}

Status Client::cancel(const std::string& id, const std::string& signal) const {
  std::vector<std::string> args;
  if (!signal.empty()) args.push_back("--signal=" + signal);
  args.push_back(id);
  return run("scancel", args).status();
}

}  // namespace tailor::daemon::slurm
