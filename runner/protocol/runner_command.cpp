#include "runner/protocol/runner_command.h"

#include "core/args.h"

namespace tailor::runner {
namespace {

void put(std::vector<std::string>& out, const char* flag, const std::optional<std::string>& v) {
  if (!v) return;
  out.push_back(flag);
  out.push_back(*v);
}

std::optional<std::string> get(const Args& a, const char* flag) {
  return a.has(flag) ? std::optional<std::string>(a.get(flag)) : std::nullopt;
}

}  // namespace

std::vector<std::string> runner_args(const RunnerCommand& c) {
  std::vector<std::string> out;
  if (!c.plan.empty()) out.insert(out.end(), {"--plan", c.plan});
  if (!c.out.empty()) out.insert(out.end(), {"--out", c.out});
  if (c.resume) out.push_back("--resume");
  put(out, "--memory-limit", c.memory_limit);
  put(out, "--device", c.device);
  put(out, "--threads", c.threads);
  put(out, "--cache-dir", c.cache_dir);
  if (c.progress) out.push_back("--progress");
  if (c.quiet) out.push_back("--quiet");
  put(out, "--export", c.export_checkpoint);
  if (c.merge) out.push_back("--merge");
  if (c.probe) out.push_back("--probe");
  if (c.probe_only) out.push_back("--probe-only");
  put(out, "--probe-candidate", c.probe_candidate);
  if (c.append_events) out.push_back("--append-events");
  if (c.version) out.push_back("--version");
  if (c.help) out.push_back("--help");
  return out;
}

Result<RunnerCommand> parse_runner_args(const std::vector<std::string>& args) {
  TAILOR_ASSIGN_OR_RETURN(Args a, Args::parse(args, {{"plan", true},
                                                     {"out", true},
                                                     {"resume", false},
                                                     {"memory-limit", true},
                                                     {"threads", true},
                                                     {"device", true},
                                                     {"cache-dir", true},
                                                     {"progress", false},
                                                     {"quiet", false},
                                                     {"probe", false},
                                                     {"probe-only", false},
                                                     {"probe-candidate", true},
                                                     {"append-events", false},
                                                     {"export", true},
                                                     {"merge", false},
                                                     {"version", false},
                                                     {"help", false, false, 'h'}}));
  if (!a.positional().empty()) {
    return Status::invalid_argument("unexpected argument '" + a.positional().front() + "'");
  }
  RunnerCommand c;
  c.plan = a.get("plan");
  c.out = a.get("out");
  c.resume = a.has("resume");
  c.memory_limit = get(a, "memory-limit");
  c.device = get(a, "device");
  c.threads = get(a, "threads");
  c.cache_dir = get(a, "cache-dir");
  c.progress = a.has("progress");
  c.quiet = a.has("quiet");
  c.export_checkpoint = get(a, "export");
  c.merge = a.has("merge");
  c.probe = a.has("probe");
  c.probe_only = a.has("probe-only");
  c.probe_candidate = get(a, "probe-candidate");
  c.append_events = a.has("append-events");
  c.version = a.has("version");
  c.help = a.has("help");
  return c;
}

}  // namespace tailor::runner
