// `tailor run JOB.yaml`: plan and train in the foreground, without a daemon.
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>

#include "cli/calibration.h"
#include "cli/commands.h"
#include "cli/spec_options.h"
#include "core/args.h"
#include "dsl/spec_loader.h"
#include "platform/executable.h"
#include "platform/files.h"
#include "platform/process.h"
#include "platform/signals.h"
#include "runner/protocol/capabilities.h"
#include "runner/protocol/exit_code.h"
#include "runner/protocol/runner_command.h"
#include "strategies/hardware.h"
#include "strategies/plan_document.h"
#include "strategies/planner.h"

namespace tailor::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kRunHelp = R"(usage: tailor run [OPTIONS] JOB.yaml

Plans the job for this machine (or --gpus) and trains it in the foreground
with tailor-runner, showing step, loss, tokens/s, memory and ETA. The run
folder gets plan.json, metrics.jsonl, events.jsonl, checkpoints/ (under
LoRA or QLoRA only the adapters and their optimizer states), and either
model/ (a full fine-tune: a Hugging Face folder for transformers'
from_pretrained or another job's model.path) or, with LoRA or QLoRA,
adapter/ (PEFT's layout), plus the merged model/ with output.merge: true.
With strategy.probe: K the runner first measures the plan's K fastest
candidates and trains the fastest measured (plan.probed.json records it).

options:
  --out DIR            run folder (default: runs/NAME); one holding an earlier
                       run's checkpoints is refused unless --resume
  --resume             continue from the newest checkpoint in the run folder
  --memory-limit SIZE  byte budget for the training device's tensors (default:
                       the plan's); exceeding it is an out-of-memory
  --device DEV         auto (default: CUDA for a GPU plan, an error saying why
                       where there is none; the CPU for a CPU plan or with
                       resources.device: cpu), cpu, cuda or cuda:N
  --gpus SPEC          plan for this hardware instead of detecting it
  --calibration FILE   the calibration store (tailor calibration --help): the
                       plan takes this machine's measured factors, and the
                       run (its probe, strategy.probe, and a finished run's
                       peak and speed) is recorded there
  --no-calibration     neither read nor record the store
  --set KEY=VALUE      override a spec key (repeatable)
  --catalog DIR        use models.yaml and gpus.yaml from DIR
  --no-check-files     do not require data files to exist (nor read them) when
                       planning
  -h, --help           show this help

exit codes: 0 trained, 1 invalid spec or data, 2 bad command line,
3 does not fit (at planning or out of memory while training), 4 cancelled,
5 training failed
)";

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> read_lines(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    lines.push_back(std::move(line));
  return lines;
}

}  // namespace

int run_run(const Argv& argv, Streams io) {
  auto command =
      parse_command(argv,
                    with_calibration_flags(with_spec_flags(
                        {{"out", true}, {"resume", false}, {"memory-limit", true}, {"device", true}, {"gpus", true}})),
                    "run", kRunHelp, io);
  if (!command.args) return command.exit_code;
  const Args& args = *command.args;
  if (args.positional().size() != 1) {
    io.err << "tailor run: expected one spec file\n" << kRunHelp;
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
  for (const Status& s : {dsl::check_weights(spec), dsl::check_tracking(spec), runner::check_pins_executable(spec)}) {
    if (!s.is_ok()) {
      io.err << file << ": error: " << s.message() << "\n";
      return kExitInvalid;
    }
  }

  const dsl::Catalog& catalog = options->catalog();
  auto hw = hardware_for(spec, args, catalog);
  if (!hw.is_ok()) {
    io.err << "tailor run: " << hw.status().message() << "\n";
    return kExitInvalid;
  }
  // tailor-runner trains it: its memory behaviour, whatever runtime the
  // spec predicts for other tools.
  spec.planner.runtime = dsl::Runtime::kTailor;
  strategies::PlanOptions popts = runner::runner_plan_options(&catalog);
  const std::string calibration = calibration_path(args);
  if (!args.has("gpus")) popts.calibration = calibration_for(calibration, spec, *hw, io);
  const strategies::Plan plan = strategies::plan_job(spec, *hw, popts);
  for (const std::string& e : plan.errors) io.err << file << ": error: " << e << "\n";
  if (!plan.errors.empty()) return kExitInvalid;
  if (!plan.fits) {
    io.err << "tailor run: " << spec.name << " " << plan.no_fit_reason() << " (the same plan: 'tailor plan --explain "
           << file << "')\n";
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
  if (Status w = platform::write_file_atomic(plan_file.string(), strategies::plan_to_json(plan, spec)); !w.is_ok()) {
    io.err << "tailor run: " << w.message() << "\n";
    return kExitInvalid;
  }
  auto runner = platform::find_executable("tailor-runner", "", "TAILOR_RUNNER");
  if (!runner.is_ok()) {
    io.err << "tailor run: " << runner.status().message() << "\n";
    return kExitRunFailed;
  }
  io.err << "tailor run: " << spec.name << " on " << hw->describe() << ": " << plan.chosen.strategy.describe() << ", "
         << plan.chosen.memory.per_device.total().to_string() << " of " << plan.budget_per_device.to_string()
         << " estimated\n";
  if (plan.calibration) {
    io.err << "tailor run: calibrated from " << plan.calibration->runs << " runs on " << plan.calibration->key
           << " (peak x" << plan.calibration->memory << ", speed x" << plan.calibration->speed;
    if (plan.calibration->busy > 0) io.err << "; " << plan.calibration->busy << " busy speeds left out";
    io.err << ")\n";
  }
  if (!plan.probe_limited.empty()) io.err << "tailor run: strategy.probe: " << plan.probe_limited << "\n";
  io.err << "tailor run: writing to " << out.string() << "\n";
  io.out.flush();
  io.err.flush();

  platform::LaunchRequest req;
  runner::RunnerCommand runner_command;
  runner_command.plan = plan_file.string();
  runner_command.out = out.string();
  runner_command.resume = args.has("resume");
  if (args.has("memory-limit")) runner_command.memory_limit = args.get("memory-limit");
  if (args.has("device")) runner_command.device = args.get("device");
  req.argv = {*runner};
  for (std::string& a : runner::runner_args(runner_command)) req.argv.push_back(std::move(a));
  // The runner shares this terminal and process group (a terminal's Ctrl-C
  // reaches both); other signals are forwarded, and it dies with us.
  req.own_process_group = false;
  req.parent_death_signal = SIGTERM;
  auto child = platform::launch_process(req);
  if (!child.is_ok()) {
    io.err << "tailor run: " << child.status().message() << "\n";
    return kExitRunFailed;
  }
  Result<platform::ProcessExit> exit = Status::internal("not waited");
  {
    platform::SignalForwarder forward(child->pid);
    exit = platform::wait_child(child->pid);
  }
  if (!exit.is_ok()) {
    io.err << "tailor run: " << exit.status().message() << "\n";
    return kExitRunFailed;
  }
  if (exit->signal != 0) {
    io.err << "tailor run: tailor-runner was killed by signal " << exit->signal << " (" << strsignal(exit->signal)
           << ")\n";
    return kExitRunFailed;
  }
  const auto code = runner::runner_exit_from_status(exit->code);
  if (!code) return kExitRunFailed;
  // What this machine measured, for later plans: the probe when this run
  // made one, and a finished run's peak and speed.
  if (!args.has("gpus")) {
    const fs::path probed = out / "plan.probed.json";
    const bool probed_now = spec.strategy.probe > 0 && fs::exists(probed) &&
                            fs::last_write_time(probed, ec) >= fs::last_write_time(plan_file, ec);
    const std::string trained_plan =
        read_text(probed_now || (args.has("resume") && fs::exists(probed)) ? probed : plan_file);
    std::vector<runner::CalibrationRun> runs;
    if (probed_now) runs = runner::probe_calibration(trained_plan);
    if (*code == runner::RunnerExit::kOk) {
      if (auto job = runner::run_calibration(trained_plan, read_lines(out / "metrics.jsonl"))) runs.push_back(*job);
    }
    record_calibration(calibration, runs, io);
  }
  switch (*code) {
    case runner::RunnerExit::kOk:
      // The folders transformers and PEFT load (model/ holds a LoRA run's
      // merged model when output.merge asked for it).
      io.err << "tailor run: done;";
      if (std::filesystem::is_directory(out / "adapter")) {
        io.err << " adapter at " << (out / "adapter").string() << " (PEFT),";
      }
      if (std::filesystem::is_directory(out / "model")) {
        io.err << " model at " << (out / "model").string() << " (Hugging Face),";
      }
      io.err << " metrics in " << (out / "metrics.jsonl").string() << "\n";
      return kExitOk;
    case runner::RunnerExit::kBadInput: return kExitInvalid;
    case runner::RunnerExit::kOutOfMemory:
      io.err << "tailor run: out of memory while training (see " << (out / "events.jsonl").string() << ")\n";
      return kExitNoFit;
    case runner::RunnerExit::kCancelled:
      io.err << "tailor run: stopped; resume with --resume\n";
      return kExitCancelled;
    case runner::RunnerExit::kDiverged:
      io.err << "tailor run: training diverged (a non-finite loss; see " << (out / "events.jsonl").string()
             << "): a lower training.lr or precision bf16/fp32 rather than fp16 may help\n";
      return kExitRunFailed;
    case runner::RunnerExit::kFailure: return kExitRunFailed;
  }
  return kExitRunFailed;
}

}  // namespace tailor::cli
