#include "runner/torch/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/json_writer.h"
#include "core/units.h"
#include "dsl/spec_loader.h"
#include "runner/data/batcher.h"
#include "runner/data/dataset.h"
#include "runner/data/token_cache.h"
#include "runner/data/tokenizer.h"
#include "runner/device_choice.h"
#include "runner/dist/communicator.h"
#include "runner/dist/launcher.h"
#include "runner/loss_scaler.h"
#include "runner/torch/checkpoint.h"
#include "runner/torch/cross_entropy.h"
#include "runner/torch/cuda_memory.h"
#include "runner/torch/data_parallel.h"
#include "runner/torch/hf_checkpoint.h"
#include "runner/torch/lora.h"
#include "runner/torch/model.h"
#include "runner/torch/optimizer.h"
#include "runner/torch/tensor_file.h"
#include "runner/torch/tracking_allocator.h"
#include "runner/torch/zero3.h"
#include "runner/protocol/capabilities.h"
#include "runner/protocol/events.h"
#include "strategies/memory_model.h"
#include "strategies/plan_document.h"

namespace tailor::runner {
namespace fs = std::filesystem;
namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true); }

// Appends one JSON object per line and flushes it, so a reader following
// the file (tailord, `tailor run`) sees each line as soon as it is written.
class JsonLines {
 public:
  JsonLines(const std::string& path, bool append) : out_(path, append ? std::ios::app : std::ios::trunc) {}
  bool ok() const { return static_cast<bool>(out_); }
  void write(const JsonWriter& w) {
    out_ << w.str() << '\n';
    out_.flush();
  }

 private:
  std::ofstream out_;
};

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double learning_rate(const dsl::TrainingSpec& t, std::int64_t step, std::int64_t total) {
  // `step` counts from 1. Linear warm-up, then the schedule down to 0.
  if (t.warmup_steps > 0 && step <= t.warmup_steps) {
    return t.lr * static_cast<double>(step) / static_cast<double>(t.warmup_steps);
  }
  const double span = static_cast<double>(std::max<std::int64_t>(1, total - t.warmup_steps));
  const double progress = std::clamp(static_cast<double>(step - t.warmup_steps) / span, 0.0, 1.0);
  switch (t.scheduler) {
    case dsl::LrScheduler::kConstant: return t.lr;
    case dsl::LrScheduler::kLinear: return t.lr * (1.0 - progress);
    case dsl::LrScheduler::kCosine: return t.lr * 0.5 * (1.0 + std::cos(M_PI * progress));
  }
  return t.lr;
}

torch::Tensor to_tensor(const std::vector<std::int32_t>& v, std::int64_t rows, std::int64_t cols,
                        const torch::Device& device) {
  return torch::from_blob(const_cast<std::int32_t*>(v.data()), {rows, cols}, torch::kInt32).to(device, torch::kInt64);
}

ModelInput model_input(const data::Batch& b, const torch::Device& device) {
  ModelInput in;
  in.input_ids = to_tensor(b.inputs, b.rows, b.seq_len, device);
  in.positions = to_tensor(b.positions, b.rows, b.seq_len, device);
  // Rows of one document each need no mask beyond causality (attention.h).
  if (!std::all_of(b.segment_ids.begin(), b.segment_ids.end(), [](std::int32_t s) { return s == 0; })) {
    in.segment_ids = to_tensor(b.segment_ids, b.rows, b.seq_len, device);
  }
  return in;
}

torch::Dtype param_dtype(dsl::Precision p) {
  switch (p) {
    case dsl::Precision::kFp32: return torch::kFloat32;
    case dsl::Precision::kFp16: return torch::kFloat16;
    default: return torch::kBFloat16;
  }
}

std::string format_eta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long s = std::lround(seconds);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  return buf;
}

// Measured bytes: the planner's components (from tensor sizes and the
// tracking allocator) plus the allocator's current and peak.
struct Measured {
  strategies::MemoryBreakdown parts;
  std::int64_t peak = 0, allocated = 0;
};

void write_memory(JsonWriter& w, const Measured& m) {
  w.key("memory").begin_object();
  strategies::write_memory_breakdown(w, m.parts);
  w.field("allocated_bytes", m.allocated);
  w.field("peak_bytes", m.peak);
  w.end_object();
}

// The run's one Status -> exit mapping: what a phase's error means for the
// job. Loading phases mark problems with their input as InvalidArgument
// (as_bad_input); I/O and LibTorch errors while training or saving are
// failures a retry may get past.
RunnerExit exit_for(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return RunnerExit::kOk;
    case StatusCode::kResourceExhausted: return RunnerExit::kOutOfMemory;
    case StatusCode::kCancelled: return RunnerExit::kCancelled;
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition: return RunnerExit::kBadInput;
    case StatusCode::kUnavailable:
    case StatusCode::kIOError:
    case StatusCode::kDataLoss:
    case StatusCode::kNoSpace:
    case StatusCode::kInternal: return RunnerExit::kFailure;
  }
  return RunnerExit::kFailure;
}

// An error loading the job's input (data, weights, checkpoint) is bad input
// unless it is a bug.
Status as_bad_input(const Status& s) {
  if (s.is_ok() || s.code() == StatusCode::kInternal) return s;
  return Status::invalid_argument(s.message());
}

// An error writing the results after training is a failure (a full disk may
// be freed; the run resumes from its last checkpoint), never bad input.
Status as_failure(const Status& s) {
  if (s.is_ok() || exit_for(s) == RunnerExit::kFailure) return s;
  return Status::io_error(s.message());
}

// A run in phases: open_outputs, prepare (device, data, model, adapters,
// optimizer), resume, probe, train (train_step and checkpoints), finish;
// conclude writes the terminal event with the exit code. Each phase
// returns a Status; LibTorch exceptions become Statuses in guarded().
class Run {
 public:
  explicit Run(const TrainOptions& o)
      : o_(o), cfg_(o.config), spec_(o.config.spec), st_(o.config.strategy), rank_(o.rank.rank), world_(o.rank.world) {}

  RunnerExit execute();
  // The model of checkpoint `folder` written as the job's output model
  // (export_checkpoint in trainer.h). The options are one rank's.
  RunnerExit export_model(const std::string& folder);

 private:
  Status open_outputs();
  Status prepare();
  Status choose_device();
  Status join_ranks();
  // After join_ranks on a GPU: NCCL for the gradients and parameters when
  // every rank has a GPU of its own (nccl_group.h).
  Status join_nccl();
  Status load_data();
  Status build_model();
  Status resume();
  Status probe();
  Status train();
  Status train_step(std::int64_t step);
  // The loss on data.eval with the model as it is: after every eval_every
  // steps and after the last, once.
  struct Evaluation {
    double loss = 0;
    std::int64_t tokens = 0;
    double seconds = 0;
  };
  bool eval_due(std::int64_t step) const;
  Result<Evaluation> evaluate();
  Status finish();
  // out_dir/adapter/ under adapters, and out_dir/model/ when output.merge
  // says (the adapters merged into the base), from the model as it is.
  Status write_model();
  bool merge_output() const { return o_.merge || spec_.output.merge_for(has_lora(*model_)); }
  // A checkpoint's params into the model: the trainable tensors of an
  // adapter checkpoint (its base checked against `base_fingerprint`), or
  // every parameter.
  Status load_parameters(const std::vector<torch::Tensor>& values, const std::vector<double>& base_fingerprint,
                         const std::string& where);
  RunnerExit conclude(const Status& s);

  // Runs a phase, turning LibTorch's out-of-memory into ResourceExhausted
  // (with its report kept for the oom event) and other exceptions into
  // Internal.
  Status guarded(const char* phase, const std::function<Status()>& fn);
  void record_oom(const c10::OutOfMemoryError& e, const char* phase);
  void event(const char* kind, const std::function<void(JsonWriter&)>& fill = {});
  // Collective under ZeRO-1 (rank 0 gathers the optimizer states): every
  // rank calls it at the same steps; a failed write is an event, a failed
  // collective an error.
  Status checkpoint(std::int64_t step);
  // This rank's part of a sharded checkpoint (checkpoint.h).
  std::vector<ShardPiece> checkpoint_pieces() const;
  Status sharded_checkpoint(std::int64_t step, const std::string& dir);
  void zero_grads();
  // True on every rank when any rank was asked to stop, so that all stop
  // after the same step.
  Result<bool> stop_requested();
  bool leader() const { return rank_ == 0; }
  void print_progress(std::int64_t step, double loss, std::int64_t peak, const std::optional<Evaluation>& eval);
  Measured measure_static() const;

  const TrainOptions& o_;
  const RunConfig& cfg_;
  const dsl::JobSpec& spec_;
  const strategies::Strategy& st_;
  std::unique_ptr<JsonLines> metrics_, events_;
  TrackingAllocator* alloc_ = nullptr;  // host tensors; the training device's too on the CPU
  DeviceChoice device_;
  torch::Device dev_{torch::kCPU};
  std::unique_ptr<CudaMemoryMeter> cuda_meter_;
  MemoryMeter* meter_ = nullptr;  // the training device's memory
  std::int64_t limit_ = 0;        // the byte budget applied while training; 0 = none
  std::unique_ptr<data::Batcher> batcher_;
  std::unique_ptr<data::Batcher> eval_batcher_;  // data.eval; null without one
  CausalLM model_{nullptr};
  std::unique_ptr<TrainingOptimizer> opt_;
  CheckpointState state_;
  Measured last_;                 // the last step's measured memory
  std::int64_t total_steps_ = 0;
  std::int64_t first_step_ = 1;
  std::int64_t step_ = 0;         // the step being run (for reports)
  double t_start_ = 0;
  std::int64_t tokens_this_run_ = 0;
  std::function<void(JsonWriter&)> oom_report_;  // fields of the oom event
  HfExport export_;               // the tokenizer's ids and files, for the exported model
  // Ranks (world_ > 1): rank 0 writes metrics.jsonl, events.jsonl, the
  // checkpoints and the model; each rank trains on its share of every
  // global batch.
  int rank_ = 0, world_ = 1;
  std::unique_ptr<dist::Communicator> comm_;
  std::unique_ptr<NcclGroup> nccl_;  // the gradients and parameters of GPU ranks; null: the ring
  std::string collectives_;          // what carries them, for the start event
  std::vector<torch::Tensor> trainable_;
  // What a checkpoint holds of the model: the trainable tensors under
  // adapters (the frozen base is named by base_fingerprint_, over the
  // tensors base_names_ names), every parameter otherwise.
  std::vector<torch::Tensor> checkpointed_;
  std::vector<double> base_fingerprint_;
  std::vector<std::string> base_names_;
  std::vector<int> owner_;        // ZeRO-1/2: the rank that updates each trainable tensor
  bool sharded_ = false;          // ZeRO-1, 2 or 3 over several ranks
  std::unique_ptr<GradientSharder> grad_sharder_;  // ZeRO-1 and 2
  std::unique_ptr<ParameterSharder> param_sharder_;  // ZeRO-3: the model's tensors too
  std::unique_ptr<OverlappedAllReduce> overlap_;   // stage 0
};

// Gradient buckets as the planner counts them (strategies/memory_model.h).
constexpr std::int64_t kGradientBucketBytes = strategies::kTailorGradientBucketBytes;

int optimizer_tensors_per_slot(dsl::Optimizer o) { return o == dsl::Optimizer::kAdamw8bit ? 5 : 3; }

std::chrono::milliseconds seconds_from_env(const char* name, std::chrono::milliseconds fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (*end != '\0' || !(s > 0)) return fallback;
  return std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000));
}

void Run::event(const char* kind, const std::function<void(JsonWriter&)>& fill) {
  if (!events_) return;
  JsonWriter w(0);
  w.begin_object().field("event", kind).field("time", static_cast<std::int64_t>(std::time(nullptr)));
  if (fill) fill(w);
  w.end_object();
  events_->write(w);
}

Status Run::guarded(const char* phase, const std::function<Status()>& fn) {
  try {
    return fn();
  } catch (const c10::OutOfMemoryError& e) {
    record_oom(e, phase);
    return Status::resource_exhausted(std::string("out of memory (") + phase + "): " + e.what_without_backtrace());
  } catch (const c10::Error& e) {
    return Status::internal(std::string("LibTorch: ") + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Status::internal(e.what());
  }
}

void Run::record_oom(const c10::OutOfMemoryError& e, const char* phase) {
  std::optional<MemoryMeter::Failure> f;
  Measured m = last_;
  if (meter_) {
    f = meter_->last_failure(e.what_without_backtrace());
    meter_->set_budget(0);  // room to write the report
    m.peak = meter_->peak_bytes();
    m.allocated = meter_->current_bytes();
  }
  // The static components as they are now; activations and logits as the
  // last completed step measured them (none before step 1).
  if (model_ && opt_) {
    const Measured stat = measure_static();
    m.parts.weights = stat.parts.weights;
    m.parts.adapter = stat.parts.adapter;
    m.parts.optimizer_states = stat.parts.optimizer_states;
    m.parts.master_weights = stat.parts.master_weights;
    m.parts.gradients = stat.parts.gradients;
  }
  const std::int64_t step = step_, limit = limit_;
  const std::string where = phase;
  oom_report_ = [=](JsonWriter& w) {
    w.field("step", step).field("phase", where);
    w.field("requested_bytes", f ? f->requested : 0).field("in_use_bytes", f ? f->in_use : 0);
    w.field("budget_bytes", f ? f->budget : limit);
    write_memory(w, m);
  };
}

Status Run::choose_device() {
  const int cuda_devices = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  auto chosen = runner::choose_device(o_.device, spec_.resources.device, !cfg_.on_cpu, cuda_devices,
                                     /*cuda_built=*/TAILOR_CUDA != 0, std::getenv("CUDA_VISIBLE_DEVICES"));
  if (!chosen.is_ok()) return chosen.status();
  device_ = *chosen;
  // Ranks on one machine take a GPU each.
  if (device_.cuda && world_ > 1 && o_.device == "auto" && cuda_devices > 0) {
    device_.index = o_.rank.local_rank % cuda_devices;
    device_.reason += "; rank " + std::to_string(rank_) + " of " + std::to_string(world_) + " on device " +
                      std::to_string(device_.index);
  }
  if (!device_.cuda) {
    meter_ = alloc_;
    return Status::ok();
  }
  dev_ = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(device_.index));
  auto meter = CudaMemoryMeter::open(device_.index, cfg_.device_memory_bytes);
  if (!meter.is_ok()) return Status::unavailable(device_.name() + ": " + meter.status().message());
  cuda_meter_ = std::move(meter).value();
  meter_ = cuda_meter_.get();
  return Status::ok();
}

Status Run::join_ranks() {
  // One rank offloading its parameters is ZeRO-3 over a world of one.
  if (world_ == 1 && st_.num_gpus == 1 && st_.offload != dsl::Offload::kOptimizerAndParams) return Status::ok();
  if (st_.num_gpus != world_) {
    return Status::invalid_argument("the plan is for " + std::to_string(st_.num_gpus) + " ranks, but WORLD_SIZE is " +
                                    std::to_string(world_) + (o_.rank.present ? "" : " (RANK and WORLD_SIZE are not set)"));
  }
  dist::CommunicatorOptions co;
  co.rendezvous_timeout = seconds_from_env("TAILOR_RENDEZVOUS_TIMEOUT", co.rendezvous_timeout);
  co.collective_timeout = seconds_from_env("TAILOR_COLLECTIVE_TIMEOUT", co.collective_timeout);
  auto comm = dist::Communicator::connect(o_.rank, co);
  if (!comm.is_ok()) return Status::unavailable("rank " + std::to_string(rank_) + ": " + comm.status().message());
  comm_ = std::move(comm).value();
  collectives_ = "ring";
  return device_.cuda ? join_nccl() : Status::ok();
}

Status Run::join_nccl() {
  // TAILOR_COLLECTIVES: auto (the default), nccl (required) or ring.
  const char* env = std::getenv("TAILOR_COLLECTIVES");
  const std::string want = env != nullptr && *env != '\0' ? env : "auto";
  if (want != "auto" && want != "nccl" && want != "ring") {
    return Status::invalid_argument("TAILOR_COLLECTIVES must be auto, nccl or ring, got \"" + want + "\"");
  }
  if (want == "ring") {
    collectives_ = "ring (TAILOR_COLLECTIVES=ring)";
    return Status::ok();
  }
  if (world_ == 1) {
    collectives_ = "none (one rank)";
    return Status::ok();
  }
  // NCCL takes one rank per GPU: where any two ranks share one, all keep the ring.
  const int cuda_devices = static_cast<int>(torch::cuda::device_count());
  std::vector<double> sharing{o_.rank.local_rank >= cuda_devices ? 1.0 : 0.0};
  TAILOR_RETURN_IF_ERROR(all_reduce_values(*comm_, sharing));
  if (sharing[0] > 0) {
    if (want == "nccl") {
      return Status::invalid_argument("TAILOR_COLLECTIVES=nccl, but ranks share a GPU (NCCL takes one rank per GPU)");
    }
    collectives_ = "ring (ranks share a GPU)";
    return Status::ok();
  }
  auto group = NcclGroup::connect(*comm_, o_.rank.master_addr, device_.index,
                                  seconds_from_env("TAILOR_COLLECTIVE_TIMEOUT", std::chrono::minutes(30)));
  if (!group.is_ok()) return Status::unavailable("rank " + std::to_string(rank_) + ": " + group.status().message());
  nccl_ = std::move(group).value();
  collectives_ = "nccl";
  return Status::ok();
}

void Run::zero_grads() {
  for (torch::Tensor& p : trainable_) {
    if (p.grad().defined()) p.mutable_grad() = torch::Tensor();  // free, as set_to_none does
  }
  if (param_sharder_ || opt_->offloaded()) opt_->zero_grad();  // the parts' or the host copies' gradients
}

Result<bool> Run::stop_requested() {
  bool stop = g_stop.load();
  if (world_ == 1) return stop;
  std::vector<double> v = {stop ? 1.0 : 0.0};
  TAILOR_RETURN_IF_ERROR(all_reduce_values(*comm_, v));
  return v[0] > 0;
}

std::vector<ShardPiece> Run::checkpoint_pieces() const {
  std::vector<ShardPiece> out;
  const std::vector<torch::Tensor>& params = checkpointed_;
  for (std::size_t i = 0; i < params.size(); ++i) {
    std::string name = "model." + std::to_string(i);
    // ZeRO-3: each rank its parts; ZeRO-1/2 (replicated): rank 0 all of it.
    if (param_sharder_) {
      if (auto piece = param_sharder_->piece_of(params[i], name)) {
        out.push_back(std::move(*piece));
        continue;
      }
    }
    if (leader()) out.push_back({std::move(name), params[i].sizes().vec(), 0, params[i]});
  }
  const std::vector<torch::Tensor> local = opt_->state_tensors();
  const auto per = static_cast<std::size_t>(optimizer_tensors_per_slot(st_.optimizer));
  if (param_sharder_) {
    for (ShardPiece& p : param_sharder_->state_pieces(trainable_, local, per)) out.push_back(std::move(p));
    return out;
  }
  // ZeRO-1/2: the states of the tensors this rank owns, whole.
  std::size_t mine = 0;
  for (std::size_t i = 0; i < trainable_.size(); ++i) {
    if (owner_[i] != rank_) continue;
    for (std::size_t k = 0; k < per; ++k) {
      const torch::Tensor& t = local[mine * per + k];
      if (t.defined()) out.push_back({"optimizer." + std::to_string(i * per + k), t.sizes().vec(), 0, t});
    }
    ++mine;
  }
  return out;
}

Measured Run::measure_static() const {
  Measured m;
  std::int64_t weights = 0, gradients = 0;
  for (const auto& p : model_->parameters()) {
    weights += static_cast<std::int64_t>(p.nbytes());
    if (p.grad().defined()) gradients += static_cast<std::int64_t>(p.grad().nbytes());
  }
  // Adapters are their own component; weights are the frozen base, with
  // NF4 projections at their packed size.
  const LoraFootprint lora = lora_footprint(*model_);
  weights += lora.quantized_bytes - lora.adapter_bytes;
  m.parts.adapter = Bytes(lora.adapter_bytes);
  m.parts.weights = Bytes(weights);
  m.parts.gradients = Bytes(gradients);
  if (param_sharder_) {  // ZeRO-3: this rank's parts (gathered units are transient)
    std::vector<const void*> adapters;
    for (const torch::Tensor& t : lora_parameters(*model_)) adapters.push_back(t.unsafeGetTensorImpl());
    const auto owned = param_sharder_->owned_bytes([&](const torch::Tensor& t) {
      return std::find(adapters.begin(), adapters.end(), t.unsafeGetTensorImpl()) != adapters.end();
    });
    // Offloaded parts and their gradients are host memory.
    const bool device = !param_sharder_->host_parts();
    m.parts.adapter = Bytes(device ? owned.adapter : 0);
    m.parts.weights = Bytes(device ? owned.other : 0);
    m.parts.gradients = Bytes(gradients + (device ? owned.gradients : 0));
  }
  // Offloaded states and master weights are host memory, not the device's.
  m.parts.optimizer_states = Bytes(opt_->offloaded() ? 0 : opt_->state_bytes());
  m.parts.master_weights = Bytes(opt_->offloaded() ? 0 : opt_->master_bytes());
  return m;
}

Status Run::checkpoint(std::int64_t step) {
  const auto s = batcher_->state();
  state_.step = step;
  state_.data_epoch = s.epoch;
  state_.data_index = s.index;
  const std::string dir = (fs::path(o_.out_dir) / spec_.checkpoint.dir).string();
  Status saved;
  if (sharded_) {
    saved = sharded_checkpoint(step, dir);
  } else if (leader()) {
    CheckpointTensors t;
    for (const auto& p : checkpointed_) t.params.push_back(p.detach());
    t.optimizer = opt_->state_tensors();
    t.rng_state = at::detail::getDefaultCPUGenerator().get_state();
    if (device_.cuda) t.device_rng_state = at::globalContext().defaultGenerator(dev_).get_state();
    saved = save_checkpoint(dir, state_, t, spec_.checkpoint.keep);
  }
  if (!leader()) return saved;
  if (saved.is_ok()) {
    event(events::kCheckpoint, [&](JsonWriter& w) { w.field("step", step).field("dir", dir); });
  } else {
    event(events::kCheckpointError, [&](JsonWriter& w) { w.field("step", step).field("message", saved.message()); });
  }
  return Status::ok();
}

// Every rank writes what it keeps, nothing is gathered; rank 0 commits the
// folder when all have written, or abandons it when any could not (the
// same outcome on every rank, decided by one all-reduce).
Status Run::sharded_checkpoint(std::int64_t step, const std::string& dir) {
  std::vector<double> failed = {0.0};
  Status begun;
  if (leader()) {
    auto folder = begin_checkpoint(dir, step);
    if (!folder.is_ok()) begun = folder.status();
  }
  failed[0] = begun.is_ok() ? 0.0 : 1.0;
  // The folder exists before anyone writes into it.
  TAILOR_RETURN_IF_ERROR(all_reduce_values(*comm_, failed));
  if (failed[0] > 0) return begun;
  const std::string path = checkpoint_tmp_path(dir, step);
  const auto written = write_checkpoint_shard(path, rank_, world_, checkpoint_pieces());
  failed[0] = written.is_ok() ? 0.0 : 1.0;
  TAILOR_RETURN_IF_ERROR(all_reduce_values(*comm_, failed));
  // Every rank's file size and checksum, for rank 0's state.json.
  std::vector<std::uint64_t> sums(2 * static_cast<std::size_t>(world_), 0);
  if (written.is_ok()) {
    sums[2 * static_cast<std::size_t>(rank_)] = static_cast<std::uint64_t>(written->bytes);
    sums[2 * static_cast<std::size_t>(rank_) + 1] = written->checksum;
  }
  TAILOR_RETURN_IF_ERROR(comm_->all_gather(sums.data(), sums.size(), sizeof(std::uint64_t), 2));
  if (!leader()) return Status::ok();
  if (failed[0] > 0) {
    abandon_checkpoint(path);
    return written.is_ok() ? Status::io_error("a rank could not write its part of checkpoint " + path)
                           : written.status();
  }
  std::vector<FileSum> files;
  for (int r = 0; r < world_; ++r) {
    files.push_back({checkpoint_shard_name(r, world_), static_cast<std::int64_t>(sums[2 * static_cast<std::size_t>(r)]),
                     sums[2 * static_cast<std::size_t>(r) + 1]});
  }
  CheckpointTensors rng;
  rng.rng_state = at::detail::getDefaultCPUGenerator().get_state();
  if (device_.cuda) rng.device_rng_state = at::globalContext().defaultGenerator(dev_).get_state();
  const ShardLayout layout{world_, static_cast<std::int64_t>(checkpointed_.size()),
                           static_cast<std::int64_t>(trainable_.size()) * optimizer_tensors_per_slot(st_.optimizer)};
  return commit_checkpoint(dir, path, state_, rng, &layout, files, spec_.checkpoint.keep);
}

// Output files first: every later problem is reported in events.jsonl.
Status Run::open_outputs() {
  std::error_code ec;
  fs::create_directories(o_.out_dir, ec);
  // A new run never mixes with an earlier one in the same folder: its
  // checkpoints would be pruned against the old ones and its metrics appended.
  const std::string checkpoints = (fs::path(o_.out_dir) / spec_.checkpoint.dir).string();
  if (!o_.resume && latest_checkpoint(checkpoints)) {
    return Status::already_exists(checkpoints +
                                  " already holds checkpoints of an earlier run; resume it (--resume) or choose "
                                  "another output folder");
  }
  // Rank 0 writes the job's files; other ranks their own events
  // (dist/launcher.h).
  if (leader()) metrics_ = std::make_unique<JsonLines>((fs::path(o_.out_dir) / "metrics.jsonl").string(), o_.resume);
  events_ = std::make_unique<JsonLines>(dist::rank_events_path(o_.out_dir, rank_), o_.resume);
  if (ec || (metrics_ && !metrics_->ok()) || !events_->ok()) {
    events_.reset();
    return Status::invalid_argument("cannot write to output folder " + o_.out_dir);
  }
  return Status::ok();
}

// Whether any target of one pass is trained (the eval loss's denominator
// is not 0): a document's token t >= 1 predicted from t - 1, within a
// row's first seq_len + 1 tokens without packing.
bool has_trained_tokens(const data::TokenStore& store, std::int64_t seq_len, bool packing) {
  for (std::size_t d = 0; d < store.documents(); ++d) {
    const auto trained = store.trained(d);
    const std::int64_t end = packing ? store.length(d) : std::min(store.length(d), seq_len + 1);
    for (std::int64_t t = 1; t < end; ++t) {
      if (trained[static_cast<std::size_t>(t)]) return true;
    }
  }
  return false;
}

Status Run::load_data() {
  // The model folder's tokenizer.model, else bytes; tokenized once into the
  // token cache (warnings about it go to stderr), mapped on later runs.
  auto tok = data::make_tokenizer(spec_.model);
  if (!tok.is_ok()) return as_bad_input(tok.status());
  // A tokens file may hold ids past the embedding table: a clear error here,
  // not an index error inside the forward pass.
  auto load = [&](const std::string& path) -> Result<data::TokenizedData> {
    auto tokenized = data::load_tokenized(path, spec_.data, **tok, o_.cache_dir);
    if (!tokenized.is_ok()) return as_bad_input(tokenized.status());
    const auto ids = tokenized->store.all_tokens();
    if (const auto it = std::max_element(ids.begin(), ids.end()); it != ids.end() && *it >= spec_.model.arch.vocab) {
      return Status::invalid_argument(path + ": token id " + std::to_string(*it) +
                                      " is outside the model's vocabulary (" + std::to_string(spec_.model.arch.vocab) +
                                      " ids)");
    }
    return tokenized;
  };
  auto tokenized = load(spec_.data.train);
  if (!tokenized.is_ok()) return tokenized.status();
  if (!spec_.data.eval.empty()) {
    // The eval file as the training data is read: the same tokenizer,
    // masking, seq_len and packing, so the two losses compare.
    auto eval = load(spec_.data.eval);
    if (!eval.is_ok()) return eval.status();
    if (!has_trained_tokens(eval->store, spec_.data.seq_len, spec_.data.packing)) {
      return Status::invalid_argument(spec_.data.eval + ": no token is trained (every one is masked), so there is no "
                                      "loss to evaluate");
    }
    // Packed as training packs (whole examples, or the stream), long
    // examples handled alike; errors name the eval file.
    dsl::DataSpec eval_data = spec_.data;
    eval_data.train = spec_.data.eval;
    auto eval_batcher =
        data::make_batcher(std::move(eval->store), eval_data, st_.micro_batch_size, /*seed=*/0, (*tok)->pad_id());
    if (!eval_batcher.is_ok()) return as_bad_input(eval_batcher.status());
    eval_batcher_ = std::make_unique<data::Batcher>(std::move(*eval_batcher));
  }
  export_.tokens = {(*tok)->bos_id(), (*tok)->eos_id()};
  export_.tokenizer_from = spec_.model.path;
  export_.byte_tokenizer = dynamic_cast<const data::ByteTokenizer*>(tok->get()) != nullptr;
  auto batcher = data::make_batcher(std::move(tokenized->store), spec_.data, st_.micro_batch_size,
                                    static_cast<std::uint64_t>(spec_.training.seed), (*tok)->pad_id());
  if (!batcher.is_ok()) return as_bad_input(batcher.status());
  batcher_ = std::make_unique<data::Batcher>(std::move(*batcher));
  total_steps_ = spec_.training.max_steps
                     ? *spec_.training.max_steps
                     : std::max<std::int64_t>(
                           1, static_cast<std::int64_t>(std::ceil(
                                  spec_.training.epochs * static_cast<double>(batcher_->rows_per_epoch()) /
                                  static_cast<double>(st_.micro_batch_size * st_.grad_accumulation * world_))));
  return Status::ok();
}

bool Run::eval_due(std::int64_t step) const {
  if (!eval_batcher_) return false;
  const std::int64_t every = spec_.training.eval_every;
  return step == total_steps_ || (every > 0 && step % every == 0);
}

// One pass over data.eval without gradients (so no activations are kept:
// it fits wherever a training step does) and without dropout. Ranks share
// the batches (k on rank k % world) and sum their losses and tokens.
Result<Run::Evaluation> Run::evaluate() {
  const double t0 = now_seconds();
  torch::NoGradGuard no_grad;
  model_->eval();
  struct TrainAgain {
    CausalLM& model;
    ~TrainAgain() { model->train(); }
  } train_again{model_};
  const std::int64_t batches = eval_batcher_->batches_per_epoch();
  // ZeRO-3 gathers each unit's parameters collectively: every rank runs as
  // many forward passes, a rank out of batches a one-token one that counts
  // nothing.
  const std::int64_t rounds = (batches + world_ - 1) / world_;
  double sums[2] = {0, 0};  // loss, target tokens
  for (std::int64_t round = 0; round < rounds; ++round) {
    const std::int64_t k = round * world_ + rank_;
    data::Batch b;
    if (k < batches) {
      b = eval_batcher_->pass_batch(k);
    } else if (param_sharder_) {
      b.rows = b.seq_len = 1;
      b.inputs = b.positions = b.segment_ids = {0};
      b.targets = {-100};
    } else {
      break;
    }
    const torch::Tensor loss =
        cross_entropy_sum(model_->logits(model_->hidden_states(model_input(b, dev_)), /*capped=*/false),
                          to_tensor(b.targets, b.rows, b.seq_len, dev_), 0, spec_.model.arch.final_logit_softcap);
    sums[0] += loss.item<double>();
    sums[1] += static_cast<double>(b.target_tokens);
    // The head is still gathered: no backward released it.
    if (param_sharder_) TAILOR_RETURN_IF_ERROR(param_sharder_->end_backward());
  }
  if (world_ > 1) {
    std::vector<double> v(sums, sums + 2);
    TAILOR_RETURN_IF_ERROR(all_reduce_values(*comm_, v));
    sums[0] = v[0];
    sums[1] = v[1];
  }
  Evaluation e;
  e.tokens = static_cast<std::int64_t>(sums[1]);
  e.loss = sums[0] / std::max(1.0, sums[1]);
  e.seconds = now_seconds() - t0;
  return e;
}

Status Run::build_model() {
  model_ = CausalLM(spec_.model.arch, st_.checkpoint_every);
  model_->to(dev_, param_dtype(st_.precision));
  // The attention the plan chose (its memory estimate assumed it).
  model_->set_fused_attention(st_.attention == strategies::Attention::kMemoryEfficient);
  model_->train();
  // Fine-tuning: the model folder's weights replace the initialisation
  // (before the optimizer copies them into fp32 master weights).
  if (!spec_.model.path.empty() && spec_.model.init == dsl::ModelInit::kPretrained) {
    TAILOR_RETURN_IF_ERROR(as_bad_input(load_hf_weights(model_, spec_.model.path)));
  }
  // Adapters (LoRA, QLoRA): after the weights are final, so NF4 quantises
  // the loaded ones. The optimizer sees only trainable tensors; adapters are
  // fp32 under fp32 and mixed precision (so no master copy), bf16 under pure
  // bf16, as memory_model.cpp assumes.
  dsl::Precision opt_precision = st_.precision;
  if (st_.adapter != dsl::Adapter::kNone) {
    // The base as it will stay, before QLoRA quantises it: a re-plan from
    // LoRA to QLoRA resumes over the same base.
    std::vector<torch::Tensor> base;
    for (const auto& item : model_->named_parameters()) {
      base_names_.push_back(item.key());
      base.push_back(item.value());
    }
    base_fingerprint_ = weights_fingerprint(base);
    LoraOptions lo;
    lo.rank = st_.lora_rank > 0 ? st_.lora_rank : spec_.strategy.lora.r;
    lo.alpha = spec_.strategy.lora.alpha;
    lo.dropout = spec_.strategy.lora.dropout;
    lo.targets = spec_.strategy.lora.targets;
    lo.quantize_base = st_.adapter == dsl::Adapter::kQlora || st_.quantization != strategies::Quantization::kNone;
    lo.adapter_dtype = st_.precision == dsl::Precision::kPureBf16 ? torch::kBFloat16 : torch::kFloat32;
    TAILOR_RETURN_IF_ERROR(as_bad_input(attach_lora(*model_, lo)));
    if (st_.precision != dsl::Precision::kPureBf16) opt_precision = dsl::Precision::kFp32;
  }
  std::vector<torch::Tensor> trainable;
  for (const auto& p : model_->parameters()) {
    if (p.requires_grad()) trainable.push_back(p);
  }
  trainable_ = trainable;
  checkpointed_ = has_lora(*model_) ? trainable_ : model_->parameters();
  state_.base_fingerprint = has_lora(*model_) ? base_fingerprint_ : std::vector<double>();
  // ZeRO-1: this rank's optimizer sees only the tensors it owns.
  const bool offload_params = st_.offload == dsl::Offload::kOptimizerAndParams;
  sharded_ = st_.zero_stage >= 1 && (world_ > 1 || offload_params);
  std::vector<ParamOptions> param_opts;
  if (sharded_ && st_.zero_stage >= 3) {
    // ZeRO-3: every tensor of the model cut into N parts; this rank's
    // optimizer updates its parts, decayed and quantised as the whole
    // tensors would be (8-bit states split at block boundaries).
    std::vector<std::vector<torch::Tensor>> units(model_->unit_count());
    for (std::size_t u = 0; u < units.size(); ++u) {
      units[u] = model_->unit_parameters(u);
      if (u >= 1 && u + 1 < units.size()) {
        for (torch::Tensor& t : lora_layer_tensors(*model_, u - 1)) units[u].push_back(std::move(t));
      }
    }
    const dsl::Optimizer kind = st_.optimizer;
    // Parameter offload: the parts on the host (zero3.h).
    param_sharder_ = std::make_unique<ParameterSharder>(
        *comm_, units,
        [kind](const torch::Tensor& t) {
          return t.requires_grad() && param_options(t, kind).blockwise_8bit ? kAdamw8bitBlockSize : std::int64_t{1};
        },
        offload_params, nccl_.get());
    model_->set_unit_hook(param_sharder_.get());
    trainable.clear();
    for (const torch::Tensor& t : trainable_) {
      trainable.push_back(param_sharder_->shard_of(t));
      param_opts.push_back(param_options(t, kind));
    }
  } else if (sharded_) {
    owner_ = partition_by_size(trainable_, world_);
    std::vector<torch::Tensor> owned;
    for (std::size_t i = 0; i < trainable_.size(); ++i) {
      if (owner_[i] == rank_) owned.push_back(trainable_[i]);
    }
    trainable = std::move(owned);
    grad_sharder_ = std::make_unique<GradientSharder>(*comm_, trainable_, owner_, /*during_backward=*/st_.zero_stage >= 2,
                                                      nccl_.get());
  } else if (world_ > 1) {
    overlap_ = std::make_unique<OverlappedAllReduce>(*comm_, trainable_, kGradientBucketBytes, nccl_.get());
  }
  // Offload: this rank's optimizer in host memory (optimizer.h), beside
  // the parts it updates when those are offloaded too.
  const OptimizerHome home = offload_params                           ? OptimizerHome::kHost
                             : st_.offload == dsl::Offload::kOptimizer ? OptimizerHome::kHostCopies
                                                                       : OptimizerHome::kDevice;
  opt_ = std::make_unique<TrainingOptimizer>(trainable, opt_precision, st_.optimizer, spec_.training.weight_decay,
                                             param_opts, home);
  state_.loss_scale = DynamicLossScaler(st_.precision == dsl::Precision::kFp16).scale();
  return Status::ok();
}

Status Run::prepare() {
  alloc_ = &TrackingAllocator::install();
  TAILOR_RETURN_IF_ERROR(choose_device());
  TAILOR_RETURN_IF_ERROR(check_executable(st_));
  TAILOR_RETURN_IF_ERROR(join_ranks());
  TAILOR_RETURN_IF_ERROR(dsl::check_weights(spec_));
  if (spec_.data.seq_len > spec_.model.arch.max_seq_len) {
    return Status::invalid_argument("data.seq_len exceeds the model's max_seq_len");
  }
  if (o_.threads > 0) at::set_num_threads(o_.threads);
  // The plan's budget where the plan's kind of device trains: a CPU plan on
  // the CPU, a GPU plan on a GPU. A GPU plan trained on the CPU on purpose
  // (resources.device: cpu, --device cpu) has no meaningful budget there.
  const bool plan_device = cfg_.on_cpu != device_.cuda;
  limit_ = o_.memory_limit >= 0 ? o_.memory_limit : (plan_device ? cfg_.budget_bytes : 0);
  torch::manual_seed(static_cast<std::uint64_t>(spec_.training.seed));
  TAILOR_RETURN_IF_ERROR(load_data());
  return build_model();
}

Status Run::load_parameters(const std::vector<torch::Tensor>& values, const std::vector<double>& base_fingerprint,
                            const std::string& where) {
  std::vector<torch::Tensor> params;
  if (!base_fingerprint.empty()) {
    // An adapter checkpoint: only over the base it was trained on.
    if (!has_lora(*model_)) {
      return Status::invalid_argument(where + " holds adapters; this job trains without them (strategy.adapter)");
    }
    TAILOR_RETURN_IF_ERROR(as_bad_input(check_fingerprint(base_fingerprint, base_fingerprint_, base_names_, where)));
    params = trainable_;
  } else {
    params = model_->parameters();  // every parameter (adapter runs wrote these before adapter checkpoints too)
  }
  if (values.size() != params.size()) return Status::invalid_argument(where + ": model does not match the job");
  torch::NoGradGuard ng;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!values[i].defined() || values[i].sizes() != params[i].sizes()) {
      return Status::invalid_argument(where + ": parameter " + std::to_string(i) + " has the wrong shape");
    }
    params[i].copy_(values[i]);
  }
  return Status::ok();
}

Status Run::resume() {
  if (!o_.resume) return Status::ok();
  // The newest checkpoint that is whole: a damaged one (a file truncated,
  // overwritten or gone since it was written) is reported, set aside by
  // rank 0 and passed over for the one before.
  std::optional<std::string> latest;
  Result<std::pair<CheckpointState, CheckpointTensors>> loaded = Status::not_found("no checkpoint");
  const std::string dir = (fs::path(o_.out_dir) / spec_.checkpoint.dir).string();
  int skipped = 0;
  for (const std::string& folder : checkpoints_newest_first(dir)) {
    loaded = load_checkpoint(folder);
    if (loaded.is_ok() || loaded.status().code() != StatusCode::kDataLoss) {
      latest = folder;
      break;
    }
    std::string moved;
    if (leader()) {
      auto aside = set_aside_checkpoint(folder);
      moved = aside.is_ok() ? *aside : aside.status().message();
    }
    event(events::kCheckpointSkipped, [&](JsonWriter& w) {
      w.field("checkpoint", folder).field("message", loaded.status().message());
      if (!moved.empty()) w.field("moved_to", moved);
    });
    ++skipped;
  }
  if (!latest && skipped > 0) {
    // Not silently from step 1: the next attempt does that, the damaged
    // checkpoints being set aside.
    return Status::data_loss("every checkpoint in " + dir + " is damaged (set aside as damaged-step-*): " +
                             loaded.status().message());
  }
  if (!latest) return Status::ok();  // a first attempt: nothing to resume
  if (!loaded.is_ok()) return as_bad_input(loaded.status());
  auto& [st, t] = *loaded;
  TAILOR_RETURN_IF_ERROR(load_parameters(t.params, st.base_fingerprint, *latest));
  // Written by the other AdamW (an out-of-memory re-plan switches between
  // them): its states converted rather than the checkpoint refused.
  std::string converted;
  if (t.optimizer.size() != trainable_.size() * static_cast<std::size_t>(optimizer_tensors_per_slot(st_.optimizer))) {
    if (auto c = convert_adamw_states(t.optimizer, trainable_, st_.optimizer, st_.precision)) {
      t.optimizer = std::move(*c);
      converted = st_.optimizer == dsl::Optimizer::kAdamw8bit ? "adamw -> adamw_8bit" : "adamw_8bit -> adamw";
    }
  }
  if (param_sharder_) {
    const auto per = static_cast<std::size_t>(optimizer_tensors_per_slot(st_.optimizer));
    if (t.optimizer.size() != trainable_.size() * per) {
      return Status::invalid_argument(*latest + ": optimizer state does not match the job");
    }
    t.optimizer = param_sharder_->shard_states(trainable_, t.optimizer, per);
  } else if (sharded_) {
    // A checkpoint holds every tensor's states (whatever the rank count it
    // was written with): keep this rank's.
    const auto per = static_cast<std::size_t>(optimizer_tensors_per_slot(st_.optimizer));
    if (t.optimizer.size() != trainable_.size() * per) {
      return Status::invalid_argument(*latest + ": optimizer state does not match the job");
    }
    std::vector<torch::Tensor> mine;
    for (std::size_t i = 0; i < trainable_.size(); ++i) {
      if (owner_[i] != rank_) continue;
      for (std::size_t k = 0; k < per; ++k) mine.push_back(t.optimizer[i * per + k]);
    }
    t.optimizer = std::move(mine);
  }
  if (!opt_->load_state_tensors(t.optimizer, st.step)) {
    return Status::invalid_argument(*latest + ": optimizer state does not match the job");
  }
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  gen.set_state(t.rng_state);
  if (device_.cuda && t.device_rng_state.defined()) {
    at::Generator device_gen = at::globalContext().defaultGenerator(dev_);
    device_gen.set_state(t.device_rng_state);
  }
  batcher_->restore({st.data_epoch, st.data_index});
  state_ = st;
  first_step_ = st.step + 1;
  event(events::kResume, [&](JsonWriter& w) {
    w.field("step", st.step).field("checkpoint", *latest);
    if (!converted.empty()) w.field("optimizer_converted", converted);
  });
  return Status::ok();
}

// Forward and backward once on the longest batch the data can produce,
// gradients discarded: an out-of-memory surfaces before step 1, not an
// hour in, and the data order stays that of an uninterrupted run.
Status Run::probe() {
  // The budget applies to training, not to loading files.
  meter_->set_budget(limit_);
  if (param_sharder_) param_sharder_->shard();
  opt_->sync_from_device();  // offloaded: the host copies of what resume wrote
  meter_->reset_peak();
  event(events::kStart, [&](JsonWriter& w) {
    w.field("job", spec_.name).field("steps", total_steps_).field("first_step", first_step_);
    w.field("device", device_.name()).field("device_reason", device_.reason);
    w.field("strategy", st_.describe()).field("memory_limit_bytes", limit_);
    w.field("parameters", spec_.model.arch.parameter_count());
    // The process to signal: the launcher of a multi-rank job.
    const char* launcher = std::getenv("TAILOR_LAUNCHER_PID");
    w.field("pid", launcher != nullptr ? static_cast<std::int64_t>(std::atoll(launcher)) : static_cast<std::int64_t>(::getpid()));
    w.field("rank", static_cast<std::int64_t>(rank_)).field("ranks", static_cast<std::int64_t>(world_));
    w.field("rank_pid", static_cast<std::int64_t>(::getpid()));
    if (comm_) w.field("collectives", collectives_);
    const data::PackingStats& d = batcher_->stats();
    w.field("packing", dsl::to_string(d.packing)).field("on_long_example", dsl::to_string(spec_.data.on_long_example));
    w.field("examples", d.examples).field("rows_per_epoch", d.rows_per_epoch);
    w.field("truncated", d.truncated).field("dropped", d.dropped);
    w.field("packing_efficiency", d.efficiency());
  });
  if (leader() && !o_.quiet) {
    const data::PackingStats& d = batcher_->stats();
    std::fprintf(stderr, "data: %lld examples in %lld rows of %lld an epoch (packing %s, %.1f%% of cells filled)",
                 static_cast<long long>(d.examples), static_cast<long long>(d.rows_per_epoch),
                 static_cast<long long>(d.seq_len), dsl::describe(d.packing), 100.0 * d.efficiency());
    if (d.packing != dsl::Packing::kStream) {
      std::fprintf(stderr, "; %lld truncated, %lld dropped (on_long_example: %s)", static_cast<long long>(d.truncated),
                   static_cast<long long>(d.dropped), dsl::to_string(spec_.data.on_long_example));
    }
    std::fprintf(stderr, "\n");
  }
  step_ = first_step_;
  if (grad_sharder_) grad_sharder_->begin_backward();
  const data::Batch longest = batcher_->longest_batch();
  // The probe draws no random numbers of the run's (dropout would): a
  // resumed run goes on from the checkpoint's generator state exactly.
  at::Generator cpu_gen = at::detail::getDefaultCPUGenerator();
  const torch::Tensor cpu_state = cpu_gen.get_state();
  std::optional<at::Generator> device_gen;
  torch::Tensor device_state;
  if (device_.cuda) {
    device_gen = at::globalContext().defaultGenerator(dev_);
    device_state = device_gen->get_state();
  }
  cross_entropy_sum(model_->logits(model_->hidden_states(model_input(longest, dev_)), /*capped=*/false),
                    to_tensor(longest.targets, longest.rows, longest.seq_len, dev_), 0,
                    spec_.model.arch.final_logit_softcap)
      .backward();
  if (param_sharder_) TAILOR_RETURN_IF_ERROR(param_sharder_->end_backward());
  cpu_gen.set_state(cpu_state);
  if (device_gen) device_gen->set_state(device_state);
  zero_grads();
  meter_->reset_peak();
  return Status::ok();
}

Status Run::train_step(std::int64_t step) {
  const double t0 = now_seconds();
  const std::uint64_t sent_before = comm_ ? comm_->bytes_sent() : 0;
  std::vector<data::Batch> micro;
  std::int64_t target_tokens = 0;
  // Every rank draws the whole global batch and trains on micro-batches
  // rank, rank + world, ...: the data order is one rank's, whatever the
  // rank count, and so is a checkpoint's data position.
  for (std::int64_t k = 0; k < st_.grad_accumulation * world_; ++k) {
    data::Batch b = batcher_->next();
    target_tokens += b.target_tokens;
    if (k % world_ == rank_) micro.push_back(std::move(b));
  }
  // Normalise by the whole global batch's target tokens, so accumulated
  // training equals one large batch even with padding and masking.
  const double denom = static_cast<double>(std::max<std::int64_t>(1, target_tokens));
  zero_grads();
  double loss_sum = 0;
  std::int64_t tokens = 0;
  Measured m;
  for (const data::Batch& b : micro) {
    // Stage 0: the last micro-batch's gradients are summed as backward
    // finishes them.
    if (overlap_ && &b == &micro.back()) overlap_->arm();
    if (grad_sharder_) grad_sharder_->begin_backward();
    const std::int64_t base = meter_->current_bytes();
    PeakScope scope(*meter_);
    torch::Tensor targets = to_tensor(b.targets, b.rows, b.seq_len, dev_);
    torch::Tensor hidden = model_->hidden_states(model_input(b, dev_));
    const std::int64_t after_body = meter_->current_bytes();
    torch::Tensor loss;
    std::int64_t head_peak = 0;
    {
      PeakScope head(*meter_);
      loss = cross_entropy_sum(model_->logits(hidden, /*capped=*/false), targets, 0,
                               spec_.model.arch.final_logit_softcap);
      head_peak = head.peak_increase();
    }
    (loss * (state_.loss_scale / denom)).backward();
    if (param_sharder_) TAILOR_RETURN_IF_ERROR(param_sharder_->end_backward());
    loss_sum += loss.item<double>();
    tokens += b.rows * b.seq_len;
    m.parts.activations = std::max(m.parts.activations, Bytes(after_body - base));
    m.parts.logits = std::max(m.parts.logits, Bytes(head_peak));
    m.peak = std::max(m.peak, scope.peak_increase() + scope.start_bytes());
  }
  // Gradients as backward left them (ZeRO-2: this rank's share), before
  // ZeRO-1 sends away those it does not own.
  const Bytes gradients_after_backward = measure_static().parts.gradients;
  if (world_ > 1) {
    // The global batch's gradients: on every rank (stage 0), or on their
    // owners (ZeRO-1 now; ZeRO-2 already during backward); the loss on every
    // rank.
    if (grad_sharder_) TAILOR_RETURN_IF_ERROR(grad_sharder_->check());
    if (overlap_) {
      TAILOR_RETURN_IF_ERROR(overlap_->finish());
    } else if (!grad_sharder_ && !param_sharder_) {
      TAILOR_RETURN_IF_ERROR(all_reduce_gradients(*comm_, trainable_, kGradientBucketBytes, nccl_.get()));
    } else if (st_.zero_stage == 1) {
      TAILOR_RETURN_IF_ERROR(grad_sharder_->reduce_all());
    }
    std::vector<double> v = {loss_sum, static_cast<double>(tokens)};
    TAILOR_RETURN_IF_ERROR(all_reduce_values(*comm_, v));
    loss_sum = v[0];
    tokens = static_cast<std::int64_t>(v[1]);
  }
  // Offloaded: the step's gradients to the host, where the update runs.
  opt_->offload_gradients();
  // fp16: a step with inf/nan gradients is skipped and the scale backs
  // off (loss_scaler.h); the gradients were scaled by `used`.
  const double used = state_.loss_scale;
  const bool fp16 = st_.precision == dsl::Precision::kFp16;
  bool finite = !fp16 || opt_->grads_finite();
  if (fp16 && sharded_) {  // each rank checked its own share
    std::vector<double> v = {finite ? 0.0 : 1.0};
    TAILOR_RETURN_IF_ERROR(all_reduce_values(*comm_, v));
    finite = v[0] == 0;
  }
  DynamicLossScaler scaler(fp16, state_.loss_scale, state_.good_steps);
  const bool skipped = scaler.update(finite) == DynamicLossScaler::Outcome::kSkip;
  state_.loss_scale = scaler.scale();
  state_.good_steps = scaler.good_steps();
  if (skipped) {
    event(events::kLossScale, [&](JsonWriter& w) { w.field("step", step).field("scale", state_.loss_scale); });
  }
  double norm = 0;
  const double lr = learning_rate(spec_.training, step, total_steps_);
  if (!skipped) {
    norm = opt_->grad_norm(used);
    if (sharded_) {  // the norm of every rank's share
      std::vector<double> v = {norm * norm};
      TAILOR_RETURN_IF_ERROR(all_reduce_values(*comm_, v));
      norm = std::sqrt(v[0]);
    }
    double factor = 1.0 / used;
    if (spec_.training.grad_clip > 0 && norm > spec_.training.grad_clip) factor *= spec_.training.grad_clip / norm;
    m.parts.gradients = gradients_after_backward;
    opt_->step(lr, factor);
    // ZeRO-1/2: every rank needs every parameter; ZeRO-3 gathers them per use.
    if (sharded_ && !param_sharder_) TAILOR_RETURN_IF_ERROR(broadcast_from_owners(*comm_, trainable_, owner_, nccl_.get()));
  }
  const Measured stat = measure_static();
  m.parts.weights = stat.parts.weights;
  m.parts.adapter = stat.parts.adapter;
  m.parts.optimizer_states = stat.parts.optimizer_states;
  m.parts.master_weights = stat.parts.master_weights;
  m.allocated = meter_->current_bytes();
  m.peak = std::max(m.peak, meter_->peak_bytes());
  last_ = m;

  const double dt = now_seconds() - t0;
  tokens_this_run_ += tokens;
  state_.tokens_seen += tokens;
  const double loss_value = loss_sum / denom;
  if (!std::isfinite(loss_value)) {
    // Training diverged (or read damaged weights): nothing later in this
    // run can be trusted, and the last checkpoint is older than the damage.
    event(events::kNonfiniteLoss, [&](JsonWriter& w) {
      w.field("step", step).field("loss", std::isnan(loss_value) ? "nan" : (loss_value > 0 ? "inf" : "-inf"));
    });
    return Status::internal("the loss at step " + std::to_string(step) + " is " +
                            (std::isnan(loss_value) ? "NaN" : "infinite") +
                            ": training diverged (a lower lr, grad_clip, or bf16 rather than fp16 may help)");
  }
  // Every rank's memory, for rank 0's line.
  constexpr std::size_t kFields = 9;
  std::vector<double> per_rank(static_cast<std::size_t>(world_) * kFields, 0.0);
  {
    const std::int64_t mine[kFields] = {m.peak,
                                        m.allocated,
                                        m.parts.weights.count(),
                                        m.parts.gradients.count(),
                                        m.parts.optimizer_states.count(),
                                        m.parts.master_weights.count(),
                                        m.parts.adapter.count(),
                                        m.parts.activations.count(),
                                        m.parts.logits.count()};
    for (std::size_t k = 0; k < kFields; ++k) {
      per_rank[static_cast<std::size_t>(rank_) * kFields + k] = static_cast<double>(mine[k]);
    }
  }
  int peak_rank = 0;
  if (world_ > 1) {
    TAILOR_RETURN_IF_ERROR(all_reduce_values(*comm_, per_rank));
    // The line's memory is the rank with the largest peak: the one a budget
    // must hold (ranks differ by their ZeRO shares).
    for (int r = 1; r < world_; ++r) {
      if (per_rank[static_cast<std::size_t>(r) * kFields] > per_rank[static_cast<std::size_t>(peak_rank) * kFields]) {
        peak_rank = r;
      }
    }
    const double* row = &per_rank[static_cast<std::size_t>(peak_rank) * kFields];
    m.peak = static_cast<std::int64_t>(row[0]);
    m.allocated = static_cast<std::int64_t>(row[1]);
    m.parts.weights = Bytes(static_cast<std::int64_t>(row[2]));
    m.parts.gradients = Bytes(static_cast<std::int64_t>(row[3]));
    m.parts.optimizer_states = Bytes(static_cast<std::int64_t>(row[4]));
    m.parts.master_weights = Bytes(static_cast<std::int64_t>(row[5]));
    m.parts.adapter = Bytes(static_cast<std::int64_t>(row[6]));
    m.parts.activations = Bytes(static_cast<std::int64_t>(row[7]));
    m.parts.logits = Bytes(static_cast<std::int64_t>(row[8]));
  }
  // Evaluated after the step, on every rank, into the step's line.
  std::optional<Evaluation> eval;
  if (eval_due(step)) {
    auto e = evaluate();
    if (!e.is_ok()) return e.status();
    eval = *e;
  }
  if (!metrics_) return Status::ok();
  JsonWriter w(0);
  w.begin_object().field("step", step).field("loss", loss_value).field("lr", lr).field("grad_norm", norm);
  w.field("tokens", tokens).field("target_tokens", target_tokens).field("tokens_per_second", tokens / dt);
  w.field("step_seconds", dt).field("epoch", batcher_->epoch_progress()).field("skipped", skipped);
  write_memory(w, m);
  if (opt_->offloaded()) {
    // Rank 0's host ledger: its optimizer's copies, states and master
    // weights, and under parameter offload its parts and their gradients.
    w.key("host").begin_object();
    w.field("optimizer_states_bytes", opt_->state_bytes()).field("master_weights_bytes", opt_->master_bytes());
    if (param_sharder_ && param_sharder_->host_parts()) {
      const auto owned = param_sharder_->owned_bytes([](const torch::Tensor&) { return false; });
      w.field("parameters_bytes", owned.other).field("gradients_bytes", owned.gradients);
    }
    w.field("bytes", alloc_->host_bytes()).field("peak_bytes", alloc_->host_peak_bytes());
    w.end_object();
  }
  if (world_ > 1) {
    // Bytes rank 0 sent this step (bench/ranks_vs_ddp.sh compares them with 2Ψ).
    w.field("comm_bytes", static_cast<std::int64_t>(comm_->bytes_sent() - sent_before));
    w.field("peak_rank", static_cast<std::int64_t>(peak_rank));
    w.key("ranks").begin_array();
    static const char* kNames[kFields] = {"peak_bytes",         "allocated_bytes",       "weights_bytes",
                                          "gradients_bytes",    "optimizer_states_bytes", "master_weights_bytes",
                                          "adapter_bytes",      "activations_bytes",     "logits_bytes"};
    for (int r = 0; r < world_; ++r) {
      w.begin_object().field("rank", static_cast<std::int64_t>(r));
      for (std::size_t k = 0; k < kFields; ++k) {
        w.field(kNames[k], static_cast<std::int64_t>(per_rank[static_cast<std::size_t>(r) * kFields + k]));
      }
      w.end_object();
    }
    w.end_array();
  }
  if (eval) {
    w.field("eval_loss", eval->loss).field("eval_perplexity", std::exp(eval->loss));
    w.field("eval_tokens", eval->tokens).field("eval_seconds", eval->seconds);
  }
  w.end_object();
  metrics_->write(w);
  if (eval) {
    event(events::kEval, [&](JsonWriter& ev) {
      ev.field("step", step).field("loss", eval->loss).field("perplexity", std::exp(eval->loss));
      ev.field("tokens", eval->tokens).field("seconds", eval->seconds);
    });
  }
  print_progress(step, loss_value, m.peak, eval);
  return Status::ok();
}

void Run::print_progress(std::int64_t step, double loss, std::int64_t peak, const std::optional<Evaluation>& eval) {
  if (o_.quiet) return;
  if (eval) {
    std::fprintf(stderr, "%seval at step %lld: loss %.4f  perplexity %.2f  (%lld tokens, %.1f s)\n",
                 o_.progress ? "\r\033[K" : "", static_cast<long long>(step), eval->loss, std::exp(eval->loss),
                 static_cast<long long>(eval->tokens), eval->seconds);
  }
  const double elapsed = now_seconds() - t_start_;
  const double eta = elapsed / static_cast<double>(step - first_step_ + 1) * static_cast<double>(total_steps_ - step);
  char line[256];
  std::snprintf(line, sizeof line, "step %lld/%lld  loss %.4f  %.0f tok/s  mem %s  ETA %s",
                static_cast<long long>(step), static_cast<long long>(total_steps_), loss,
                static_cast<double>(tokens_this_run_) / elapsed, Bytes(peak).to_string().c_str(),
                format_eta(eta).c_str());
  if (o_.progress) {
    const int width = 24;
    const int filled = static_cast<int>(width * step / std::max<std::int64_t>(1, total_steps_));
    std::fprintf(stderr, "\r[%s%s] %s\033[K", std::string(static_cast<std::size_t>(filled), '#').c_str(),
                 std::string(static_cast<std::size_t>(width - filled), '.').c_str(), line);
    if (step == total_steps_) std::fprintf(stderr, "\n");
  } else if (step == first_step_ || step == total_steps_ || step % ((total_steps_ + 19) / 20) == 0) {
    std::fprintf(stderr, "%s\n", line);
  }
}

Status Run::train() {
  t_start_ = now_seconds();
  for (step_ = first_step_; step_ <= total_steps_; ++step_) {
    auto stop = stop_requested();
    if (!stop.is_ok()) return stop.status();
    if (*stop) {
      --step_;  // the last completed step; saved unless this run completed none
      if (step_ >= first_step_) TAILOR_RETURN_IF_ERROR(checkpoint(step_));
      return Status::cancelled("stopped by a signal after step " + std::to_string(step_));
    }
    TAILOR_RETURN_IF_ERROR(train_step(step_));
    const std::int64_t every = spec_.checkpoint.every_steps;
    if (every > 0 && step_ % every == 0 && step_ < total_steps_) TAILOR_RETURN_IF_ERROR(checkpoint(step_));
  }
  return Status::ok();
}

Status Run::finish() {
  meter_->set_budget(0);
  limit_ = 0;
  TAILOR_RETURN_IF_ERROR(checkpoint(total_steps_));
  if (param_sharder_) {
    // Only what is written, onto rank 0's host memory a tensor at a time
    // (never the whole model on one GPU): the adapters alone unless the
    // base is merged, and then the merge runs on the host.
    if (merge_output()) {
      TAILOR_RETURN_IF_ERROR(param_sharder_->gather_to(0, {}, /*to_host=*/true));
    } else if (has_lora(*model_)) {
      TAILOR_RETURN_IF_ERROR(param_sharder_->gather_to(0, lora_parameters(*model_), /*to_host=*/true));
    }
  }
  if (!leader()) return Status::ok();  // rank 0 writes the model
  return write_model();
}

Status Run::write_model() {
  const bool merge = merge_output();
  // Adapters: the PEFT folder, the job's output at adapter size; merged
  // into the base (NF4 weights dequantised) only when output.merge says.
  if (has_lora(*model_)) {
    const std::string base = spec_.model.path.empty() ? spec_.model.preset : spec_.model.path;
    const std::string dir = (fs::path(o_.out_dir) / "adapter").string();
    TAILOR_RETURN_IF_ERROR(as_failure(save_peft_adapter(*model_, dir, base)));
    event(events::kAdapter, [&](JsonWriter& w) { w.field("dir", dir).field("merged", merge); });
    if (merge) TAILOR_RETURN_IF_ERROR(as_failure(merge_lora(*model_, param_dtype(st_.precision))));
  }
  if (!merge) return Status::ok();
  // The final model as a Hugging Face folder (config.json + safetensors),
  // which transformers and model.path load; replaced as a whole.
  return as_failure(save_hf_model(model_, (fs::path(o_.out_dir) / "model").string(), kDefaultMaxShardBytes, export_));
}

RunnerExit Run::conclude(const Status& s) {
  const RunnerExit exit = exit_for(s);
  auto code = [&](JsonWriter& w) { w.field(events::kExitCodeKey, static_cast<std::int64_t>(exit_status(exit))); };
  switch (exit) {
    case RunnerExit::kOk:
      event(events::kDone, [&](JsonWriter& w) {
        w.field("steps", total_steps_).field("seconds", now_seconds() - t_start_).field("tokens", state_.tokens_seen);
        code(w);
      });
      return exit;
    case RunnerExit::kCancelled:
      event(events::kCancelled, [&](JsonWriter& w) {
        w.field("step", step_);
        code(w);
      });
      return exit;
    case RunnerExit::kOutOfMemory:
      event(events::kOom, [&](JsonWriter& w) {
        if (oom_report_) oom_report_(w);
        code(w);
      });
      std::fprintf(stderr, "\ntailor-runner: %s\n", s.message().c_str());
      return exit;
    case RunnerExit::kFailure:
    case RunnerExit::kBadInput:
      event(events::kError, [&](JsonWriter& w) {
        w.field("message", s.message());
        code(w);
      });
      std::fprintf(stderr, "tailor-runner: error: %s\n", s.message().c_str());
      return exit;
  }
  return exit;
}

RunnerExit Run::execute() {
  // From here on SIGTERM/SIGINT stop the run at the next step boundary
  // (train), after a checkpoint.
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  if (Status s = open_outputs(); !s.is_ok()) {
    // No events file to report in (or one that belongs to an earlier run).
    std::fprintf(stderr, "tailor-runner: %s\n", s.message().c_str());
    return exit_for(s);
  }
  Status s = guarded("prepare", [&] { return prepare(); });
  if (s.is_ok()) s = guarded("resume", [&] { return resume(); });
  if (s.is_ok()) s = guarded("probe: longest batch", [&] { return probe(); });
  if (s.is_ok()) s = guarded("training", [&] { return train(); });
  if (s.is_ok()) s = guarded("saving", [&] { return finish(); });
  return conclude(s);
}

RunnerExit Run::export_model(const std::string& folder) {
  std::error_code ec;
  fs::create_directories(o_.out_dir, ec);
  if (ec) {
    std::fprintf(stderr, "tailor-runner: cannot create %s: %s\n", o_.out_dir.c_str(), ec.message().c_str());
    return RunnerExit::kBadInput;
  }
  Status s = guarded("prepare", [&] { return prepare(); });
  std::int64_t step = 0;
  if (s.is_ok()) {
    s = guarded("loading the checkpoint", [&] {
      auto loaded = load_checkpoint(folder);
      if (!loaded.is_ok()) return as_bad_input(loaded.status());
      step = loaded->first.step;
      return load_parameters(loaded->second.params, loaded->first.base_fingerprint, folder);
    });
  }
  if (s.is_ok()) s = guarded("saving", [&] { return write_model(); });
  if (!s.is_ok()) {
    std::fprintf(stderr, "tailor-runner: export: %s\n", s.message().c_str());
    return exit_for(s);
  }
  if (!o_.quiet) {
    std::fprintf(stderr, "tailor-runner: step %lld of %s exported to %s\n", static_cast<long long>(step),
                 folder.c_str(), (fs::path(o_.out_dir) / "model").c_str());
  }
  return RunnerExit::kOk;
}

}  // namespace

RunnerExit export_checkpoint(const TrainOptions& options, const std::string& checkpoint) {
  // One process on the CPU, whatever the plan: the checkpoint's one-rank
  // layout needs no ranks, and nothing here trains.
  TrainOptions one = options;
  one.config.strategy.num_gpus = 1;
  one.config.strategy.zero_stage = 0;
  one.config.strategy.offload = dsl::Offload::kNone;
  one.rank = dist::RankEnv{};
  one.memory_limit = 0;
  one.resume = false;
  try {
    Run run(one);
    return run.export_model(checkpoint);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tailor-runner: internal error: %s\n", e.what());
    return RunnerExit::kFailure;
  }
}

RunnerExit train(const TrainOptions& options) {
  try {
    Run run(options);
    return run.execute();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tailor-runner: internal error: %s\n", e.what());
    return RunnerExit::kFailure;
  }
}

}  // namespace tailor::runner
