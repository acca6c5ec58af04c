#include "runner/torch/trainer.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/units.h"
#include "dsl/spec_fields.h"
#include "dsl/spec_loader.h"
#include "dsl/yaml_tree.h"
#include "platform/failpoint.h"
#include "runner/dist/launcher.h"
#include "runner/protocol/events.h"
#include "runner/torch/data_parallel.h"
#include "runner/torch/lora.h"
#include "runner/torch/run.h"
#include "strategies/plan_document.h"

namespace tailor::runner {
namespace fs = std::filesystem;
namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true); }

}  // namespace

void watch_stop_signals() {
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
}

bool stop_signalled() { return g_stop.load(); }

namespace {

std::string format_eta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long s = std::lround(seconds);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  return buf;
}

}  // namespace

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

torch::Tensor to_tensor(const std::vector<std::int32_t>& v, std::int64_t rows, std::int64_t cols,
                        const torch::Device& device) {
  return torch::from_blob(const_cast<std::int32_t*>(v.data()), {rows, cols}, torch::kInt32).to(device, torch::kInt64);
}

torch::Dtype param_dtype(dsl::Precision p) {
  switch (p) {
    case dsl::Precision::kFp32: return torch::kFloat32;
    case dsl::Precision::kFp16: return torch::kFloat16;
    default: return torch::kBFloat16;
  }
}

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
  events_ = std::make_unique<JsonLines>(dist::rank_events_path(o_.out_dir, rank_), o_.resume || o_.append_events);
  if (ec || (metrics_ && !metrics_->ok()) || !events_->ok()) {
    events_.reset();
    return Status::invalid_argument("cannot write to output folder " + o_.out_dir);
  }
  // (A spec whose trackers cannot start fails in prepare, as bad input.)
  if (leader() && spec_.tracking.any() && dsl::check_tracking(spec_).is_ok()) start_trackers();
  return Status::ok();
}

void Run::start_trackers() {
  tracking::RunInfo info;
  info.out_dir = o_.out_dir;
  info.spec_yaml = dsl::emit_yaml(dsl::write_job_spec(spec_));
  if (!cfg_.plan_path.empty()) {
    std::ifstream in(cfg_.plan_path);
    std::stringstream text;
    text << in.rdbuf();
    info.plan_json = text.str();
  }
  info.model_path = (fs::path(o_.out_dir) / (st_.adapter == dsl::Adapter::kNone ? "model" : "adapter")).string();
  info.resume = o_.resume;
  trackers_ = std::make_unique<tracking::Trackers>(spec_, info, [this](const tracking::TrackerState& t) {
    // On the terminal too (`tailor run`): a tracker that went down, came
    // back, refused records or was left behind.
    if (!o_.quiet && !(t.state == "closed" || (t.state == "up" && t.step == 0))) {
      std::fprintf(stderr, "%stailor-runner: %s %s%s%s\n", o_.progress ? "\r\033[K" : "", t.tracker.c_str(),
                   t.state.c_str(), t.error.empty() ? "" : ": ", t.error.c_str());
    }
    event(events::kTracker, [&](JsonWriter& w) {
      w.field("tracker", t.tracker).field("state", t.state);
      if (!t.error.empty()) w.field("error", t.error);
      w.field("step", t.step).field("pending_bytes", t.pending_bytes);
    });
  });
}

Result<bool> Run::stop_requested() {
  bool stop = g_stop.load();
  if (world_ == 1) return stop;
  std::vector<double> v = {stop ? 1.0 : 0.0};
  TAILOR_RETURN_IF_ERROR(all_reduce_values(*comm_, v));
  return v[0] > 0;
}

void Run::print_progress(std::int64_t step, double loss, std::int64_t peak, const std::optional<Evaluation>& eval) {
  if (o_.quiet) return;
  if (eval && eval->preference && eval->preference->desirable + eval->preference->undesirable > 0) {
    // kto's labelled completions: each kind's mean reward.
    const PreferenceSums& p = *eval->preference;
    std::fprintf(stderr,
                 "%seval at step %lld: loss %.4f  reward desirable %.4f, undesirable %.4f  (%lld examples, %.1f s)\n",
                 o_.progress ? "\r\033[K" : "", static_cast<long long>(step), eval->loss,
                 p.chosen_rewards / std::max(1.0, p.desirable), p.rejected_rewards / std::max(1.0, p.undesirable),
                 static_cast<long long>(eval->tokens), eval->seconds);
  } else if (eval && eval->preference) {
    const PreferenceSums& p = *eval->preference;
    std::fprintf(stderr, "%seval at step %lld: loss %.4f  reward accuracy %.1f%%  margin %.4f  (%lld pairs, %.1f s)\n",
                 o_.progress ? "\r\033[K" : "", static_cast<long long>(step), eval->loss,
                 100.0 * p.accurate / std::max(1.0, p.pairs), p.margins / std::max(1.0, p.pairs),
                 static_cast<long long>(eval->tokens), eval->seconds);
  } else if (eval) {
    std::fprintf(stderr, "%seval at step %lld: loss %.4f  perplexity %.2f  (%lld tokens, %.1f s)\n",
                 o_.progress ? "\r\033[K" : "", static_cast<long long>(step), eval->loss, std::exp(eval->loss),
                 static_cast<long long>(eval->tokens), eval->seconds);
  }
  const double elapsed = now_seconds() - t_start_;
  const double eta = elapsed / static_cast<double>(step - first_step_ + 1) * static_cast<double>(data_.total_steps - step);
  char line[256];
  std::snprintf(line, sizeof line, "step %lld/%lld  loss %.4f  %.0f tok/s  mem %s  ETA %s",
                static_cast<long long>(step), static_cast<long long>(data_.total_steps), loss,
                static_cast<double>(tokens_this_run_) / elapsed, Bytes(peak).to_string().c_str(),
                format_eta(eta).c_str());
  if (o_.progress) {
    const int width = 24;
    const int filled = static_cast<int>(width * step / std::max<std::int64_t>(1, data_.total_steps));
    std::fprintf(stderr, "\r[%s%s] %s\033[K", std::string(static_cast<std::size_t>(filled), '#').c_str(),
                 std::string(static_cast<std::size_t>(width - filled), '.').c_str(), line);
    if (step == data_.total_steps) std::fprintf(stderr, "\n");
  } else if (step == first_step_ || step == data_.total_steps || step % ((data_.total_steps + 19) / 20) == 0) {
    std::fprintf(stderr, "%s\n", line);
  }
}

Status Run::train() {
  t_start_ = now_seconds();
  for (step_ = first_step_; step_ <= data_.total_steps; ++step_) {
    auto stop = stop_requested();
    if (!stop.is_ok()) return stop.status();
    if (*stop) {
      --step_;  // the last completed step; saved unless this run completed none
      if (step_ >= first_step_) TAILOR_RETURN_IF_ERROR(checkpoint(step_));
      return Status::cancelled("stopped by a signal after step " + std::to_string(step_));
    }
    TAILOR_RETURN_IF_ERROR(train_step(step_));
    const std::int64_t every = spec_.checkpoint.every_steps;
    if (every > 0 && step_ % every == 0 && step_ < data_.total_steps) {
      TAILOR_RETURN_IF_ERROR(checkpoint(step_));
      TAILOR_RETURN_IF_ERROR(hold_if_armed());
    }
  }
  return Status::ok();
}

// A test that kills, stops or starves a run mid-way needs the run to be
// mid-way when the blow lands: armed, a run that started at step 1 waits
// after its first checkpoint until it is asked to stop (then stops as a
// signal stops it, that checkpoint its last) or is killed, on every rank
// alike (stop_requested is collective).
// A resumed run passes, so the retry trains to the end.
Status Run::hold_if_armed() {
  if (held_ || first_step_ != 1 || !platform::failpoint_armed("runner.hold_after_first_checkpoint")) {
    return Status::ok();
  }
  held_ = true;
  for (;;) {
    auto stop = stop_requested();
    if (!stop.is_ok()) return stop.status();
    if (*stop) return Status::cancelled("stopped by a signal after step " + std::to_string(step_));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Status Run::finish() {
  meter_->set_budget(0);
  limit_ = 0;
  TAILOR_RETURN_IF_ERROR(checkpoint(data_.total_steps));
  // Only what is written, onto rank 0's host memory a tensor at a time
  // (never the whole model on one GPU): the adapters alone unless the base
  // is merged, and then the merge runs on the host.
  if (merge_output()) {
    TAILOR_RETURN_IF_ERROR(sync_->gather_for_output({}));
  } else if (has_lora(*model_)) {
    // With the embedding and head trained whole beside them (modules_to_save).
    std::vector<torch::Tensor> saved = lora_parameters(*model_);
    for (torch::Tensor& t : whole_module_parameters(*model_))
      saved.push_back(std::move(t));
    TAILOR_RETURN_IF_ERROR(sync_->gather_for_output(saved));
  }
  if (!leader()) return Status::ok();  // rank 0 writes the model
  TAILOR_RETURN_IF_ERROR(write_model());
  // The model is written, but a run that could not write one checkpoint
  // cannot resume and would lose everything to a crash: not a success.
  if (checkpoints_written_ == 0 && checkpoints_failed_ > 0) {
    return Status::io_error("none of this run's " + std::to_string(checkpoints_failed_) +
                            " checkpoints could be written (the last: " + checkpoint_failure_ + ")");
  }
  return Status::ok();
}

Status Run::write_model() {
  const bool merge = merge_output();
  // Adapters: the PEFT folder, the job's output at adapter size; merged
  // into the base (NF4 weights dequantised) only when output.merge says.
  if (has_lora(*model_)) {
    const std::string base = spec_.model.path.empty() ? spec_.model.preset : spec_.model.path;
    const std::string dir = (fs::path(o_.out_dir) / "adapter").string();
    TAILOR_RETURN_IF_ERROR(as_failure(save_peft_adapter(*model_, dir, base)));
    // Its tokenizer and chat template beside it: the folder loads as the
    // tokenizer training used, template included.
    TAILOR_RETURN_IF_ERROR(as_failure(write_tokenizer_files(dir, data_.tokenizer)));
    event(events::kAdapter, [&](JsonWriter& w) { w.field("dir", dir).field("merged", merge); });
    if (merge) TAILOR_RETURN_IF_ERROR(as_failure(merge_lora(*model_, param_dtype(st_.precision))));
  }
  if (!merge) return Status::ok();
  // The final model as a Hugging Face folder (config.json + safetensors),
  // which transformers and model.path load; replaced as a whole.
  return as_failure(save_hf_model(model_, (fs::path(o_.out_dir) / "model").string(), kDefaultMaxShardBytes, data_.tokenizer));
}

RunnerExit Run::conclude(const Status& s) {
  // A non-finite loss is its own exit: retrying the same plan only
  // diverges again at the same step.
  const RunnerExit exit = diverged_ && !s.is_ok() ? RunnerExit::kDiverged : exit_for(s);
  // The trackers get the last metrics and the outcome before the terminal
  // event (after it tailord reads no more); what they cannot take in time
  // stays for the job's next runner.
  if (trackers_) {
    trackers_->finish(exit == RunnerExit::kOk          ? tracking::RunOutcome::kFinished
                      : exit == RunnerExit::kCancelled ? tracking::RunOutcome::kKilled
                                                       : tracking::RunOutcome::kFailed,
                      kTrackerFinishTimeout);
    trackers_.reset();
  }
  auto code = [&](JsonWriter& w) { w.field(events::kExitCodeKey, static_cast<std::int64_t>(exit_status(exit))); };
  switch (exit) {
    case RunnerExit::kOk:
      event(events::kDone, [&](JsonWriter& w) {
        w.field("steps", data_.total_steps).field("seconds", now_seconds() - t_start_).field("tokens", state_.tokens_seen);
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
    case RunnerExit::kDiverged:
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
  watch_stop_signals();
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
  exporting_ = true;
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

bool Run::merge_output() const { return o_.merge || spec_.output.merge_for(has_lora(*model_)); }

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
