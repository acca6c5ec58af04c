// One training run of tailor-runner (trainer.h's train and
// export_checkpoint), in phases: open_outputs, prepare (device, ranks,
// data, model, adapters, gradient synchronisation, optimizer), resume,
// probe, train (train_step and checkpoints), finish; conclude writes the
// terminal event with the exit code. Each phase returns a Status; LibTorch
// exceptions become Statuses in guarded(). Private to runner/torch: the
// class is spread over
//   trainer.cpp          the phases in order, the loop, the end, the events
//   run_setup.cpp        the device, the ranks, the data, the model
//   run_step.cpp         the probe, one step, the evaluation, measured memory
//   run_checkpoints.cpp  writing checkpoints and resuming from them
//   run_preference.cpp   preference methods: the pairs' loss, kto's KL estimate, their metrics
//   run_generation.cpp   training.eval_prompts answered at each evaluation
//   run_probe.cpp        strategy.probe's measurement of one candidate
// and gradient_sync.h holds what differs between the ZeRO stages.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/json_writer.h"
#include "core/status.h"
#include "runner/data/batcher.h"
#include "runner/data/dataset.h"
#include "runner/data/token_cache.h"
#include "runner/device_choice.h"
#include "runner/dist/communicator.h"
#include "runner/io/logp_cache.h"
#include "runner/protocol/probe.h"
#include "runner/torch/checkpoint.h"
#include "runner/torch/cuda_memory.h"
#include "runner/torch/gradient_sync.h"
#include "runner/torch/hf_checkpoint.h"
#include "runner/torch/lora.h"
#include "runner/torch/model.h"
#include "runner/torch/nccl_group.h"
#include "runner/torch/optimizer.h"
#include "runner/torch/preference_loss.h"
#include "runner/torch/tracking_allocator.h"
#include "runner/torch/trainer.h"
#include "runner/torch/zero3.h"
#include "runner/tracking/trackers.h"
#include "strategies/strategy.h"

namespace tailor::runner {

// Appends one JSON object per line and flushes it, so a reader following
// the file (tailord, `tailor run`) sees each line as soon as it is written.
// Locked: the trackers' threads report their state as events.
class JsonLines {
 public:
  JsonLines(const std::string& path, bool append) : out_(path, append ? std::ios::app : std::ios::trunc) {}
  bool ok() const { return static_cast<bool>(out_); }
  void write(const JsonWriter& w) {
    std::lock_guard<std::mutex> lk(mu_);
    out_ << w.str() << '\n';
    out_.flush();
  }

 private:
  std::mutex mu_;
  std::ofstream out_;
};

// Measured bytes: the planner's components (from tensor sizes and the
// tracking allocator) plus the allocator's current and peak.
struct Measured {
  strategies::MemoryBreakdown parts;
  std::int64_t peak = 0, allocated = 0;
};
void write_memory(JsonWriter& w, const Measured& m);

double now_seconds();
double wall_seconds();  // since the epoch: metrics lines' "time"
// From the call on, SIGTERM and SIGINT ask this process to stop (training
// at its next step boundary, after a checkpoint; a probe at its next step);
// whether one has.
void watch_stop_signals();
bool stop_signalled();
// How long the end of a run waits for its trackers to take the last
// metrics and the outcome; the rest is left for the job's next runner.
inline constexpr std::chrono::milliseconds kTrackerFinishTimeout{30000};
// A pair batch's rows as the model reads them (run_preference.cpp).
ModelInput pair_input(const data::Batch& b, const torch::Device& device);
// A reward model's rows: each row's whole sequence, its inputs then its
// last target (the token the row ends with: EOS unless cut at seq_len), so
// one column wider than the batch, padded with `pad`; and where each row's
// score is read: its last token that is not `pad`, as transformers'
// sequence classifiers pool (run_preference.cpp).
struct ScoredRows {
  ModelInput input;
  std::vector<std::int64_t> last;
};
ScoredRows scored_rows(const data::Batch& b, const torch::Device& device, std::int32_t pad);
// ORPO: the chosen rows' prompt targets (each prompt token after the
// first, predicted from the one before; -100 elsewhere) into `out` when
// given, and the count of the chosen rows' prompt and completion targets
// (the NLL's tokens).
std::int64_t orpo_prompt_targets(const data::Batch& b, std::vector<std::int32_t>* out);
// Whether the loss has an NLL term: orpo's, or simpo's under cpo_alpha.
bool has_nll_term(const dsl::TrainingSpec& t);
// The NLL tokens `b` adds to its step's count: orpo's chosen prompts and
// completions, simpo's chosen completions when training.cpo_alpha is set;
// 0 for the others (no NLL term).
std::int64_t nll_targets(const dsl::TrainingSpec& t, const data::Batch& b);
// The NLL term's weight in the loss: orpo's 1, simpo's cpo_alpha.
double nll_term_weight(const dsl::TrainingSpec& t);
torch::Tensor to_tensor(const std::vector<std::int32_t>& v, std::int64_t rows, std::int64_t cols,
                        const torch::Device& device);
torch::Dtype param_dtype(dsl::Precision p);
inline int optimizer_tensors_per_slot(dsl::Optimizer o) { return o == dsl::Optimizer::kAdamw8bit ? 5 : 3; }

// The run's one Status -> exit mapping (trainer.cpp), and the two ways a
// phase marks its errors: a problem with the job's input (data, weights,
// checkpoint) is bad input unless it is a bug; an error writing results
// after training is a failure a retry may get past, never bad input.
RunnerExit exit_for(const Status& s);
Status as_bad_input(const Status& s);
Status as_failure(const Status& s);

class Run {
 public:
  explicit Run(const TrainOptions& o)
      : o_(o), cfg_(o.config), spec_(o.config.spec), st_(o.config.strategy), rank_(o.rank.rank), world_(o.rank.world) {}

  RunnerExit execute();
  // strategy.probe (probe_plans.cpp): this plan's steps on the longest
  // batches, the table's warm-up steps untimed, then its timed steps (on
  // to its least timed seconds, up to its most steps), into `out`; the outputs
  // are not opened and nothing is written. Never throws.
  void measure(const ProbeTable& steps, ProbeMeasurement& out);
  // The model of checkpoint `folder` written as the job's output model
  // (export_checkpoint in trainer.h). The options are one rank's.
  RunnerExit export_model(const std::string& folder);

 private:
  // What load_data produces.
  struct Data {
    std::unique_ptr<data::Batcher> train;
    std::unique_ptr<data::Batcher> eval;  // data.eval; null without one
    HfExport tokenizer;                   // the tokenizer's ids and files, for the exported model
    std::int64_t total_steps = 0;
    data::SkippedRecords skipped;         // data.on_bad_record: skip: records of data.train left out
    std::string mix;                      // several datasets: what the mix took of each (data/mix.h)
    // kto's labelled completions (data.label_field): each kind's count in
    // data.train; -1 for other data.
    std::int64_t desirable = -1, undesirable = -1;
    // Several datasets: per example of the mix, its dataset and its index
    // there; empty for one dataset.
    std::vector<std::uint32_t> example_dataset;
    std::vector<std::int64_t> example_index;
    // What the batcher reads (examples, tokens, rows, the mix): a
    // checkpoint's data position holds only over the same.
    std::string identity;
    // training.eval_prompts as ids, the ids their answers stop at, and the
    // tokenizer that decodes the answers (null without prompts).
    std::vector<std::vector<std::int32_t>> prompt_ids;
    std::vector<std::int32_t> stop_ids;
    std::unique_ptr<data::Tokenizer> prompt_tokenizer;
  };
  // The model's tensors as training sees them (build_model).
  struct Tensors {
    std::vector<torch::Tensor> trainable;
    // What a checkpoint holds of the model: the trainable tensors under
    // adapters (the frozen base is named by base_fingerprint, over the
    // tensors base_names names), every parameter otherwise.
    std::vector<torch::Tensor> checkpointed;
    std::vector<double> base_fingerprint;
    std::vector<std::string> base_names;
  };
  // One step's micro-batches for this rank, and the global batch's target
  // tokens (the loss's denominator).
  struct GlobalBatch {
    std::vector<data::Batch> mine;
    std::int64_t target_tokens = 0;
    std::int64_t nll_tokens = 0;  // nll_targets summed: the NLL term's tokens
  };
  // What a step's forward and backward passes produced: the loss summed
  // over target tokens and the tokens (every rank's, once reduced), and
  // the memory the passes measured (activations, logits, the peak).
  struct Pass {
    double loss_sum = 0;
    std::int64_t tokens = 0;
    Measured memory;
    PreferenceSums preference;  // dpo: the pairs' rewards and log-probs (every rank's, once reduced)
  };
  struct Update {
    double lr = 0, norm = 0;
    bool skipped = false;  // fp16: inf/nan gradients
  };
  // Every rank's memory after a step; `line` the rank with the largest peak.
  struct RankMemory {
    std::vector<Measured> ranks;
    int peak_rank = 0;
    const Measured& line() const { return ranks[static_cast<std::size_t>(peak_rank)]; }
  };
  // The loss on data.eval with the model as it is: after every eval_every
  // steps and after the last, once.
  struct Evaluation {
    double loss = 0;               // sft: per target token; pairs: per pair (orpo: plus its NLL per token)
    std::int64_t tokens = 0;
    double seconds = 0;
    std::optional<PreferenceSums> preference;  // dpo
  };

  // trainer.cpp
  Status open_outputs();
  // Rank 0's trackers (runner/tracking/), their state as `tracker` events.
  void start_trackers();
  Status prepare();
  Status train();
  Result<bool> stop_requested();  // on every rank when any rank was asked to stop
  // The failpoint runner.hold_after_first_checkpoint (docs/testing.md).
  Status hold_if_armed();
  Status finish();
  // out_dir/adapter/ under adapters, and out_dir/model/ when output.merge
  // says (the adapters merged into the base), from the model as it is.
  Status write_model();
  bool merge_output() const;
  RunnerExit conclude(const Status& s);
  // Runs a phase, turning LibTorch's out-of-memory into ResourceExhausted
  // (with its report kept for the oom event) and other exceptions into
  // Internal.
  Status guarded(const char* phase, const std::function<Status()>& fn);
  void record_oom(const c10::OutOfMemoryError& e, const char* phase);
  void event(const char* kind, const std::function<void(JsonWriter&)>& fill = {});
  void print_progress(std::int64_t step, double loss, std::int64_t peak, const std::optional<Evaluation>& eval);
  bool leader() const { return rank_ == 0; }

  // run_setup.cpp
  Status choose_device();
  Status join_ranks();
  // After join_ranks on a GPU: NCCL for the gradients and parameters when
  // every rank has a GPU of its own (nccl_group.h).
  Status join_nccl();
  Result<Data> load_data();
  // What reading a data file needs besides its path and data section.
  struct DataFiles {
    const data::Tokenizer& tok;
    const data::ChatSetup* chat;  // null without conversations
  };
  Result<data::TokenizedData> load_file(const DataFiles& files, const std::string& path, const dsl::DataSpec& how);
  Result<data::TokenStore> mix_sources(const DataFiles& files, Data& out);
  Result<std::unique_ptr<data::Batcher>> load_eval(const DataFiles& files);
  Status prepare_prompts(Data& out, std::unique_ptr<data::Tokenizer> tok, const data::ChatSetup* chat);
  Status build_model();
  // DPO's separate reference: a frozen copy of the model's starting weights
  // (at ZeRO-3, sharded at once).
  void build_reference();
  // Adapters attached to model_ (LoRA, QLoRA) as the plan says, the base
  // fingerprinted first; the tensors training sees.
  Result<Tensors> attach_adapters();

  // run_step.cpp
  Status probe();
  Status train_step(std::int64_t step);
  GlobalBatch draw_global_batch();
  Result<Pass> forward_backward(const std::vector<data::Batch>& micro, double denom, double nll_weight);
  Result<Update> update(std::int64_t step, Measured& memory);
  Status check_loss(std::int64_t step, double loss);
  Result<RankMemory> gather_memory(const Measured& mine);
  // `contention`: platform/cpu_contention.h's over the step (-1 unknown).
  void write_metrics(std::int64_t step, double loss, const Update& u, const Pass& pass, std::int64_t target_tokens,
                     double seconds, double contention, std::uint64_t sent, const RankMemory& memory,
                     const std::optional<Evaluation>& eval);
  bool eval_due(std::int64_t step) const;
  Result<Evaluation> evaluate();
  // run_generation.cpp: training.eval_prompts answered after an evaluated
  // step (rank 0 alone: the plan keeps the whole model on it), as a
  // generation event.
  bool prompts_due(std::int64_t step) const;
  Status answer_prompts(std::int64_t step);
  void zero_grads();
  Measured measure_static() const;

  // run_preference.cpp
  // Preference training: each batch is pairs (chosen rows, then rejected).
  bool preference() const { return st_.pairs; }
  // The cores a timed step needs to itself: LibTorch's threads on the CPU,
  // the host thread feeding a GPU.
  int timed_cores() const { return device_.cuda ? 1 : at::get_num_threads(); }
  bool reward() const { return dsl::scores_sequences(spec_.training.method); }
  // What the model reads of a pair batch: pair_input, or a reward model's
  // scored_rows.
  ModelInput pairs_input(const data::Batch& b) const;
  // What a pair batch is scored against, before the trained forward: the
  // reference's log-probabilities (dpo, kto) and kto's KL estimate.
  struct PairReference {
    torch::Tensor logps;  // undefined without a reference
    double kl = 0;        // kto with KL rows: max(0, mean over them of log pi - log ref)
  };
  Result<PairReference> pair_reference(const data::Batch& b);
  // The pairs' loss from the trained model's final hidden states; orpo's
  // NLL enters loss_sum times `nll_weight` (the step's pairs over its
  // chosen tokens, so that dividing by the pairs leaves a per-token mean).
  PreferenceLossOut pair_loss(const torch::Tensor& hidden, const data::Batch& b, const PairReference& reference,
                              double nll_weight);
  // Where a batch's rows are scored, split at their pair's shared length
  // under LD-DPO (training.ld_alpha).
  ScoredSpans scored_spans(const data::Batch& b) const;
  // Each row's log-probability as the losses read it: the scored targets'
  // sum, their tail (LD-DPO) weighted by ld_alpha.
  torch::Tensor scored_logps(CausalLMImpl& model, const torch::Tensor& hidden, const data::Batch& b) const;
  // Sums of every rank's pairs.
  Status reduce_preference(PreferenceSums& sums);
  void write_preference(JsonWriter& w, const PreferenceSums& s, const char* prefix) const;
  void print_label_balance() const;  // kto's labelled completions: each kind's count (stderr)

  // run_reference.cpp
  // The reference's summed log-probability of each row's trained targets,
  // without gradients: the adapters switched off, the separate copy, or
  // the table the pass before training made (precomputed).
  Result<torch::Tensor> reference_logps(const data::Batch& b);
  // The model's own without gradients, its adapters (if any) in `mode`:
  // off (adapter_off's reference, and precomputed's before the first
  // update), on (kto's KL rows under the trained model) or the frozen
  // starting adapters (separate beside adapters, and precomputed's when
  // they started from model.adapter).
  Result<torch::Tensor> base_logps(const data::Batch& b, LoraMode mode = LoraMode::kOff);
  // Whether the reference is the model's own forward (adapters off or the
  // frozen starting adapters): collective under ZeRO-3, as the trained one.
  bool reference_is_own_forward() const;
  // What names the reference in the cache (io/logp_cache.h): the starting
  // weights' checksum, the architecture, dtype, quantisation and device.
  // Before adapters are attached (QLoRA then quantises the base).
  std::string reference_identity() const;
  // The attached adapters' checksum (lora_parameters in order): what names
  // a precomputed reference whose adapters started from model.adapter.
  std::string adapters_checksum() const;
  // Each batch whose pairs this run reads, in one order on every rank: a
  // pass over data.train when the run reads it whole at least once, else
  // the batches its steps draw; the longest batch (probe); data.eval's pass.
  void for_each_reference_batch(const std::function<void(const data::Batch&)>& fn);
  // precomputed: reference_table_ filled for every pair the run reads, from
  // the cache where it holds them, by this model's forward (adapters off)
  // otherwise, the ranks sharing the batches; then the cache rewritten with
  // them. Before the gradient synchronisation exists, so every rank holds
  // the whole model and its forwards are its own (ZeRO-3 too), and before
  // resume moves the weights. `identity`: rank 0's reference_identity().
  Status precompute_reference(const std::string& identity);
  // Its phases. Every pair the run reads, once (keys[i]), and the pairs each
  // batch of for_each_reference_batch holds (indexes into keys).
  struct ReferencePairs {
    std::vector<std::uint64_t> keys;
    std::vector<std::vector<std::size_t>> batch_pairs;
  };
  ReferencePairs reference_pairs();
  // What the cache held, per pair (held, chosen, rejected), on every rank:
  // rank 0 reads `cached`, the ranks learn it.
  Result<std::vector<double>> known_reference_logps(const ReferencePairs& pairs, const io::LoadedLogps& cached);
  // The batches to forward: each holding a pair neither cached nor in an
  // earlier batch, which then owns its new pairs (so that no two ranks
  // write the same pair); shared round-robin over the ranks.
  struct ReferenceWork {
    std::vector<std::int64_t> owner;        // the batch that scores pair i; -1 where the cache held it
    std::vector<std::size_t> batches;       // batch numbers, in order
    std::int64_t computed = 0, cached = 0;  // pairs
  };
  static ReferenceWork reference_work(const ReferencePairs& pairs, const std::vector<double>& known);
  // The work's pairs scored (chosen, rejected per pair; zero elsewhere), on
  // every rank.
  Result<std::vector<double>> score_reference_pairs(const ReferencePairs& pairs, const ReferenceWork& work);

  // run_checkpoints.cpp
  // Collective where ranks shard: every rank calls it at the same steps; a
  // failed write is an event, a failed collective an error.
  Status checkpoint(std::int64_t step);
  Status sharded_checkpoint(std::int64_t step, const std::string& dir);
  Status resume();
  struct LoadedCheckpoint {
    std::string folder;
    CheckpointState state;
    CheckpointTensors tensors;
  };
  Result<std::optional<LoadedCheckpoint>> newest_whole_checkpoint();
  // A checkpoint's params into the model: the trainable tensors of an
  // adapter checkpoint (its base checked against `base_fingerprint`), or
  // every parameter.
  Status load_parameters(const std::vector<torch::Tensor>& values, const std::vector<double>& base_fingerprint,
                         const std::string& where);

  const TrainOptions& o_;
  const RunConfig& cfg_;
  const dsl::JobSpec& spec_;
  const strategies::Strategy& st_;
  std::unique_ptr<JsonLines> metrics_, events_;
  std::unique_ptr<tracking::Trackers> trackers_;  // rank 0, when the spec's tracking section asks
  TrackingAllocator* alloc_ = nullptr;  // host tensors; the training device's too on the CPU
  DeviceChoice device_;
  torch::Device dev_{torch::kCPU};
  std::unique_ptr<CudaMemoryMeter> cuda_meter_;
  MemoryMeter* meter_ = nullptr;  // the training device's memory
  std::int64_t limit_ = 0;        // the byte budget applied while training; 0 = none
  Data data_;
  CausalLM model_{nullptr};
  CausalLM reference_{nullptr};  // dpo, kto with strategy.reference separate (a full fine-tune)
  // separate beside adapters: the frozen starting adapters' bytes (lora.h's
  // freeze_reference_adapters); precomputed scores with them too when the
  // adapters start from model.adapter.
  std::int64_t reference_adapter_bytes_ = 0;
  // The separate copy at ZeRO-3: a part of each of its tensors on each rank,
  // gathered per unit for its forward (no gradients), as the trained
  // model's are; in host memory under parameter offload.
  std::unique_ptr<ParameterSharder> reference_sharder_;
  io::LogpTable reference_table_;  // dpo with strategy.reference precomputed: by io::pair_key
  bool exporting_ = false;       // export_model: no training, so no reference
  bool diverged_ = false;        // check_loss saw a non-finite loss: the run ends as kDiverged
  // Checkpoints this run wrote and failed to write (rank 0's count), and
  // the last failure: a run none of whose checkpoints was written fails.
  std::int64_t checkpoints_written_ = 0, checkpoints_failed_ = 0;
  std::string checkpoint_failure_;
  Tensors tensors_;
  std::unique_ptr<TrainingOptimizer> opt_;
  CheckpointState state_;
  Measured last_;  // the last step's measured memory
  std::int64_t first_step_ = 1;
  bool held_ = false;      // hold_if_armed held once
  std::int64_t step_ = 0;  // the step being run (for reports)
  double t_start_ = 0;
  std::int64_t tokens_this_run_ = 0;
  std::function<void(JsonWriter&)> oom_report_;  // fields of the oom event
  // Ranks (world_ > 1): rank 0 writes metrics.jsonl, events.jsonl, the
  // checkpoints and the model; each rank trains on its share of every
  // global batch.
  int rank_ = 0, world_ = 1;
  std::unique_ptr<dist::Communicator> comm_;
  std::unique_ptr<NcclGroup> nccl_;  // the gradients and parameters of GPU ranks; null: the ring
  std::string collectives_;          // what carries them, for the start event
  // Model FLOPs utilisation (strategies/cost_model.h): the model FLOPs of a
  // trained token, and the catalog's dense peak of the GPU the run is on in
  // FLOP/s (0 on the CPU or a GPU the catalog does not know: no mfu field).
  double model_flops_per_token_ = 0, peak_flops_ = 0;
  std::string gpu_model_;               // that GPU's catalog key
  std::unique_ptr<GradientSync> sync_;  // last: it references the model, comm_ and nccl_
};

}  // namespace tailor::runner
