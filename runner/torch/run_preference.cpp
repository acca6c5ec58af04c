// Preference training (training.method dpo, orpo, simpo, reward, kto) in
// the run (run.h): the pairs' loss (orpo: with its NLL; reward: on each
// row's score; kto: against its KL estimate), and its metrics under the
// names TRL reports them (rewards/chosen, ..., logps/rejected; orpo's
// nll_loss and log odds; reward's accuracy, margin and min/mean/max_reward;
// kto's kl). The reference's log-probabilities are run_reference.cpp's.
#include "core/check.h"
#include "runner/data/batcher.h"
#include "runner/data/kl_rows.h"
#include "runner/torch/data_parallel.h"
#include "runner/torch/run.h"

namespace tailor::runner {
ModelInput pair_input(const data::Batch& b, const torch::Device& device) {
  ModelInput in;
  in.input_ids = to_tensor(b.inputs, b.rows, b.seq_len, device);
  in.positions = to_tensor(b.positions, b.rows, b.seq_len, device);
  // One completion per row, padded at its end: causality is the only mask
  // (the trained model and the reference see exactly the same inputs).
  return in;
}

ScoredRows scored_rows(const data::Batch& b, const torch::Device& device, std::int32_t pad) {
  const std::int64_t T = b.seq_len, W = T + 1;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(b.rows * W), pad), pos(ids.size(), 0);
  ScoredRows out;
  for (std::int64_t r = 0; r < b.rows; ++r) {
    const std::size_t from = static_cast<std::size_t>(r * T), to = static_cast<std::size_t>(r * W);
    const std::int64_t len = b.row_length(r);  // the row's inputs, padding after them
    for (std::int64_t t = 0; t < len; ++t) {
      ids[to + static_cast<std::size_t>(t)] = b.inputs[from + static_cast<std::size_t>(t)];
      pos[to + static_cast<std::size_t>(t)] = b.positions[from + static_cast<std::size_t>(t)];
    }
    if (len > 0) {
      ids[to + static_cast<std::size_t>(len)] = b.targets[from + static_cast<std::size_t>(len - 1)];
      pos[to + static_cast<std::size_t>(len)] = b.positions[from + static_cast<std::size_t>(len - 1)] + 1;
    }
    std::int64_t last = len;
    while (last > 0 && ids[to + static_cast<std::size_t>(last)] == pad) --last;
    out.last.push_back(last);
  }
  out.input.input_ids = to_tensor(ids, b.rows, W, device);
  out.input.positions = to_tensor(pos, b.rows, W, device);
  return out;
}

ModelInput Run::pairs_input(const data::Batch& b) const {
  if (reward()) return scored_rows(b, dev_, static_cast<std::int32_t>(data_.tokenizer.tokens.pad)).input;
  return pair_input(b, dev_);
}

std::int64_t orpo_prompt_targets(const data::Batch& b, std::vector<std::int32_t>* out) {
  const std::int64_t chosen_rows = b.rows / 2, T = b.seq_len;
  if (out != nullptr) out->assign(static_cast<std::size_t>(chosen_rows * T), -100);
  std::int64_t count = 0;
  for (std::int64_t r = 0; r < chosen_rows; ++r) {
    const std::size_t row = static_cast<std::size_t>(r * T);
    for (std::int64_t t = 0; t + 1 < T; ++t) {
      const std::size_t at = row + static_cast<std::size_t>(t);
      if (b.targets[at] != -100) break;            // the completion starts
      if (b.segment_ids[at + 1] < 0) break;         // padding
      if (out != nullptr) (*out)[at] = b.inputs[at + 1];
      ++count;
    }
    for (std::int64_t t = 0; t < T; ++t) count += b.targets[row + static_cast<std::size_t>(t)] != -100;
  }
  return count;
}

bool has_nll_term(const dsl::TrainingSpec& t) {
  return t.method == dsl::TrainingMethod::kOrpo || (t.method == dsl::TrainingMethod::kSimpo && t.cpo_alpha > 0) ||
         (t.method == dsl::TrainingMethod::kDpo && dsl::has_loss(t, dsl::PreferenceLoss::kSft));
}

std::int64_t nll_targets(const dsl::TrainingSpec& t, const data::Batch& b) {
  if (t.method == dsl::TrainingMethod::kOrpo) return orpo_prompt_targets(b, nullptr);
  if (!has_nll_term(t)) return 0;
  std::int64_t count = 0;
  const std::size_t chosen = static_cast<std::size_t>(b.rows / 2 * b.seq_len);
  for (std::size_t at = 0; at < chosen; ++at)
    count += b.targets[at] != -100;
  return count;
}

double nll_term_weight(const dsl::TrainingSpec& t) {
  if (t.method == dsl::TrainingMethod::kSimpo) return t.cpo_alpha;
  if (t.method == dsl::TrainingMethod::kDpo) {
    for (std::size_t i = 0; i < t.losses.size(); ++i) {
      if (t.losses[i] == dsl::PreferenceLoss::kSft) return dsl::loss_weight(t, i);
    }
  }
  return 1.0;
}

ScoredSpans Run::scored_spans(const data::Batch& b) const {
  const bool ld = spec_.training.method == dsl::TrainingMethod::kDpo && spec_.training.ld_alpha.has_value();
  return runner::scored_spans(b.targets, b.rows, b.seq_len, ld);
}

torch::Tensor Run::scored_logps(CausalLMImpl& model, const torch::Tensor& hidden, const data::Batch& b) const {
  const torch::Tensor targets = to_tensor(b.targets, b.rows, b.seq_len, dev_);
  return row_logps(model, hidden, targets, scored_spans(b)).weighted(spec_.training.ld_alpha.value_or(1.0));
}

Result<Run::PairReference> Run::pair_reference(const data::Batch& b) {
  PairReference out;
  TAILOR_ASSIGN_OR_RETURN(out.logps, reference_logps(b));
  if (!st_.kl_rows) return out;
  // KTO's KL estimate: the micro-batch's completions after prompts they do
  // not answer, under the trained model (no gradients: TRL detaches it) and
  // the reference, averaged over the rows and clamped at 0. Per
  // micro-batch, not over the ranks, so that ranks train as one rank with
  // accumulation does.
  const data::Batch kl = data::kl_rows(b, spec_.data.seq_len, static_cast<std::int32_t>(data_.tokenizer.tokens.pad));
  TAILOR_ASSIGN_OR_RETURN(const torch::Tensor trained, base_logps(kl, LoraMode::kOn));
  TAILOR_ASSIGN_OR_RETURN(const torch::Tensor reference, reference_logps(kl));
  out.kl = std::max(0.0, (trained - reference).to(torch::kFloat64).mean().item<double>());
  return out;
}

PreferenceLossOut Run::pair_loss(const torch::Tensor& hidden, const data::Batch& b, const PairReference& reference,
                                 double nll_weight) {
  if (reward()) {
    const ScoredRows rows = scored_rows(b, torch::kCPU, static_cast<std::int32_t>(data_.tokenizer.tokens.pad));
    const torch::Tensor last = torch::tensor(rows.last, torch::kInt64).to(dev_);
    torch::Tensor margins;
    if (!spec_.data.margin_field.empty()) {
      // Both rows of a pair carry its margin: the chosen rows' are the pairs'.
      TAILOR_CHECK(static_cast<std::int64_t>(b.values.size()) == b.rows);
      margins =
          torch::tensor(std::vector<float>(b.values.begin(), b.values.begin() + b.rows / 2), torch::kFloat32).to(dev_);
    }
    return reward_loss(model_->scores(hidden, last), spec_.training.center_rewards, margins);
  }
  const dsl::TrainingSpec& t = spec_.training;
  const torch::Tensor targets = to_tensor(b.targets, b.rows, b.seq_len, dev_);
  const torch::Tensor tokens = targets.ne(-100).sum(1);
  const ScoredSpans spans = scored_spans(b);
  const RowLogps parts = row_logps(*model_, hidden, targets, spans);
  // The losses read LD-DPO's weighted log-probabilities; sft's NLL and
  // WPO's weights the plain ones (as TRL's per-token log-probabilities).
  const torch::Tensor logps = parts.weighted(t.ld_alpha.value_or(1.0));
  const torch::Tensor plain = t.ld_alpha ? parts.weighted(1.0) : logps;
  if (dsl::is_labelled(spec_.data)) {
    // kto's labelled completions: each row's label is its store value.
    TAILOR_CHECK(static_cast<std::int64_t>(b.values.size()) == b.rows);
    const torch::Tensor desirable = torch::tensor(b.values, torch::kFloat32).gt(0.5).to(dev_);
    return labelled_loss(logps, reference.logps, desirable, spec_.training, reference.kl);
  }
  const std::int64_t pairs = b.rows / 2;
  torch::Tensor pair_weights;
  if (t.method == dsl::TrainingMethod::kDpo && t.use_weighting) {
    const torch::Tensor w = wpo_weights(*model_, hidden, targets, spans, plain);
    pair_weights = w.narrow(0, 0, pairs) * w.narrow(0, pairs, pairs);
  }
  PreferenceLossOut out = preference_loss(logps, reference.logps, tokens, t, reference.kl, pair_weights);
  if (t.method == dsl::TrainingMethod::kDpo && dsl::has_loss(t, dsl::PreferenceLoss::kSft)) {
    // sft: the chosen completions' NLL, a mean over the step's chosen
    // tokens (TRL's over the batch's), weighted by its loss weight.
    const torch::Tensor nll = -plain.narrow(0, 0, pairs).sum();
    out.sums.nll = nll.detach().item<double>();
    out.sums.nll_tokens = static_cast<double>(nll_targets(t, b));
    out.loss_sum = out.loss_sum + nll_term_weight(t) * nll_weight * nll;
    return out;
  }
  if (spec_.training.method == dsl::TrainingMethod::kSimpo && spec_.training.cpo_alpha > 0) {
    // CPO's NLL: the chosen completions' cross-entropy, over the targets
    // their log-probabilities above already sum (TRL's CPOTrainer masks
    // the prompt from its labels).
    const torch::Tensor nll = -logps.narrow(0, 0, pairs).sum();
    out.sums.nll = nll.detach().item<double>();
    out.sums.nll_tokens = static_cast<double>(nll_targets(spec_.training, b));
    out.loss_sum = out.loss_sum + spec_.training.cpo_alpha * nll_weight * nll;
    return out;
  }
  if (spec_.training.method != dsl::TrainingMethod::kOrpo) return out;
  // ORPO's NLL is the chosen sequences' whole (prompt and completion, as
  // TRL's ORPOTrainer computes it): the completions' log-probabilities
  // above, and the prompts' through the same head, a row at a time.
  std::vector<std::int32_t> prompt;
  const std::int64_t count = orpo_prompt_targets(b, &prompt);
  const torch::Tensor prompt_targets = to_tensor(prompt, pairs, b.seq_len, dev_);
  torch::Tensor nll = -logps.narrow(0, 0, pairs).sum();
  for (std::int64_t r = 0; r < pairs; ++r) {
    nll = nll + model_->loss_sum(hidden.narrow(0, r, 1), prompt_targets.narrow(0, r, 1)).to(torch::kFloat32);
  }
  out.sums.nll = nll.detach().item<double>();
  out.sums.nll_tokens = static_cast<double>(count);
  out.loss_sum = out.loss_sum + nll_weight * nll;
  return out;
}

Status Run::reduce_preference(PreferenceSums& s) {
  if (world_ == 1) return Status::ok();
  std::vector<double> v = s.values();
  TAILOR_RETURN_IF_ERROR(all_reduce_values(*comm_, v));
  const double lowest = s.min_reward, highest = s.max_reward;
  s = PreferenceSums::from_values(v);
  s.min_reward = lowest;
  s.max_reward = highest;
  if (!reward()) return Status::ok();
  // The extremes over the ranks: each rank's pair, gathered.
  std::vector<double> ends(2 * static_cast<std::size_t>(world_), 0.0);
  ends[2 * static_cast<std::size_t>(rank_)] = lowest;
  ends[2 * static_cast<std::size_t>(rank_) + 1] = highest;
  TAILOR_RETURN_IF_ERROR(comm_->all_gather(ends.data(), ends.size(), sizeof(double), 2));
  for (int r = 0; r < world_; ++r) {
    s.min_reward = std::min(s.min_reward, ends[2 * static_cast<std::size_t>(r)]);
    s.max_reward = std::max(s.max_reward, ends[2 * static_cast<std::size_t>(r) + 1]);
  }
  return Status::ok();
}

void Run::write_preference(JsonWriter& w, const PreferenceSums& s, const char* prefix) const {
  const double n = std::max(1.0, s.pairs);
  const std::string p = prefix;
  if (reward()) {  // TRL's RewardTrainer's names
    w.field(p + "accuracy", s.accurate / n).field(p + "margin", s.margins / n);
    w.field(p + "min_reward", s.min_reward).field(p + "max_reward", s.max_reward);
    w.field(p + "mean_reward", (s.chosen_rewards + s.rejected_rewards) / (2.0 * n));
    return;
  }
  if (dsl::is_labelled(spec_.data)) {
    // TRL's KTOTrainer on unpaired data: each kind's mean where the step
    // has that kind, their difference where it has both; no accuracy
    // without pairs.
    const bool good = s.desirable > 0, bad = s.undesirable > 0;
    if (good) w.field(p + "rewards/chosen", s.chosen_rewards / s.desirable);
    if (bad) w.field(p + "rewards/rejected", s.rejected_rewards / s.undesirable);
    if (good && bad)
      w.field(p + "rewards/margins", s.chosen_rewards / s.desirable - s.rejected_rewards / s.undesirable);
    if (good) w.field(p + "logps/chosen", s.chosen_logps / s.desirable);
    if (bad) w.field(p + "logps/rejected", s.rejected_logps / s.undesirable);
    if (st_.kl_rows) w.field(p + "kl", s.kl / n);
    return;
  }
  w.field(p + "rewards/chosen", s.chosen_rewards / n).field(p + "rewards/rejected", s.rejected_rewards / n);
  w.field(p + "rewards/accuracies", s.accurate / n).field(p + "rewards/margins", s.margins / n);
  w.field(p + "logps/chosen", s.chosen_logps / n).field(p + "logps/rejected", s.rejected_logps / n);
  if (st_.kl_rows) w.field(p + "kl", s.kl / n);
  if (has_nll_term(spec_.training)) w.field(p + "nll_loss", s.nll / std::max(1.0, s.nll_tokens));
  if (spec_.training.method == dsl::TrainingMethod::kOrpo) {
    w.field(p + "log_odds_ratio", s.log_odds_ratio / n).field(p + "log_odds_chosen", s.log_odds_chosen / n);
  }
}

}  // namespace tailor::runner
