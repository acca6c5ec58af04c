// DPO's and KTO's reference model in the run (run.h): its
// log-probabilities from the model with its adapters off (adapter_off), from
// the frozen copy (separate), or from the table a pass before training
// filled (precomputed, dpo only, with the cache of io/logp_cache.h).
#include <algorithm>
#include <cstdio>
#include <unordered_map>

#include "core/log.h"
#include "dsl/model_family.h"
#include "runner/data/hash.h"
#include "runner/protocol/events.h"
#include "runner/torch/data_parallel.h"
#include "runner/torch/lora.h"
#include "runner/torch/run.h"

namespace tailor::runner {

Result<torch::Tensor> Run::base_logps(const data::Batch& b, LoraMode mode) {
  torch::NoGradGuard no_grad;
  // The adapters start at zero (or at model.adapter's, frozen), so the base
  // (or the base with the frozen ones) is the starting model. Neither
  // draws dropout; the forward is the model's own, so ZeRO-3 gathers its
  // units as for any forward.
  struct Restore {
    CausalLMImpl& model;
    ~Restore() { set_lora_mode(model, LoraMode::kOn); }
  } restore{*model_};
  set_lora_mode(*model_, mode);
  torch::Tensor out = scored_logps(*model_, model_->hidden_states(pair_input(b, dev_)), b);
  // ZeRO-3's head is still gathered: no backward released it.
  if (sync_ && sync_->collective_forward()) TAILOR_RETURN_IF_ERROR(sync_->after_backward());
  return out;
}

Result<torch::Tensor> Run::reference_logps(const data::Batch& b) {
  switch (st_.reference) {
    case dsl::Reference::kNone:  // ORPO and SimPO have none
      return torch::Tensor();
    case dsl::Reference::kAdapterOff:
      return base_logps(b);
    case dsl::Reference::kSeparate: {
      if (!reference_) return base_logps(b, LoraMode::kReference);  // beside adapters
      torch::NoGradGuard no_grad;
      return scored_logps(*reference_, reference_->hidden_states(pair_input(b, dev_)), b);
    }
    case dsl::Reference::kPrecomputed:
      break;
  }
  const std::int64_t pairs = b.rows / 2;
  std::vector<float> v(static_cast<std::size_t>(b.rows));
  for (std::int64_t p = 0; p < pairs; ++p) {
    const auto it = reference_table_.find(io::pair_key(b, p));
    if (it == reference_table_.end()) {
      return Status::internal("a pair the run reads was not scored by the reference before training");
    }
    v[static_cast<std::size_t>(p)] = it->second.chosen;
    v[static_cast<std::size_t>(pairs + p)] = it->second.rejected;
  }
  return torch::tensor(v, torch::kFloat32).to(dev_);
}

bool Run::reference_is_own_forward() const {
  return st_.reference == dsl::Reference::kAdapterOff || (st_.reference == dsl::Reference::kSeparate && !reference_);
}

namespace {

// A tensor's name, shape, dtype and bytes into `sum`, a slice at a time
// through host memory (the model may be on a GPU).
void add_tensor(data::Checksum64& sum, const std::string& name, const torch::Tensor& t) {
  constexpr std::int64_t kSlice = std::int64_t{1} << 24;
  torch::NoGradGuard no_grad;
  sum.update(name.data(), name.size());
  const std::string shape = c10::str(t.sizes(), c10::toString(t.scalar_type()));
  sum.update(shape.data(), shape.size());
  const torch::Tensor flat = t.detach().reshape({-1});
  for (std::int64_t at = 0; at < flat.numel(); at += kSlice) {
    const torch::Tensor part = flat.narrow(0, at, std::min(kSlice, flat.numel() - at)).to(torch::kCPU).contiguous();
    sum.update(part.data_ptr(), part.nbytes());
  }
}

}  // namespace

std::string Run::adapters_checksum() const {
  data::Checksum64 sum;
  const std::vector<torch::Tensor> tensors = lora_parameters(*model_);
  for (std::size_t i = 0; i < tensors.size(); ++i)
    add_tensor(sum, std::to_string(i), tensors[i]);
  return data::hex64(sum.finish());
}

std::string Run::reference_identity() const {
  data::Checksum64 sum;
  for (const auto& item : model_->named_parameters())
    add_tensor(sum, item.key(), item.value());
  const std::string config = dsl::hf_config_json(spec_.model.arch, "float32");
  std::string out = "tailor reference log-probabilities\n";
  out += "weights " + data::hex64(sum.finish()) + "\n";
  out += "config " + data::hex64(data::fnv1a64(config)) + "\n";
  out += std::string("dtype ") + c10::toString(param_dtype(st_.precision)) + "\n";
  out += std::string("quantization ") + dsl::to_string(st_.quantization) + "\n";
  out += std::string("device ") + (dev_.is_cuda() ? "cuda" : "cpu") + "\n";
  // LD-DPO weighs each completion's tail: other log-probabilities.
  if (spec_.training.ld_alpha) {
    char alpha[32];
    std::snprintf(alpha, sizeof alpha, "%.17g", *spec_.training.ld_alpha);
    out += std::string("ld_alpha ") + alpha + "\n";
  }
  return out;
}

void Run::for_each_reference_batch(const std::function<void(const data::Batch&)>& fn) {
  data::Batcher& train = *data_.train;
  const std::int64_t pairs_read = data_.total_steps * st_.micro_batch_size * st_.grad_accumulation * world_;
  if (pairs_read >= train.rows_per_epoch()) {
    for (std::int64_t k = 0; k < train.batches_per_epoch(); ++k) fn(train.pass_batch(k));
  } else {
    // The run's own batches, from a copy (the run's batcher stays at its
    // start; resume moves it later).
    data::Batcher steps = train;
    steps.restore({});
    for (std::int64_t k = 0; k < data_.total_steps * st_.grad_accumulation * world_; ++k) fn(steps.next());
  }
  fn(train.longest_batch());
  if (data_.eval) {
    for (std::int64_t k = 0; k < data_.eval->batches_per_epoch(); ++k) fn(data_.eval->pass_batch(k));
  }
}

Run::ReferencePairs Run::reference_pairs() {
  ReferencePairs out;
  std::unordered_map<std::uint64_t, std::size_t> index;
  for_each_reference_batch([&](const data::Batch& b) {
    std::vector<std::size_t> mine;
    for (std::int64_t p = 0; p < b.rows / 2; ++p) {
      const auto [it, added] = index.emplace(io::pair_key(b, p), out.keys.size());
      if (added) out.keys.push_back(it->first);
      mine.push_back(it->second);
    }
    out.batch_pairs.push_back(std::move(mine));
  });
  return out;
}

Result<std::vector<double>> Run::known_reference_logps(const ReferencePairs& pairs, const io::LoadedLogps& cached) {
  const std::size_t n = pairs.keys.size();
  std::vector<double> known(3 * n, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    if (const auto it = cached.table.find(pairs.keys[i]); it != cached.table.end()) {
      known[3 * i] = 1;
      known[3 * i + 1] = it->second.chosen;
      known[3 * i + 2] = it->second.rejected;
    }
  }
  if (world_ > 1) TAILOR_RETURN_IF_ERROR(all_reduce_values(*comm_, known));
  return known;
}

Run::ReferenceWork Run::reference_work(const ReferencePairs& pairs, const std::vector<double>& known) {
  ReferenceWork work;
  work.owner.assign(pairs.keys.size(), -1);
  for (std::size_t k = 0; k < pairs.batch_pairs.size(); ++k) {
    bool needed = false;
    for (std::size_t i : pairs.batch_pairs[k]) {
      if (known[3 * i] == 0 && work.owner[i] < 0) {
        work.owner[i] = static_cast<std::int64_t>(k);
        needed = true;
      }
    }
    if (needed) work.batches.push_back(k);
  }
  for (const std::int64_t batch : work.owner)
    (batch >= 0 ? work.computed : work.cached) += 1;
  return work;
}

Result<std::vector<double>> Run::score_reference_pairs(const ReferencePairs& pairs, const ReferenceWork& work) {
  std::vector<double> scores(2 * pairs.keys.size(), 0.0);
  std::size_t k = 0, next = 0;
  double last_report = now_seconds();
  Status failed = Status::ok();
  for_each_reference_batch([&](const data::Batch& b) {
    const std::size_t batch = k++;
    if (!failed.is_ok() || next >= work.batches.size() || work.batches[next] != batch) return;
    const bool mine = static_cast<int>(next % static_cast<std::size_t>(world_)) == rank_;
    ++next;
    if (!mine) return;
    auto logps = base_logps(b, reference_adapter_bytes_ > 0 ? LoraMode::kReference : LoraMode::kOff);
    if (!logps.is_ok()) {
      failed = logps.status();
      return;
    }
    const torch::Tensor v = logps->to(torch::kCPU);
    const std::int64_t n = b.rows / 2;
    for (std::int64_t p = 0; p < n; ++p) {
      const std::size_t i = pairs.batch_pairs[batch][static_cast<std::size_t>(p)];
      if (work.owner[i] != static_cast<std::int64_t>(batch)) continue;
      scores[2 * i] = v[p].item<float>();
      scores[2 * i + 1] = v[n + p].item<float>();
    }
    if (leader() && !o_.quiet && now_seconds() - last_report > 10) {
      last_report = now_seconds();
      std::fprintf(stderr, "reference: %zu/%zu batches (%.0f%%)\n", next, work.batches.size(),
                   100.0 * static_cast<double>(next) / static_cast<double>(work.batches.size()));
    }
  });
  TAILOR_RETURN_IF_ERROR(failed);
  if (world_ > 1 && !work.batches.empty()) TAILOR_RETURN_IF_ERROR(all_reduce_values(*comm_, scores));
  return scores;
}

Status Run::precompute_reference(const std::string& identity) {
  const double t0 = now_seconds();
  const ReferencePairs pairs = reference_pairs();
  const std::size_t n = pairs.keys.size();
  // Rank 0 reads the cache; the ranks learn what it held.
  const std::string file = o_.cache_dir.empty() ? std::string() : io::logp_cache_file(o_.cache_dir, identity);
  io::LoadedLogps cached;
  if (leader() && !file.empty()) {
    cached = io::read_logp_cache(file, identity);
    if (!cached.problem.empty()) {
      log_warning("reference cache: " + file + ": " + cached.problem + "; ignoring it and scoring the pairs again");
    }
  }
  TAILOR_ASSIGN_OR_RETURN(const std::vector<double> known, known_reference_logps(pairs, cached));
  const ReferenceWork work = reference_work(pairs, known);
  if (leader() && !o_.quiet) {
    std::fprintf(stderr, "reference: %zu pairs, %lld from the cache; scoring %lld in %zu batches\n", n,
                 static_cast<long long>(work.cached), static_cast<long long>(work.computed), work.batches.size());
  }
  TAILOR_ASSIGN_OR_RETURN(const std::vector<double> scores, score_reference_pairs(pairs, work));

  reference_table_.clear();
  reference_table_.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const bool held = known[3 * i] != 0;
    reference_table_[pairs.keys[i]] = {static_cast<float>(held ? known[3 * i + 1] : scores[2 * i]),
                                       static_cast<float>(held ? known[3 * i + 2] : scores[2 * i + 1])};
  }
  // Rank 0 adds the new pairs to what the file held (other data's too).
  bool written = false;
  std::string problem = cached.problem;
  if (leader() && !file.empty() && work.computed > 0) {
    io::LogpTable all = std::move(cached.table);
    for (const auto& [key, v] : reference_table_) all[key] = v;
    if (Status s = io::write_logp_cache(file, identity, all); s.is_ok()) {
      written = true;
    } else {
      log_warning("reference cache: " + s.message() + "; training goes on without it");
      problem = s.message();
    }
  }
  const double seconds = now_seconds() - t0;
  if (leader() && !o_.quiet) {
    const std::string where = written ? ", cached in " + file : "";
    std::fprintf(stderr, "reference: %lld pairs scored in %.1f s%s\n", static_cast<long long>(work.computed), seconds,
                 where.c_str());
  }
  event(events::kReference, [&](JsonWriter& w) {
    w.field("pairs", static_cast<std::int64_t>(n)).field("cached", work.cached).field("computed", work.computed);
    w.field("batches", static_cast<std::int64_t>(work.batches.size())).field("seconds", seconds);
    w.field("cache_file", file).field("written", written);
    if (!problem.empty()) w.field("problem", problem);
  });
  return Status::ok();
}

}  // namespace tailor::runner
