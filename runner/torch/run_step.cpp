// One training step of the run (run.h), in phases that pass their products
// on: the global batch drawn, forward and backward over this rank's
// micro-batches, the update, every rank's memory, the metrics line. Also the
// probe before step 1 and the evaluation on data.eval.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

#include "platform/cpu_contention.h"
#include "runner/loss_scaler.h"
#include "runner/protocol/events.h"
#include "runner/torch/cuda_kernels.h"
#include "runner/torch/data_parallel.h"
#include "runner/torch/lora.h"
#include "runner/torch/run.h"

namespace tailor::runner {
namespace {

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

// The summed cross-entropy of a batch, as training computes it.
torch::Tensor batch_loss(CausalLM& model, const data::Batch& b, const torch::Device& dev) {
  return model->loss_sum(model->hidden_states(model_input(b, dev)), to_tensor(b.targets, b.rows, b.seq_len, dev));
}

// A measured breakdown's figures in a fixed order (peak, allocated, then
// the components' table), to sum them over the ranks as doubles.
constexpr std::size_t kRankFields = 2 + std::size(strategies::kMemoryComponents);

void to_fields(const Measured& m, double* out) {
  out[0] = static_cast<double>(m.peak);
  out[1] = static_cast<double>(m.allocated);
  std::size_t k = 2;
  for (const auto& c : strategies::kMemoryComponents) out[k++] = static_cast<double>((m.parts.*c.member).count());
}

Measured from_fields(const double* in) {
  Measured m;
  m.peak = static_cast<std::int64_t>(in[0]);
  m.allocated = static_cast<std::int64_t>(in[1]);
  std::size_t k = 2;
  for (const auto& c : strategies::kMemoryComponents) m.parts.*c.member = Bytes(static_cast<std::int64_t>(in[k++]));
  return m;
}

}  // namespace

void Run::zero_grads() {
  for (torch::Tensor& p : tensors_.trainable) {
    if (p.grad().defined()) p.mutable_grad() = torch::Tensor();  // free, as set_to_none does
  }
  // The parts' or the host copies' gradients.
  if (sync_->optimizer_has_own_tensors() || opt_->offloaded()) opt_->zero_grad();
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
  sync_->correct_static_bytes(*model_, m.parts);
  // DPO's separate reference is frozen weights on the device too (beside
  // adapters, the frozen starting adapters; at ZeRO-3, this rank's parts,
  // in host memory under parameter offload).
  std::int64_t reference = st_.reference == dsl::Reference::kSeparate ? reference_adapter_bytes_ : 0;
  if (reference_sharder_) {
    if (!reference_sharder_->host_parts()) {
      reference += reference_sharder_->owned_bytes([](const torch::Tensor&) { return false; }).other;
    }
  } else if (reference_) {
    for (const auto& p : reference_->parameters())
      reference += static_cast<std::int64_t>(p.nbytes());
  }
  m.parts.weights += Bytes(reference);
  // Offloaded states and master weights are host memory, not the device's.
  m.parts.optimizer_states = Bytes(opt_->offloaded() ? 0 : opt_->state_bytes());
  m.parts.master_weights = Bytes(opt_->offloaded() ? 0 : opt_->master_bytes());
  return m;
}

// Forward and backward once on the longest batch the data can produce,
// gradients discarded: an out-of-memory surfaces before step 1, not an
// hour in, and the data order stays that of an uninterrupted run.
Status Run::probe() {
  // The budget applies to training, not to loading files.
  meter_->set_budget(limit_);
  sync_->begin_training();
  opt_->sync_from_device();  // offloaded: the host copies of what resume wrote
  meter_->reset_peak();
  event(events::kStart, [&](JsonWriter& w) {
    w.field("job", spec_.name).field("steps", data_.total_steps).field("first_step", first_step_);
    w.field("device", device_.name()).field("device_reason", device_.reason);
    if (device_.cuda) w.field("cuda_kernels", cuda_kernels_in_use());
    if (peak_flops_ > 0) w.field("gpu_model", gpu_model_).field("peak_tflops", peak_flops_ / 1e12);
    w.field("strategy", st_.describe()).field("memory_limit_bytes", limit_);
    w.field("parameters", spec_.model.arch.parameter_count());
    // The process to signal: the launcher of a multi-rank job.
    const char* launcher = std::getenv("TAILOR_LAUNCHER_PID");
    w.field("pid", launcher != nullptr ? static_cast<std::int64_t>(std::atoll(launcher)) : static_cast<std::int64_t>(::getpid()));
    w.field("rank", static_cast<std::int64_t>(rank_)).field("ranks", static_cast<std::int64_t>(world_));
    w.field("rank_pid", static_cast<std::int64_t>(::getpid()));
    if (comm_) w.field("collectives", collectives_);
    const data::PackingStats& d = data_.train->stats();
    w.field("packing", dsl::to_string(d.packing)).field("on_long_example", dsl::to_string(spec_.data.on_long_example));
    w.field("examples", d.examples).field("rows_per_epoch", d.rows_per_epoch);
    w.field("truncated", d.truncated).field("dropped", d.dropped);
    w.field("packing_efficiency", d.efficiency());
    if (!data_.mix.empty()) {
      w.field("data_mix", dsl::to_string(spec_.data.mix)).field("data_mix_taken", data_.mix);
    }
    if (data_.desirable >= 0) w.field("desirable", data_.desirable).field("undesirable", data_.undesirable);
    if (spec_.data.on_bad_record == dsl::OnBadRecord::kSkip) {
      w.field("skipped_records", data_.skipped.count);
      if (!data_.skipped.first.empty()) w.field("first_skipped", data_.skipped.first.front());
    }
  });
  if (leader() && !o_.quiet) {
    const data::PackingStats& d = data_.train->stats();
    std::fprintf(stderr, "data: %lld examples in %lld rows of %lld an epoch (packing %s, %.1f%% of cells filled)",
                 static_cast<long long>(d.examples), static_cast<long long>(d.rows_per_epoch),
                 static_cast<long long>(d.seq_len), dsl::describe(d.packing), 100.0 * d.efficiency());
    if (d.packing != dsl::Packing::kStream) {
      std::fprintf(stderr, "; %lld truncated, %lld dropped (on_long_example: %s)", static_cast<long long>(d.truncated),
                   static_cast<long long>(d.dropped), dsl::to_string(spec_.data.on_long_example));
    }
    std::fprintf(stderr, "\n");
    if (!data_.mix.empty()) {
      std::fprintf(stderr, "data: %zu datasets mixed (%s): %s\n", spec_.data.sources.size(),
                   dsl::to_string(spec_.data.mix), data_.mix.c_str());
    }
    if (data_.desirable >= 0) print_label_balance();
  }
  step_ = first_step_;
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
  const data::Batch longest = data_.train->longest_batch();
  if (preference()) {
    TAILOR_ASSIGN_OR_RETURN(const PairReference reference, pair_reference(longest));
    sync_->before_micro_batch(/*last=*/false);
    pair_loss(model_->hidden_states(pairs_input(longest)), longest, reference, /*nll_weight=*/1.0)
        .loss_sum.backward();
  } else {
    sync_->before_micro_batch(/*last=*/false);
    batch_loss(model_, longest, dev_).backward();
  }
  TAILOR_RETURN_IF_ERROR(sync_->after_backward());
  cpu_gen.set_state(cpu_state);
  if (device_gen) device_gen->set_state(device_state);
  zero_grads();
  meter_->reset_peak();
  return Status::ok();
}

Status Run::train_step(std::int64_t step) {
  const double t0 = now_seconds();
  // Only the rank writing the metrics reads the machine's counters.
  const platform::CpuTimes cpu0 = metrics_ ? platform::read_cpu_times() : platform::CpuTimes{};
  const std::uint64_t sent_before = comm_ ? comm_->bytes_sent() : 0;
  const GlobalBatch batch = draw_global_batch();
  // Normalised by the whole global batch's target tokens, so accumulated
  // training equals one large batch even with padding and masking; a
  // preference loss is a mean over the global batch's pairs, and an NLL
  // term (ORPO's, CPO-SimPO's) a mean over its chosen rows' tokens.
  const double denom = preference() ? static_cast<double>(spec_.training.global_batch_size)
                                    : static_cast<double>(std::max<std::int64_t>(1, batch.target_tokens));
  const double nll_weight = denom / static_cast<double>(std::max<std::int64_t>(1, batch.nll_tokens));
  TAILOR_ASSIGN_OR_RETURN(Pass pass, forward_backward(batch.mine, denom, nll_weight));
  TAILOR_ASSIGN_OR_RETURN(const Update u, update(step, pass.memory));
  last_ = pass.memory;
  const double seconds = now_seconds() - t0;
  const double contention =
      metrics_ ? platform::contention_between(cpu0, platform::read_cpu_times(), timed_cores()) : -1.0;
  tokens_this_run_ += pass.tokens;
  state_.tokens_seen += pass.tokens;
  const double loss = pass.loss_sum / denom;
  TAILOR_RETURN_IF_ERROR(check_loss(step, loss));
  TAILOR_ASSIGN_OR_RETURN(const RankMemory memory, gather_memory(pass.memory));
  // Evaluated after the step, on every rank, into the step's line.
  std::optional<Evaluation> eval;
  if (eval_due(step)) {
    TAILOR_ASSIGN_OR_RETURN(eval, evaluate());
  }
  if (!metrics_) return Status::ok();
  const std::uint64_t sent = comm_ ? comm_->bytes_sent() - sent_before : 0;
  write_metrics(step, loss, u, pass, batch.target_tokens, seconds, contention, sent, memory, eval);
  if (eval) {
    event(events::kEval, [&](JsonWriter& ev) {
      ev.field("step", step).field("loss", eval->loss);
      if (eval->preference) {
        ev.field("pairs", eval->tokens);
        write_preference(ev, *eval->preference, "");
      } else {
        ev.field("perplexity", std::exp(eval->loss)).field("tokens", eval->tokens);
      }
      ev.field("seconds", eval->seconds);
    });
  }
  if (prompts_due(step)) TAILOR_RETURN_IF_ERROR(answer_prompts(step));
  print_progress(step, loss, memory.line().peak, eval);
  return Status::ok();
}

// Every rank draws the whole global batch and trains on micro-batches
// rank, rank + world, ...: the data order is one rank's, whatever the rank
// count, and so is a checkpoint's data position.
Run::GlobalBatch Run::draw_global_batch() {
  GlobalBatch out;
  for (std::int64_t k = 0; k < st_.grad_accumulation * world_; ++k) {
    data::Batch b = data_.train->next();
    out.target_tokens += b.target_tokens;
    out.nll_tokens += nll_targets(spec_.training, b);
    if (k % world_ == rank_) out.mine.push_back(std::move(b));
  }
  return out;
}

// kto's labelled completions: each kind's count, and where the weights
// leave the range the KTO paper gives for uneven data (Ethayarajh et al.
// 2024, Eq. 8: desirable_weight n_D / (undesirable_weight n_U) in [1, 4/3];
// TRL's KTOTrainer warns alike), the weight that would bring it there.
void Run::print_label_balance() const {
  const double d = static_cast<double>(data_.desirable), u = static_cast<double>(data_.undesirable);
  std::fprintf(stderr, "data: %lld desirable and %lld undesirable completions (data.label_field)\n",
               static_cast<long long>(data_.desirable), static_cast<long long>(data_.undesirable));
  if (d == 0 || u == 0) {
    std::fprintf(stderr, "note: every completion is %s: KTO learns from both kinds\n",
                 d == 0 ? "undesirable" : "desirable");
    return;
  }
  const double wd = spec_.training.desirable_weight, wu = spec_.training.undesirable_weight;
  const double ratio = wd * d / (wu * u);
  if (ratio >= 1.0 && ratio <= 4.0 / 3.0) return;
  std::fprintf(stderr,
               "note: desirable_weight x %lld / (undesirable_weight x %lld) is %.3g; the KTO paper (Eq. 8) keeps it "
               "in [1, 4/3]: desirable_weight %.3g to %.3g, or undesirable_weight %.3g to %.3g\n",
               static_cast<long long>(data_.desirable), static_cast<long long>(data_.undesirable), ratio, wu * u / d,
               4.0 / 3.0 * wu * u / d, 0.75 * wd * d / u, wd * d / u);
}

// The micro-batches' forward and backward passes with the memory each
// region needed, then the global batch's gradients where the optimizer
// reads them and the loss summed over the ranks.
Result<Run::Pass> Run::forward_backward(const std::vector<data::Batch>& micro, double denom, double nll_weight) {
  zero_grads();
  Pass out;
  Measured& m = out.memory;
  torch::Tensor loss_sum;
  for (const data::Batch& b : micro) {
    // DPO and KTO: the reference's forward (and KTO's KL rows) first,
    // freed before the trained one (none for ORPO and SimPO).
    PairReference reference;
    if (preference()) {
      TAILOR_ASSIGN_OR_RETURN(reference, pair_reference(b));
    }
    sync_->before_micro_batch(&b == &micro.back());
    const std::int64_t base = meter_->current_bytes();
    PeakScope scope(*meter_);
    // (Pairs make their targets in pair_loss.)
    torch::Tensor targets = preference() ? torch::Tensor() : to_tensor(b.targets, b.rows, b.seq_len, dev_);
    torch::Tensor hidden = model_->hidden_states(preference() ? pairs_input(b) : model_input(b, dev_));
    const std::int64_t after_body = meter_->current_bytes();
    torch::Tensor loss;
    std::int64_t head_peak = 0;
    {
      PeakScope head(*meter_);
      if (preference()) {
        PreferenceLossOut pairs = pair_loss(hidden, b, reference, nll_weight);
        loss = pairs.loss_sum;
        out.preference.add(pairs.sums);
      } else {
        loss = model_->loss_sum(hidden, targets);
      }
      head_peak = head.peak_increase();
    }
    (loss * (state_.loss_scale / denom)).backward();
    TAILOR_RETURN_IF_ERROR(sync_->after_backward());
    // Summed where the loss is, in fp64 as the host would: reading each
    // micro-batch's loss would make the host wait for the GPU before it
    // queues the next micro-batch.
    const torch::Tensor l64 = loss.detach().to(torch::kFloat64);
    loss_sum = loss_sum.defined() ? loss_sum + l64 : l64;
    out.tokens += b.rows * b.seq_len;
    m.parts.activations = std::max(m.parts.activations, Bytes(after_body - base));
    m.parts.logits = std::max(m.parts.logits, Bytes(head_peak));
    m.peak = std::max(m.peak, scope.peak_increase() + scope.start_bytes());
  }
  if (loss_sum.defined()) out.loss_sum = loss_sum.item<double>();
  // Gradients as backward left them (ZeRO-2: this rank's share), before
  // ZeRO-1 sends away those it does not own.
  m.parts.gradients = measure_static().parts.gradients;
  TAILOR_RETURN_IF_ERROR(sync_->reduce());
  if (world_ > 1) {
    std::vector<double> v = {out.loss_sum, static_cast<double>(out.tokens)};
    TAILOR_RETURN_IF_ERROR(all_reduce_values(*comm_, v));
    out.loss_sum = v[0];
    out.tokens = static_cast<std::int64_t>(v[1]);
  }
  if (preference()) TAILOR_RETURN_IF_ERROR(reduce_preference(out.preference));
  return out;
}

// The optimizer's step with the learning rate of `step`, clipped; under
// fp16 a step with inf/nan gradients is skipped and the scale backs off
// (loss_scaler.h). Completes the step's `memory` with the static components.
Result<Run::Update> Run::update(std::int64_t step, Measured& m) {
  Update u;
  u.lr = learning_rate(spec_.training, step, data_.total_steps);
  // Offloaded: the step's gradients to the host, where the update runs.
  opt_->offload_gradients();
  const double used = state_.loss_scale;  // the gradients are scaled by it
  const bool fp16 = st_.precision == dsl::Precision::kFp16;
  bool finite = true;
  if (fp16) {
    TAILOR_ASSIGN_OR_RETURN(finite, sync_->all_finite(opt_->grads_finite()));
  }
  DynamicLossScaler scaler(fp16, state_.loss_scale, state_.good_steps);
  u.skipped = scaler.update(finite) == DynamicLossScaler::Outcome::kSkip;
  state_.loss_scale = scaler.scale();
  state_.good_steps = scaler.good_steps();
  if (u.skipped) {
    event(events::kLossScale, [&](JsonWriter& w) { w.field("step", step).field("scale", state_.loss_scale); });
  }
  if (u.skipped) {
    m.parts.gradients = Bytes(0);
  } else {
    TAILOR_ASSIGN_OR_RETURN(u.norm, sync_->norm(opt_->grad_norm(used)));
    double factor = 1.0 / used;
    if (spec_.training.grad_clip > 0 && u.norm > spec_.training.grad_clip) factor *= spec_.training.grad_clip / u.norm;
    opt_->step(u.lr, factor);
    TAILOR_RETURN_IF_ERROR(sync_->after_update());
  }
  const Measured stat = measure_static();
  m.parts.weights = stat.parts.weights;
  m.parts.adapter = stat.parts.adapter;
  m.parts.optimizer_states = stat.parts.optimizer_states;
  m.parts.master_weights = stat.parts.master_weights;
  m.allocated = meter_->current_bytes();
  m.peak = std::max(m.peak, meter_->peak_bytes());
  return u;
}

// Training diverged (or read damaged weights): nothing later in this run
// can be trusted, and the last checkpoint is older than the damage.
Status Run::check_loss(std::int64_t step, double loss) {
  if (std::isfinite(loss)) return Status::ok();
  diverged_ = true;
  event(events::kNonfiniteLoss, [&](JsonWriter& w) {
    w.field("step", step).field("loss", std::isnan(loss) ? "nan" : (loss > 0 ? "inf" : "-inf"));
  });
  return Status::internal("the loss at step " + std::to_string(step) + " is " +
                          (std::isnan(loss) ? "NaN" : "infinite") +
                          ": training diverged (a lower lr, grad_clip, or bf16 rather than fp16 may help)");
}

// Every rank's memory for rank 0's line, whose figures are the rank with
// the largest peak: the one a budget must hold (ranks differ by their ZeRO
// shares).
Result<Run::RankMemory> Run::gather_memory(const Measured& mine) {
  RankMemory out;
  if (world_ == 1) {
    out.ranks = {mine};
    return out;
  }
  std::vector<double> fields(static_cast<std::size_t>(world_) * kRankFields, 0.0);
  to_fields(mine, &fields[static_cast<std::size_t>(rank_) * kRankFields]);
  TAILOR_RETURN_IF_ERROR(all_reduce_values(*comm_, fields));
  for (int r = 0; r < world_; ++r) {
    out.ranks.push_back(from_fields(&fields[static_cast<std::size_t>(r) * kRankFields]));
    if (out.ranks.back().peak > out.ranks[static_cast<std::size_t>(out.peak_rank)].peak) out.peak_rank = r;
  }
  return out;
}

void Run::write_metrics(std::int64_t step, double loss, const Update& u, const Pass& pass, std::int64_t target_tokens,
                        double seconds, double contention, std::uint64_t sent, const RankMemory& memory,
                        const std::optional<Evaluation>& eval) {
  JsonWriter w(0);
  w.begin_object().field("step", step).field("time", wall_seconds()).field("loss", loss).field("lr", u.lr);
  w.field("grad_norm", u.norm);
  w.field("tokens", pass.tokens).field("target_tokens", target_tokens).field("tokens_per_second", pass.tokens / seconds);
  // Every rank's GPU counts in the peak (ranks on GPUs of their own).
  if (peak_flops_ > 0 && seconds > 0) {
    w.field("mfu", pass.tokens / seconds * model_flops_per_token_ / (peak_flops_ * world_));
  }
  w.field("step_seconds", seconds).field("epoch", data_.train->epoch_progress()).field("skipped", u.skipped);
  // Whether other processes slowed this step (the calibration store leaves
  // busy steps' speeds out).
  if (contention >= 0) w.field("contention", contention);
  if (preference()) write_preference(w, pass.preference, "");
  write_memory(w, memory.line());
  if (opt_->offloaded() || st_.activation_offload) {
    // Rank 0's host ledger: its optimizer's copies, states and master
    // weights, and under parameter offload its parts and their gradients
    // (and a separate reference's parts); offloaded activations at their
    // peak, in the ledger's peak.
    w.key("host").begin_object();
    w.field("optimizer_states_bytes", opt_->state_bytes()).field("master_weights_bytes", opt_->master_bytes());
    if (const auto host = sync_->host_parts()) {
      w.field("parameters_bytes", host->parameters).field("gradients_bytes", host->gradients);
    }
    if (reference_sharder_ && reference_sharder_->host_parts()) {
      w.field("reference_bytes", reference_sharder_->owned_bytes([](const torch::Tensor&) { return false; }).other);
    }
    w.field("bytes", alloc_->host_bytes()).field("peak_bytes", alloc_->host_peak_bytes());
    w.end_object();
  }
  if (world_ > 1) {
    // Bytes rank 0 sent this step (bench/ranks_vs_ddp.sh compares them with 2Ψ).
    w.field("comm_bytes", static_cast<std::int64_t>(sent));
    w.field("peak_rank", static_cast<std::int64_t>(memory.peak_rank));
    w.key("ranks").begin_array();
    for (int r = 0; r < world_; ++r) {
      const Measured& m = memory.ranks[static_cast<std::size_t>(r)];
      w.begin_object().field("rank", static_cast<std::int64_t>(r));
      w.field("peak_bytes", m.peak).field("allocated_bytes", m.allocated);
      for (const auto& c : strategies::kMemoryComponents) {
        w.field(std::string(c.key) + "_bytes", (m.parts.*c.member).count());
      }
      w.end_object();
    }
    w.end_array();
  }
  if (eval) {
    w.field("eval_loss", eval->loss);
    // A perplexity means something for the next-token loss only.
    if (!eval->preference) w.field("eval_perplexity", std::exp(eval->loss));
    w.field("eval_tokens", eval->tokens).field("eval_seconds", eval->seconds);
    if (eval->preference) write_preference(w, *eval->preference, "eval_");
  }
  w.end_object();
  metrics_->write(w);
  if (trackers_) trackers_->notify();
}

bool Run::eval_due(std::int64_t step) const {
  if (!data_.eval) return false;
  const std::int64_t every = spec_.training.eval_every;
  return step == data_.total_steps || (every > 0 && step % every == 0);
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
  const std::int64_t batches = data_.eval->batches_per_epoch();
  // Where forward passes are collective (ZeRO-3) every rank runs as many,
  // a rank out of batches a one-token one that counts nothing.
  const std::int64_t rounds = (batches + world_ - 1) / world_;
  double sums[2] = {0, 0};  // loss, target tokens (dpo: pairs)
  PreferenceSums pairs;
  for (std::int64_t round = 0; round < rounds; ++round) {
    const std::int64_t k = round * world_ + rank_;
    data::Batch b;
    if (k < batches && preference()) {
      b = data_.eval->pass_batch(k);
      TAILOR_ASSIGN_OR_RETURN(const PairReference reference, pair_reference(b));
      const PreferenceLossOut l = pair_loss(model_->hidden_states(pairs_input(b)), b, reference, 0.0);
      pairs.add(l.sums);
      TAILOR_RETURN_IF_ERROR(sync_->after_backward());
      continue;
    }
    if (k < batches) {
      b = data_.eval->pass_batch(k);
    } else if (sync_->collective_forward()) {
      b.rows = b.seq_len = 1;
      b.inputs = b.positions = b.segment_ids = {0};
      b.targets = {-100};
      // The collective forwards of a pair batch, in its order: the
      // reference's (the model's own with adapters off or frozen, or the
      // sharded copy's), and kto's over its KL rows (the trained model's,
      // then the reference's).
      const auto reference_pass = [&]() -> Status {
        if (reference_is_own_forward()) {
          batch_loss(model_, b, dev_);
          return sync_->after_backward();
        }
        if (reference_sharder_) batch_loss(reference_, b, dev_);
        return Status::ok();
      };
      if (preference()) TAILOR_RETURN_IF_ERROR(reference_pass());
      if (st_.kl_rows) {
        batch_loss(model_, b, dev_);
        TAILOR_RETURN_IF_ERROR(sync_->after_backward());
        TAILOR_RETURN_IF_ERROR(reference_pass());
      }
    } else {
      break;
    }
    sums[0] += batch_loss(model_, b, dev_).item<double>();
    sums[1] += static_cast<double>(b.target_tokens);
    // ZeRO-3's head is still gathered: no backward released it.
    TAILOR_RETURN_IF_ERROR(sync_->after_backward());
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
  if (preference()) {
    TAILOR_RETURN_IF_ERROR(reduce_preference(pairs));
    e.preference = pairs;
    e.tokens = static_cast<std::int64_t>(pairs.pairs);
    e.loss = pairs.mean_loss(nll_term_weight(spec_.training));
  }
  e.seconds = now_seconds() - t0;
  return e;
}

}  // namespace tailor::runner
