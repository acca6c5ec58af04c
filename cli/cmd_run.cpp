// `tailor run JOB.yaml`: plan and train in the foreground, without a daemon.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>

#include "cli/commands.h"
#include "cli/spec_options.h"
#include "core/args.h"
#include "dsl/spec_loader.h"
#include "strategies/hardware.h"
#include "strategies/plan_document.h"
#include "strategies/planner.h"

namespace tailor::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kHelp = R"(usage: tailor run [OPTIONS] JOB.yaml

Plans the job for this machine (or --gpus) and trains it in the foreground
with tailor-runner, showing step, loss, tokens/s, memory and ETA. The run
folder gets plan.json, metrics.jsonl, events.jsonl, checkpoints/ and model.pt.

options:
  --out DIR            run folder (default: runs/NAME); one holding an earlier
                       run's checkpoints is refused unless --resume
  --resume             continue from the newest checkpoint in the run folder
  --memory-limit SIZE  byte budget for the training device's tensors (default:
                       the plan's); exceeding it is an out-of-memory
  --device DEV         auto (default: CUDA for a GPU plan when LibTorch has
                       it, else the CPU), cpu, cuda or cuda:N
  --gpus SPEC          plan for this hardware instead of detecting it
  --set KEY=VALUE      override a spec key (repeatable)
  --catalog DIR        use models.yaml and gpus.yaml from DIR
  --no-check-files     do not require data files to exist when planning
  -h, --help           show this help

exit codes: 0 trained, 1 invalid spec or data, 2 bad command line,
3 does not fit (at planning or out of memory while training), 4 cancelled,
5 training failed
)";

// Techniques tailor-runner does not implement yet: the planner must not pick
// them for a local run. (LoRA, QLoRA and adamw_8bit it does.)
constexpr const char* kNotInRunner[] = {"zero1", "zero2", "zero3", "offload_optimizer", "offload_params"};

std::string runner_path() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path beside = self.parent_path() / "tailor-runner";
    if (fs::exists(beside)) return beside.string();
  }
  return "tailor-runner";  // from PATH
}

}  // namespace

int run_run(const Argv& argv, Streams io) {
  auto command = parse_command(argv, with_spec_flags({{"out", true}, {"resume", false}, {"memory-limit", true}, {"device", true}, {"gpus", true}}), "run", kHelp, io);
  if (!command.args) return command.exit_code;
  const Args& args = *command.args;
  if (args.positional().size() != 1) {
    io.err << "tailor run: expected one spec file\n" << kHelp;
    return kExitUsage;
  }
  auto options = spec_options(args);
  if (!options.is_ok()) {
    io.err << "tailor run: " << options.status().message() << "\n";
    return kExitInvalid;
  }
  const std::string& file = args.positional()[0];
  const dsl::LoadedSpec loaded = dsl::load_job_spec(file, options->load);
  io.err << loaded.diagnostics.to_string();
  if (!loaded.ok()) return kExitInvalid;
  dsl::JobSpec spec = *loaded.spec;
  for (const char* t : kNotInRunner) {
    if (std::find(spec.strategy.forbid.begin(), spec.strategy.forbid.end(), t) == spec.strategy.forbid.end()) {
      spec.strategy.forbid.emplace_back(t);
    }
  }
  if ((spec.strategy.zero_stage && *spec.strategy.zero_stage > 0) ||
      (spec.strategy.offload && *spec.strategy.offload != dsl::Offload::kNone)) {
    io.err << file << ": error: the spec pins ZeRO or offload, which tailor-runner does not implement yet\n";
    return kExitInvalid;
  }

  const dsl::Catalog& catalog = options->catalog();
  auto hw = hardware_for(spec, args, catalog);
  if (!hw.is_ok()) {
    io.err << "tailor run: " << hw.status().message() << "\n";
    return kExitInvalid;
  }
  strategies::PlanOptions popts;
  popts.catalog = &catalog;
  const strategies::Plan plan = strategies::plan_job(spec, *hw, popts);
  for (const std::string& e : plan.errors) io.err << file << ": error: " << e << "\n";
  if (!plan.errors.empty()) return kExitInvalid;
  if (!plan.fits) {
    io.err << "tailor run: " << spec.name << " does not fit " << hw->describe() << "; short by "
           << (plan.shortfall + plan.host_shortfall).to_string() << " (see 'tailor plan " << file << "')\n";
    return kExitNoFit;
  }

  const fs::path out = args.has("out") ? fs::path(args.get("out")) : fs::path("runs") / spec.name;
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) {
    io.err << "tailor run: cannot create " << out.string() << ": " << ec.message() << "\n";
    return kExitInvalid;
  }
  const fs::path plan_file = out / "plan.json";
  {
    std::ofstream f(out / "plan.json.tmp", std::ios::trunc);
    f << strategies::plan_to_json(plan, spec);
    f.flush();
    if (!f) {
      io.err << "tailor run: cannot write " << plan_file.string() << "\n";
      return kExitInvalid;
    }
  }
  fs::rename(out / "plan.json.tmp", plan_file, ec);
  io.err << "tailor run: " << spec.name << " on " << hw->describe() << ": " << plan.chosen.strategy.describe() << ", "
         << plan.chosen.memory.per_device.total().to_string() << " of " << plan.budget_per_device.to_string()
         << " estimated\n";
  io.err << "tailor run: writing to " << out.string() << "\n";
  io.out.flush();
  io.err.flush();

  std::vector<std::string> cmd = {runner_path(), "--plan", plan_file.string(), "--out", out.string()};
  if (args.has("resume")) cmd.push_back("--resume");
  if (args.has("memory-limit")) {
    cmd.push_back("--memory-limit");
    cmd.push_back(args.get("memory-limit"));
  }
  if (args.has("device")) {
    cmd.push_back("--device");
    cmd.push_back(args.get("device"));
  }
  const pid_t pid = fork();
  if (pid < 0) {
    io.err << "tailor run: fork: " << std::strerror(errno) << "\n";
    return kExitRunFailed;
  }
  if (pid == 0) {
    std::vector<char*> c_args;
    for (std::string& a : cmd) c_args.push_back(a.data());
    c_args.push_back(nullptr);
    execvp(c_args[0], c_args.data());
    std::fprintf(stderr, "tailor run: cannot start %s: %s\n", c_args[0], std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status)) {
    io.err << "tailor run: tailor-runner was killed by signal " << WTERMSIG(status) << "\n";
    return kExitRunFailed;
  }
  switch (WEXITSTATUS(status)) {
    case 0:
      io.err << "tailor run: done; model at " << (out / "model.pt").string() << ", metrics in "
             << (out / "metrics.jsonl").string() << "\n";
      return kExitOk;
    case 2: return kExitInvalid;
    case 3:
      io.err << "tailor run: out of memory while training (see " << (out / "events.jsonl").string() << ")\n";
      return kExitNoFit;
    case 4: return kExitCancelled;
    default: return kExitRunFailed;
  }
}

}  // namespace tailor::cli
