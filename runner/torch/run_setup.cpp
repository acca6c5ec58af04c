// The run's setup phases (run.h): the device, the ranks, the data, the
// model with its adapters, how gradients are synchronised, the optimizer.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "dsl/catalog.h"
#include "dsl/model_family.h"
#include "dsl/spec_loader.h"
#include "runner/data/dataset.h"
#include "runner/data/mix.h"
#include "runner/data/prompt_tokens.h"
#include "runner/data/token_cache.h"
#include "runner/data/tokenizer.h"
#include "runner/dist/launcher.h"
#include "runner/loss_scaler.h"
#include "runner/protocol/capabilities.h"
#include "runner/torch/cuda_kernels.h"
#include "runner/torch/data_parallel.h"
#include "runner/torch/lora.h"
#include "runner/torch/run.h"
#include "strategies/candidate.h"
#include "strategies/cost_model.h"
#include "strategies/hardware.h"

namespace tailor::runner {
namespace {

std::chrono::milliseconds seconds_from_env(const char* name, std::chrono::milliseconds fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (*end != '\0' || !(s > 0)) return fallback;
  return std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000));
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

}  // namespace

Status Run::prepare() {
  alloc_ = &TrackingAllocator::install();
  TAILOR_RETURN_IF_ERROR(choose_device());
  TAILOR_RETURN_IF_ERROR(check_executable(st_));
  TAILOR_RETURN_IF_ERROR(join_ranks());
  TAILOR_RETURN_IF_ERROR(dsl::check_weights(spec_));
  TAILOR_RETURN_IF_ERROR(dsl::check_tracking(spec_));
  if (dsl::needs_reference(spec_.training.method) != (st_.reference != dsl::Reference::kNone) ||
      dsl::trains_on_pairs(spec_.training.method) != st_.pairs || strategies::kl_rows_for(spec_) != st_.kl_rows ||
      dsl::is_labelled(spec_.data) != st_.unpaired) {
    return Status::invalid_argument(std::string("the plan's strategy (") + (st_.pairs ? "pairs" : "no pairs") +
                                    ", reference " + dsl::to_string(st_.reference) + ") does not match training.method " +
                                    dsl::to_string(spec_.training.method) + ": plan the job again");
  }
  if (spec_.training.method == dsl::TrainingMethod::kKto && st_.reference == dsl::Reference::kPrecomputed) {
    return Status::invalid_argument(
        "a precomputed reference is not built for kto (its KL rows change with each "
        "epoch's order): plan the job again");
  }
  if (spec_.data.seq_len > spec_.model.arch.max_seq_len) {
    return Status::invalid_argument("data.seq_len exceeds the model's max_seq_len");
  }
  // A reward model reads one position past seq_len inputs (the last target).
  if (reward() && dsl::family_info(spec_.model.arch.family).tensors.positions &&
      spec_.data.seq_len >= spec_.model.arch.max_seq_len) {
    return Status::invalid_argument("a reward model reads each row's last token after its inputs, one position past "
                                    "data.seq_len: with learned positions seq_len must be below max_seq_len (" +
                                    std::to_string(spec_.model.arch.max_seq_len) + ")");
  }
  if (o_.threads > 0) at::set_num_threads(o_.threads);
  // The plan's budget where the plan's kind of device trains: a CPU plan on
  // the CPU, a GPU plan on a GPU. A GPU plan trained on the CPU on purpose
  // (resources.device: cpu, --device cpu) has no meaningful budget there.
  const bool plan_device = cfg_.on_cpu != device_.cuda;
  limit_ = o_.memory_limit >= 0 ? o_.memory_limit : (plan_device ? cfg_.budget_bytes : 0);
  torch::manual_seed(static_cast<std::uint64_t>(spec_.training.seed));
  TAILOR_ASSIGN_OR_RETURN(data_, load_data());
  return build_model();
}

Status Run::choose_device() {
  TAILOR_RETURN_IF_ERROR(select_cuda_kernels());  // a bad TAILOR_CUDA_KERNELS is bad input on any device
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
  model_flops_per_token_ = strategies::model_flops_per_token(spec_.model.arch, st_, spec_.data.seq_len);
  if (const dsl::GpuModel* g = dsl::Catalog::builtin().match_gpu_name(cuda_meter_->product_name())) {
    gpu_model_ = g->key;
    peak_flops_ = strategies::dense_peak_tflops(strategies::device_from_catalog(*g), st_) * 1e12;
  }
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

Result<Run::Data> Run::load_data() {
  // The model folder's tokenizer.model, else bytes; tokenized once into the
  // token cache (warnings about it go to stderr), mapped on later runs.
  auto tok = data::make_tokenizer(spec_.model);
  if (!tok.is_ok()) return as_bad_input(tok.status());
  // Conversations are rendered with the model's chat template (or data.chat_template).
  std::optional<data::ChatSetup> chat;
  if (dsl::is_chat(spec_.data)) {
    auto setup = data::load_chat_setup(spec_.data, spec_.model.path);
    if (!setup.is_ok()) return as_bad_input(setup.status());
    chat = std::move(setup).value();
  }
  const DataFiles files{**tok, chat ? &*chat : nullptr};
  Data out;
  data::TokenizedData tokenized;
  if (spec_.data.sources.empty()) {
    TAILOR_ASSIGN_OR_RETURN(tokenized, load_file(files, spec_.data.train, spec_.data));
    out.skipped = tokenized.skipped;
  } else {
    TAILOR_ASSIGN_OR_RETURN(tokenized.store, mix_sources(files, out));
  }
  if (!spec_.data.eval.empty()) {
    TAILOR_ASSIGN_OR_RETURN(out.eval, load_eval(files));
  }
  out.tokenizer.tokens = {(*tok)->bos_id(), (*tok)->eos_id(), (*tok)->declared_pad_id()};
  out.tokenizer.tokenizer_from = spec_.model.path;
  out.tokenizer.byte_tokenizer = dynamic_cast<const data::ByteTokenizer*>(tok->get()) != nullptr;
  if (chat) out.tokenizer.chat_template = chat->template_text;
  if (dsl::is_labelled(spec_.data)) {
    const auto labels = tokenized.store.all_values();
    out.desirable = std::count_if(labels.begin(), labels.end(), [](float v) { return v > 0.5f; });
    out.undesirable = static_cast<std::int64_t>(tokenized.store.documents()) - out.desirable;
  }
  auto batcher = data::make_batcher(std::move(tokenized.store), spec_.data, st_.micro_batch_size,
                                    static_cast<std::uint64_t>(spec_.training.seed), (*tok)->pad_id());
  if (!batcher.is_ok()) return as_bad_input(batcher.status());
  out.train = std::make_unique<data::Batcher>(std::move(*batcher));
  out.identity = std::to_string(out.train->stats().documents) + " documents, " +
                 std::to_string(out.train->stats().examples) + " examples, " +
                 std::to_string(out.train->rows_per_epoch()) + " rows of " + std::to_string(spec_.data.seq_len) +
                 " an epoch" + out.identity;
  TAILOR_RETURN_IF_ERROR(prepare_prompts(out, std::move(tok).value(), chat ? &*chat : nullptr));
  const double global_rows = static_cast<double>(st_.micro_batch_size * st_.grad_accumulation * world_);
  out.total_steps = spec_.training.max_steps
                        ? *spec_.training.max_steps
                        : std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(
                                                        spec_.training.epochs *
                                                        static_cast<double>(out.train->rows_per_epoch()) / global_rows)));
  return out;
}

// A tokens file may hold ids past the embedding table: a clear error here,
// not an index error inside the forward pass.
Result<data::TokenizedData> Run::load_file(const DataFiles& files, const std::string& path, const dsl::DataSpec& how) {
  auto tokenized = data::load_tokenized(path, how, files.tok, o_.cache_dir, files.chat);
  if (!tokenized.is_ok()) return as_bad_input(tokenized.status());
  const auto ids = tokenized->store.all_tokens();
  if (const auto it = std::max_element(ids.begin(), ids.end()); it != ids.end() && *it >= spec_.model.arch.vocab) {
    return Status::invalid_argument(path + ": token id " + std::to_string(*it) +
                                    " is outside the model's vocabulary (" + std::to_string(spec_.model.arch.vocab) +
                                    " ids)");
  }
  return tokenized;
}

// Several datasets: each tokenized (and cached) on its own, then mixed;
// `out` gets their skips, the mix's description and each example's source.
Result<data::TokenStore> Run::mix_sources(const DataFiles& files, Data& out) {
  std::vector<data::MixInput> inputs;
  for (const dsl::DataSource& source : spec_.data.sources) {
    TAILOR_ASSIGN_OR_RETURN(data::TokenizedData one,
                            load_file(files, source.path, dsl::source_spec(spec_.data, source)));
    out.skipped.count += one.skipped.count;
    for (const std::string& why : one.skipped.first) {
      if (out.skipped.first.size() < data::SkippedRecords::kShownSkips) out.skipped.first.push_back(why);
    }
    inputs.push_back({source.path, source.weight, std::move(one.store)});
  }
  const auto seed = static_cast<std::uint64_t>(spec_.data.mix_seed.value_or(spec_.training.seed));
  auto mixed = data::mix_datasets(inputs, spec_.data.mix, seed, dsl::is_paired(spec_.data));
  if (!mixed.is_ok()) return as_bad_input(mixed.status());
  out.mix = data::describe(*mixed, inputs);
  out.example_dataset = std::move(mixed->source);
  out.example_index = std::move(mixed->record);
  out.identity = std::string("; mix ") + dsl::to_string(spec_.data.mix) + " seed " + std::to_string(seed) + ":";
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    out.identity += " " + std::to_string(mixed->examples[i]) + "->" + std::to_string(mixed->taken[i]);
  }
  return std::move(mixed->store);
}

// The eval file as the training data is read: the same tokenizer, masking,
// seq_len and packing (whole examples, or the stream; long examples handled
// alike), so the two losses compare; errors name the eval file.
Result<std::unique_ptr<data::Batcher>> Run::load_eval(const DataFiles& files) {
  TAILOR_ASSIGN_OR_RETURN(data::TokenizedData eval, load_file(files, spec_.data.eval, spec_.data));
  if (!has_trained_tokens(eval.store, spec_.data.seq_len, spec_.data.packing)) {
    return Status::invalid_argument(spec_.data.eval +
                                    ": no token is trained (every one is masked), so there is no "
                                    "loss to evaluate");
  }
  dsl::DataSpec eval_data = spec_.data;
  eval_data.train = spec_.data.eval;
  auto batcher =
      data::make_batcher(std::move(eval.store), eval_data, st_.micro_batch_size, /*seed=*/0, files.tok.pad_id());
  if (!batcher.is_ok()) return as_bad_input(batcher.status());
  return std::make_unique<data::Batcher>(std::move(*batcher));
}

// training.eval_prompts as the model will read them, checked now so that a
// prompt the context cannot hold fails the run before it trains.
Status Run::prepare_prompts(Data& out, std::unique_ptr<data::Tokenizer> tok, const data::ChatSetup* chat) {
  const auto& prompts = spec_.training.eval_prompts;
  if (prompts.empty()) return Status::ok();
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    auto ids = chat ? data::user_turn_prompt_ids(*chat, *tok, prompts[i])
                    : Result<std::vector<std::int32_t>>(data::text_prompt_ids(*tok, prompts[i]));
    const std::string where = "training.eval_prompts[" + std::to_string(i) + "]";
    if (!ids.is_ok()) return as_bad_input(ids.status().prefixed(where));
    if (static_cast<std::int64_t>(ids->size()) >= spec_.model.arch.max_seq_len) {
      return Status::invalid_argument(where + " has " + std::to_string(ids->size()) +
                                      " tokens; the model's context is " +
                                      std::to_string(spec_.model.arch.max_seq_len) + ", which leaves no room to answer");
    }
    out.prompt_ids.push_back(std::move(ids).value());
  }
  if (tok->eos_id() >= 0) out.stop_ids.push_back(tok->eos_id());
  if (chat) {
    if (auto eot = data::template_end_of_turn(*chat, *tok)) out.stop_ids.push_back(*eot);
  }
  out.prompt_tokenizer = std::move(tok);
  return Status::ok();
}

Result<Run::Tensors> Run::attach_adapters() {
  Tensors out;
  if (st_.adapter != dsl::Adapter::kNone) {
    // The base as it will stay, before QLoRA quantises it: a re-plan from
    // LoRA to QLoRA resumes over the same base.
    std::vector<torch::Tensor> base;
    for (const auto& item : model_->named_parameters()) {
      out.base_names.push_back(item.key());
      base.push_back(item.value());
    }
    out.base_fingerprint = weights_fingerprint(base);
    LoraOptions lo;
    lo.rank = st_.lora_rank > 0 ? st_.lora_rank : spec_.strategy.lora.r;
    lo.alpha = spec_.strategy.lora.alpha;
    lo.dropout = spec_.strategy.lora.dropout;
    lo.targets = spec_.strategy.lora.targets;
    // Plans from before the quantisation was a knob may say qlora over none.
    lo.base =
        st_.quantization != dsl::Quantization::kNone ? st_.quantization : strategies::default_quantization(st_.adapter);
    lo.adapter_dtype = st_.precision == dsl::Precision::kPureBf16 ? torch::kBFloat16 : torch::kFloat32;
    lo.modules_to_save = spec_.strategy.lora.modules_to_save;
    TAILOR_RETURN_IF_ERROR(as_bad_input(attach_lora(*model_, lo)));
    // model.adapter: the adapters (and a reward model's score) start from
    // the folder's; a resume then replaces them with its checkpoint's.
    if (!spec_.model.adapter.empty()) {
      TAILOR_RETURN_IF_ERROR(as_bad_input(load_peft_adapter(*model_, spec_.model.adapter)));
    }
  }
  for (const auto& p : model_->parameters()) {
    if (p.requires_grad()) out.trainable.push_back(p);
  }
  out.checkpointed = has_lora(*model_) ? out.trainable : model_->parameters();
  if (!has_lora(*model_)) out.base_fingerprint.clear();
  return out;
}

void Run::build_reference() {
  reference_ = CausalLM(spec_.model.arch, /*checkpoint_every=*/0);
  reference_->to(dev_, param_dtype(st_.precision));
  reference_->set_fused_attention(st_.attention == strategies::Attention::kMemoryEfficient);
  reference_->set_fused_linear_loss(st_.cross_entropy == strategies::CrossEntropy::kFusedLinear);
  reference_->eval();
  torch::NoGradGuard no_grad;
  const auto from = model_->parameters();
  auto to = reference_->parameters();
  for (std::size_t i = 0; i < to.size(); ++i) {
    to[i].copy_(from[i]);
    to[i].set_requires_grad(false);
  }
  if (st_.zero_stage < 3 || world_ < 2) return;
  // ZeRO-3: cut now, so the whole copy lives only while it is made.
  std::vector<std::vector<torch::Tensor>> units(reference_->unit_count());
  for (std::size_t u = 0; u < units.size(); ++u)
    units[u] = reference_->unit_parameters(u);
  reference_sharder_ = std::make_unique<ParameterSharder>(
      *comm_, units, [](const torch::Tensor&) { return std::int64_t{1}; },
      /*host_parts=*/st_.offload == dsl::Offload::kOptimizerAndParams, nccl_.get());
  reference_->set_unit_hook(reference_sharder_.get());
  reference_sharder_->shard();
}

Status Run::build_model() {
  model_ = CausalLM(spec_.model.arch, st_.checkpoint_every, reward() ? ModelHead::kScore : ModelHead::kVocabulary);
  model_->to(dev_, param_dtype(st_.precision));
  // The attention the plan chose (its memory estimate assumed it).
  model_->set_fused_attention(st_.attention == strategies::Attention::kMemoryEfficient);
  model_->set_fused_linear_loss(st_.cross_entropy == strategies::CrossEntropy::kFusedLinear);
  model_->set_activation_offload(st_.activation_offload);
  model_->train();
  // Fine-tuning: the model folder's weights replace the initialisation
  // (before the optimizer copies them into fp32 master weights).
  if (!spec_.model.path.empty() && spec_.model.init == dsl::ModelInit::kPretrained) {
    TAILOR_RETURN_IF_ERROR(as_bad_input(load_hf_weights(model_, spec_.model.path)));
  }
  // DPO's separate reference: the starting weights, frozen, before any
  // resume moves the trained ones (exporting needs none). Beside adapters,
  // the adapters as they start (model.adapter's) are frozen instead.
  const bool adapters = st_.adapter != dsl::Adapter::kNone;
  if (st_.reference == dsl::Reference::kSeparate && !exporting_ && !adapters) build_reference();
  // precomputed: the reference is named by the starting weights, before
  // QLoRA quantises them (rank 0 alone keeps the cache).
  const bool precompute = st_.reference == dsl::Reference::kPrecomputed && !exporting_;
  std::string identity = precompute && leader() ? reference_identity() : std::string();
  // Adapters after the weights are final, so NF4 quantises the loaded ones.
  TAILOR_ASSIGN_OR_RETURN(tensors_, attach_adapters());
  // The starting adapters, when the reference is the model the job starts
  // from and that model has adapters of its own (model.adapter).
  const bool started = adapters && !spec_.model.adapter.empty();
  if (!exporting_ && ((st_.reference == dsl::Reference::kSeparate && adapters) || (precompute && started))) {
    reference_adapter_bytes_ = freeze_reference_adapters(*model_);
    if (precompute && leader()) identity += "adapters " + adapters_checksum() + "\n";
  }
  // Scored before the ranks shard or resume moves the weights.
  if (precompute) TAILOR_RETURN_IF_ERROR(precompute_reference(identity));
  // The table holds the scores: the copies are no longer read.
  if (precompute && reference_adapter_bytes_ > 0) {
    drop_reference_adapters(*model_);
    reference_adapter_bytes_ = 0;
  }
  state_.base_fingerprint = tensors_.base_fingerprint;
  const bool offload_params = st_.offload == dsl::Offload::kOptimizerAndParams;
  SyncSetup sync;
  sync.zero_stage = st_.zero_stage;
  sync.offload_params = offload_params;
  sync.optimizer = st_.optimizer;
  sync.rank = rank_;
  sync.world = world_;
  sync.comm = comm_.get();
  sync.nccl = nccl_.get();
  sync_ = make_gradient_sync(sync, *model_, tensors_.trainable);
  // The optimizer sees only trainable tensors (this rank's share); adapters
  // are fp32 under fp32 and mixed precision (so no master copy), bf16 under
  // pure bf16, as memory_model.cpp assumes; modules_to_save's embedding and
  // head keep the weights' dtype, with fp32 master copies under mixed
  // precision, as a full fine-tune's. Offload: this rank's optimizer
  // in host memory (optimizer.h), beside the parts it updates when those
  // are offloaded too.
  const bool whole_modules = !whole_module_parameters(*model_).empty();
  const dsl::Precision opt_precision =
      st_.adapter != dsl::Adapter::kNone && st_.precision != dsl::Precision::kPureBf16 && !whole_modules
          ? dsl::Precision::kFp32
          : st_.precision;
  const OptimizerHome home = offload_params                           ? OptimizerHome::kHost
                             : st_.offload == dsl::Offload::kOptimizer ? OptimizerHome::kHostCopies
                                                                       : OptimizerHome::kDevice;
  GradientSync::Share share = sync_->optimizer_share();
  opt_ = std::make_unique<TrainingOptimizer>(std::move(share.tensors), opt_precision, st_.optimizer,
                                             spec_.training.weight_decay, share.options, home);
  state_.loss_scale = DynamicLossScaler(st_.precision == dsl::Precision::kFp16).scale();
  return Status::ok();
}

}  // namespace tailor::runner
