// tailor-runner: the LibTorch training worker. Runs a plan document and
// reports through files (metrics.jsonl, events.jsonl) and its exit code.
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <thread>

#include "core/units.h"
#include "runner/data/file_io.h"
#include "runner/data/token_cache.h"
#include "runner/dist/launcher.h"
#include "runner/dist/rank_env.h"
#include "runner/protocol/exit_code.h"
#include "runner/protocol/heartbeat.h"
#include "runner/protocol/launch_env.h"
#include "runner/protocol/plan_reader.h"
#include "runner/protocol/runner_command.h"
#include "runner/torch/export_command.h"
#include "runner/torch/generate_command.h"
#include "runner/torch/heap_policy.h"
#include "runner/torch/serve_command.h"
#include "runner/torch/trainer.h"
#include "runner/torch_probe.h"

namespace {

constexpr const char* kHelp = R"(usage: tailor-runner --plan PLAN.json --out DIR [OPTIONS]
       tailor-runner generate MODEL [OPTIONS] (tailor-runner generate --help)
       tailor-runner serve MODEL [OPTIONS] (tailor-runner serve --help)
       tailor-runner export MODEL -o DIR [OPTIONS] (tailor-runner export --help)
       tailor-runner --probe | --version | --help

Trains the job of a plan document (tailor plan --output json) with its
strategy, writing DIR/metrics.jsonl (one line per step: loss, lr, grad_norm,
tokens/s, memory by component), DIR/events.jsonl (start, checkpoint, resume,
oom, cancelled, error, done; checkpoint_skipped, nonfinite_loss),
DIR/checkpoints/ (verified at resume: a damaged one is set aside for the
one before; under LoRA or QLoRA they hold only the adapters, their optimizer
states and the base's fingerprint), and the output: under LoRA or QLoRA
DIR/adapter/ (PEFT's layout), and the model as a Hugging Face folder
DIR/model/ (config.json + model.safetensors, or shards and an index) for a
full fine-tune or with output.merge: true. With model.path in the spec,
training starts from that folder's safetensors weights.

options:
  --plan FILE          the plan document to run
  --out DIR            output folder (created)
  --resume             continue from the newest checkpoint in DIR
  --device DEV         auto (default), cpu, cuda or cuda:N. auto follows the
                       spec's resources.device: a GPU plan on CUDA device 0
                       (exit 2 saying why where there is none), a CPU plan
                       or resources.device: cpu on the CPU
  --memory-limit SIZE  byte budget for the training device's tensors, e.g.
                       300MiB; 0 = none. Default: the plan's budget when the
                       device is the plan's kind (a CPU plan on the CPU, a GPU
                       plan on a GPU). Exceeding it fails the allocation as
                       the device running out would.
  --threads N          intra-op threads (default: every core)
  --cache-dir DIR      where tokenized data files and a precomputed DPO
                       reference's log-probabilities are cached (default
                       $TAILOR_CACHE_DIR, else $XDG_CACHE_HOME/tailor/tokens,
                       else ~/.cache/tailor/tokens); an unusable folder means
                       tokenizing and scoring in memory, with a warning
  --progress           redraw a progress line on stderr (default on a terminal)
  --quiet              no progress output
  --probe              print LibTorch's version, devices and matmul rates
  --version            print the version and which build of the runner runs
  --probe-only         measure the plan's probe candidates (strategy.probe),
                       write OUT/plan.probed.json and stop before training
  --export CHECKPOINT  write the model of a checkpoint folder (e.g.
                       DIR/checkpoints/step-000500, sharded or not, from any
                       rank count) to --out as the end of training does:
                       under LoRA adapter/, and model/ (Hugging Face) for a
                       full fine-tune or with output.merge; one process on
                       the CPU unless --device
  --merge              with --export: write the merged model/ too, whatever
                       output.merge says

Ranks: a plan for several ranks (strategy.num_gpus > 1) starts one process
per rank and supervises them as one job, the cores split between them; with
RANK and WORLD_SIZE set (torchrun, srun, a Kubernetes Job) this process is
that rank and meets the others at MASTER_ADDR:MASTER_PORT (rank 0 listens;
under torchrun, whose agent holds MASTER_PORT, at MASTER_PORT + 1).
TAILOR_RENDEZVOUS_TIMEOUT (seconds, default 300) bounds the wait for them.
With strategy.probe the launcher first starts the ranks together for each
candidate (--probe-candidate I and --append-events are its flags to them).

Builds: with the CUDA toolkit, tailor-runner runs one of two builds beside
it, tailor-runner-cuda where the NVIDIA driver (libcuda.so.1) loads and
tailor-runner-cpu (LibTorch's CPU libraries only: it starts faster and
maps 350 MB less) where it does not. TAILOR_RUNNER_VARIANT=cuda or cpu
chooses one (auto, the default, goes by the driver).

CUDA kernels: TAILOR_CUDA_KERNELS selects the runner's own CUDA kernels
(verified, the default: those a GPU run has verified; none; all; or names
from rms_norm,rope,swiglu,geglu,cross_entropy,adamw,nf4_dequantize); a CUDA
run's start event lists those in use.

exit codes: 0 done, 1 failure, 2 bad input (never retried), 3 out of memory
(re-plan), 4 cancelled (SIGTERM/SIGINT; a checkpoint was written)
)";

}  // namespace

int main(int argc, char** argv) {
  using namespace tailor;
  runner::keep_freed_memory();
  if (argc > 1 && std::string(argv[1]) == "generate") {
    return runner::run_generate_command(std::vector<std::string>(argv + 2, argv + argc), std::cout, std::cerr);
  }
  if (argc > 1 && std::string(argv[1]) == "export") {
    return runner::run_export_command(std::vector<std::string>(argv + 2, argv + argc), std::cout, std::cerr);
  }
  if (argc > 1 && std::string(argv[1]) == "serve") {
    return runner::run_serve_command(std::vector<std::string>(argv + 2, argv + argc), std::cin, std::cout, std::cerr);
  }
  auto parsed = runner::parse_runner_args(std::vector<std::string>(argv + 1, argv + argc));
  if (!parsed.is_ok()) {
    std::cerr << "tailor-runner: " << parsed.status().message() << "\n" << kHelp;
    return runner::exit_status(runner::RunnerExit::kBadInput);
  }
  const runner::RunnerCommand& args = *parsed;
  if (args.help) {
    std::cout << kHelp;
    return runner::exit_status(runner::RunnerExit::kOk);
  }
  if (args.version) {
    std::cout << "tailor-runner 0.1.0 (" << (runner::cuda_path_built() ? "CUDA build" : "CPU-only build") << ")\n";
    return runner::exit_status(runner::RunnerExit::kOk);
  }
  if (args.probe) {
    auto probe = runner::probe_torch();
    if (!probe.is_ok()) {
      std::cerr << "tailor-runner: " << probe.status().to_string() << "\n";
      return runner::exit_status(runner::RunnerExit::kFailure);
    }
    std::cout << probe->to_json() << "\n";
    return runner::exit_status(runner::RunnerExit::kOk);
  }
  if (args.plan.empty() || args.out.empty()) {
    std::cerr << "tailor-runner: --plan and --out are required\n" << kHelp;
    return runner::exit_status(runner::RunnerExit::kBadInput);
  }
  auto config = runner::read_plan_file(args.plan);
  if (!config.is_ok()) {
    std::cerr << "tailor-runner: " << config.status().message() << "\n";
    return runner::exit_status(runner::RunnerExit::kBadInput);
  }
  if (const char* root = std::getenv(runner::kSpecRootEnv)) {
    if (Status s = runner::data::set_read_root(root); !s.is_ok()) {
      std::cerr << "tailor-runner: " << s.message() << "\n";
      return runner::exit_status(runner::RunnerExit::kBadInput);
    }
  }
  auto rank = runner::dist::rank_env_from_environment();
  if (!rank.is_ok()) {
    std::cerr << "tailor-runner: " << rank.status().message() << "\n";
    return runner::exit_status(runner::RunnerExit::kBadInput);
  }
  runner::TrainOptions opts;
  opts.threads = static_cast<int>(std::thread::hardware_concurrency());
  if (args.threads) {
    opts.threads = std::atoi(args.threads->c_str());
    if (opts.threads < 1) {
      std::cerr << "tailor-runner: --threads must be a positive integer\n";
      return runner::exit_status(runner::RunnerExit::kBadInput);
    }
  }
  if (args.merge && !args.export_checkpoint) {
    std::cerr << "tailor-runner: --merge goes with --export (a run merges as its spec's output.merge says)\n";
    return runner::exit_status(runner::RunnerExit::kBadInput);
  }
  if (args.export_checkpoint) {
    runner::TrainOptions e;
    e.config = std::move(config).value();
    e.out_dir = args.out;
    e.device = args.device.value_or("cpu");
    e.threads = opts.threads;
    e.quiet = args.quiet;
    e.merge = args.merge;
    e.cache_dir = args.cache_dir.value_or(runner::data::default_token_cache_dir());
    return runner::exit_status(runner::export_checkpoint(e, *args.export_checkpoint));
  }
  // tailord's liveness check (protocol/heartbeat.h): this process beats
  // while it is scheduled, whatever it is busy with.
  std::optional<runner::Heartbeat> heartbeat;
  if (const auto every = runner::heartbeat_interval_from_env()) {
    const auto name = runner::heartbeat_file_name(rank->present ? std::optional<int>(rank->rank) : std::nullopt);
    heartbeat.emplace((std::filesystem::path(args.out) / name).string(), *every);
  }
  opts.rank = *rank;
  opts.config = std::move(config).value();
  opts.out_dir = args.out;
  opts.resume = args.resume;
  if (args.device) opts.device = *args.device;
  opts.quiet = args.quiet || opts.rank.rank > 0;  // rank 0 reports progress
  opts.progress = !opts.quiet && (args.progress || isatty(STDERR_FILENO));
  opts.cache_dir = args.cache_dir.value_or(runner::data::default_token_cache_dir());
  if (args.memory_limit) {
    auto limit = parse_bytes(*args.memory_limit);
    if (!limit.is_ok()) {
      std::cerr << "tailor-runner: --memory-limit: " << limit.status().message() << "\n";
      return runner::exit_status(runner::RunnerExit::kBadInput);
    }
    opts.memory_limit = limit->count();
  }
  opts.append_events = args.append_events;
  // A rank of the launcher's probe: one candidate measured, then exit.
  if (args.probe_candidate) {
    std::size_t index = 0;
    const std::string& text = *args.probe_candidate;
    const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), index);
    if (!rank->present || err != std::errc() || end != text.data() + text.size() || text.empty()) {
      std::cerr << "tailor-runner: --probe-candidate takes a candidate's index, in a rank the launcher started\n";
      return runner::exit_status(runner::RunnerExit::kBadInput);
    }
    return runner::exit_status(runner::probe_candidate_as_rank(opts, index));
  }
  // strategy.probe: the candidates measured before training (not on a
  // resume: the probed plan trains on), then the probed plan trained.
  const auto& probe = opts.config.probe;
  const bool to_probe = probe && !probe->candidates.empty() && !probe->measured();
  if (args.probe_only && !to_probe) {
    std::cerr << "tailor-runner: --probe-only: " << args.plan << " has no probe to measure (strategy.probe)\n";
    return runner::exit_status(runner::RunnerExit::kBadInput);
  }
  const std::string probed_path = (std::filesystem::path(args.out) / runner::kProbedPlanFile).string();
  // A resumed run whose probe was measured trains the plan it chose.
  bool probed_already = false;
  if (to_probe && opts.resume && !args.probe_only) {
    auto probed = std::filesystem::exists(probed_path) ? runner::read_plan_file(probed_path)
                                                       : Result<runner::RunConfig>(Status::not_found(probed_path));
    if (probed.is_ok() && probed->probe && runner::same_candidates(*probed->probe, *probe)) {
      opts.config = std::move(probed).value();
      probed_already = true;
    }
  }
  // Ranks started by another launcher (srun, torchrun) cannot probe: none
  // of ours starts a candidate's ranks together and stops its peers when
  // one runs out of memory (they would wait on it in a collective).
  if (rank->present && opts.config.strategy.num_gpus > 1 && to_probe && !probed_already) {
    std::cerr << "tailor-runner: " << args.plan << " asks for a probe (strategy.probe) of plans of "
              << opts.config.strategy.num_gpus
              << " ranks, which needs tailor-runner's own launcher: start one tailor-runner for the job, without RANK "
                 "and WORLD_SIZE, or plan it without strategy.probe\n";
    return runner::exit_status(runner::RunnerExit::kBadInput);
  }
  // A multi-rank plan started as one process: become the ranks' launcher,
  // which probes (each candidate's ranks started together) before the
  // ranks that train.
  if (!rank->present && opts.config.strategy.num_gpus > 1) {
    runner::RunnerCommand rank_command = args;
    rank_command.threads.reset();  // each rank gets its share instead
    rank_command.probe_only = false;
    const int world = static_cast<int>(opts.config.strategy.num_gpus);
    if (to_probe && !probed_already) {
      auto probed = runner::probe_ranks_before_training(opts, runner::runner_args(rank_command), world,
                                                        /*print_table=*/!args.probe_only);
      if (!probed.is_ok()) {
        std::cerr << "tailor-runner: probe: " << probed.status().message() << "\n";
        return runner::exit_status(probed.status().code() == StatusCode::kCancelled ? runner::RunnerExit::kCancelled
                                                                                    : runner::RunnerExit::kFailure);
      }
      if (args.probe_only) return runner::exit_status(runner::RunnerExit::kOk);
      rank_command.append_events = true;
    }
    if (to_probe) rank_command.plan = probed_path;  // the probed plan: the ranks train what it chose
    runner::dist::LaunchOptions launch;
    launch.world = world;
    launch.threads = opts.threads;
    launch.out_dir = args.out;
    launch.args = runner::runner_args(rank_command);
    return runner::dist::launch_ranks(launch);
  }
  if (probed_already) {
    opts.append_events = false;
    return runner::exit_status(runner::train(opts));
  }
  if (to_probe) {
    auto probed = runner::probe_before_training(opts, /*print_table=*/!args.probe_only);
    if (!probed.is_ok()) {
      std::cerr << "tailor-runner: probe: " << probed.status().message() << "\n";
      return runner::exit_status(probed.status().code() == StatusCode::kCancelled ? runner::RunnerExit::kCancelled
                                                                                  : runner::RunnerExit::kFailure);
    }
    if (args.probe_only) return runner::exit_status(runner::RunnerExit::kOk);
    opts.config = std::move(probed).value();
    opts.append_events = true;
  }
  return runner::exit_status(runner::train(opts));
}
