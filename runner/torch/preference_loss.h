// Preference training's loss (training.method dpo, orpo, simpo, kto): each
// pair's chosen and rejected completions scored by the trained model (and,
// for dpo and kto, by the frozen reference) as TRL 1.16 scores them
// (DPOTrainer, ORPOTrainer, CPOTrainer, KTOTrainer), so the losses and the
// metrics TRL users read compare one to one.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "dsl/job_spec.h"
#include "runner/torch/model.h"

namespace tailor::runner {

// Where each row's scored targets lie, by position: within [first, end),
// and from `split` on its tail under LD-DPO (first <= split <= end; split
// == end without it, and first == end for a row with none).
struct ScoredSpans {
  std::vector<std::int64_t> first, split, end;
};
// From `targets` (rows x T on the host, -100 unscored). With `shared_length`
// the rows are pairs' ([chosen of pairs 0..P-1, rejected of pairs 0..P-1])
// and each row's split follows as many scored targets as its pair's shorter
// completion has (TRL's shared length for ld_alpha).
ScoredSpans scored_spans(const std::vector<std::int32_t>& targets, std::int64_t rows, std::int64_t T,
                         bool shared_length);

// Each row's summed log-probability of its scored targets before its split
// (`shared`) and from it on (`tail`, zero where it has none), fp32 vectors
// of B. Goes through the model's training loss a row at a time (loss_sum:
// the sliced cross-entropy or the fused head), so no (B, T, V) fp32 copy of
// the logits ever exists; backward flows as the loss's does.
struct RowLogps {
  torch::Tensor shared, tail;
  // shared + weight * tail: the log-probabilities the losses read (LD-DPO's
  // weight ld_alpha; 1 sums every scored target).
  torch::Tensor weighted(double tail_weight) const;
};
RowLogps row_logps(CausalLMImpl& model, const torch::Tensor& hidden, const torch::Tensor& targets,
                   const ScoredSpans& spans);
// WPO's weight of each row (Zhou et al. 2024, Eq. 2; TRL's use_weighting):
// exp of the mean over its scored targets of log p(target) - log sum_v
// p(v)^2, from `logps` (each row's plain sum) and the logits of `hidden`
// at the scored positions, computed a slice of positions at a time without
// gradients. fp32 (B,).
torch::Tensor wpo_weights(CausalLMImpl& model, const torch::Tensor& hidden, const torch::Tensor& targets,
                          const ScoredSpans& spans, const torch::Tensor& logps);

// Sums over a micro-batch's pairs (what the ranks and the accumulation add
// up; divide by the pairs for TRL's means).
struct PreferenceSums {
  double pairs = 0;
  double loss = 0;                                  // the pairs' terms (orpo: without the NLL)
  double chosen_rewards = 0, rejected_rewards = 0;  // TRL's rewards/*: dpo beta * (log pi - log ref),
                                                    // simpo beta * mean log pi, orpo lambda * mean log pi
  double accurate = 0;                              // pairs whose chosen reward is above the rejected
  double margins = 0;
  double chosen_logps = 0, rejected_logps = 0;      // the trained model's, TRL's logps/* (orpo, simpo:
                                                    // per-token means)
  // orpo: the chosen rows' NLL summed over their prompt and completion
  // tokens (simpo with cpo_alpha: over their completions), those tokens,
  // and the sums of log sigmoid(log odds) and of the log odds (TRL's
  // nll_loss, log_odds_ratio and log_odds_chosen).
  double nll = 0, nll_tokens = 0;
  double log_odds_ratio = 0, log_odds_chosen = 0;
  // kto: each micro-batch's KL estimate times its pairs (so that dividing
  // by the pairs gives TRL's kl, the mean over micro-batches).
  double kl = 0;
  // kto's labelled completions (its unpaired examples): `pairs` counts the
  // rows, these its desirable and undesirable ones, and chosen_* and
  // rejected_* sum over each kind (TRL's rewards/chosen is their mean).
  double desirable = 0, undesirable = 0;
  // reward: the lowest and highest score of any row (not sums: add() and
  // the ranks take their minimum and maximum; TRL's min_reward and
  // max_reward, which TRL averages over micro-batches instead).
  double min_reward = std::numeric_limits<double>::infinity();
  double max_reward = -std::numeric_limits<double>::infinity();
  // Every sum once, in one order (what add and the ranks' all-reduce walk;
  // not min_reward and max_reward).
  static const std::vector<double PreferenceSums::*>& fields();
  void add(const PreferenceSums& o);
  std::vector<double> values() const;
  static PreferenceSums from_values(const std::vector<double>& v);
  // The mean loss of these pairs: the terms per pair, plus the NLL per
  // token times `nll_weight` (orpo 1, simpo cpo_alpha).
  double mean_loss(double nll_weight = 1.0) const;
};

struct PreferenceLossOut {
  torch::Tensor loss_sum;  // fp32 scalar, the sum of the pairs' terms (differentiable; orpo: without the NLL)
  PreferenceSums sums;
};

// The rows are [chosen of pairs 0..P-1, rejected of pairs 0..P-1]: `logps`
// the trained model's summed log-probabilities (with gradients),
// `reference` the reference's (no gradients; dpo only), `tokens` each
// row's count of trained targets (IPO, ORPO and SimPO average over them).
// dpo, with h = (logps_w - ref_w) - (logps_l - ref_l):
//   sigmoid  -log sigmoid(beta h)                   (Rafailov et al. 2023)
//   ipo      (h' - 1 / (2 beta))^2, h' on per-token means  (Azar et al. 2023)
//   hinge    relu(1 - beta h)                       (Zhao et al. 2023, SLiC)
//   and the others of dsl::PreferenceLoss, each as TRL 1.16 computes it;
//   `label_smoothing` is read by robust and exo_pair (and simpo, below),
//   `discopop_tau` by discopop, and the losses of h alone read each
//   log-ratio u through `f_divergence_type` (f'(e^u); u under reverse_kl).
//   rewards stay beta u, as TRL logs them.
// simpo, on per-token means m, with h = beta (m_w - m_l) - gamma:
//   -(1 - e) log sigmoid(h) - e log sigmoid(-h), e = label_smoothing
//   (Meng et al. 2024; TRL's CPOTrainer, loss_type simpo, cpo_alpha 0);
//   with `alpha` (AlphaPO, Gupta et al. 2025) each m replaced by
//   (1 - e^(-alpha m)) / alpha in h and the rewards, not in logps/*.
// orpo, on per-token means m: -lambda log sigmoid(log odds), log odds =
//   (m_w - m_l) - (log(1 - e^m_w) - log(1 - e^m_l)) (Hong et al. 2024; TRL's
//   ORPOTrainer). Its NLL term is the caller's (Run::pair_loss).
// kto, each row alone, with r = beta (logps - ref) and z = `kl` (the
//   micro-batch's KL estimate, >= 0), chosen rows desirable and rejected
//   rows undesirable (Ethayarajh et al. 2024, Eq. 7; TRL's KTOTrainer):
//   kto                desirable 1 - sigmoid(r - beta z), undesirable 1 - sigmoid(beta z - r)
//   apo_zero_unpaired  desirable 1 - sigmoid(r), undesirable sigmoid(r)
//   weighted by desirable_weight and undesirable_weight; a pair's term is
//   the mean of its two rows', so the mean over pairs is TRL's mean over
//   rows.
// `t` gives the method and its keys (beta, loss_type, gamma, lambda,
// label_smoothing, the kto weights).
//
// dpo's losses are a list (training.loss_type): each pair's term is the sum
// of each loss's term times its weight; sft's is the caller's (an NLL over
// the chosen rows' tokens, Run::pair_loss). `pair_weights` (WPO; undefined
// = 1) scales each pair's term.
PreferenceLossOut preference_loss(const torch::Tensor& logps, const torch::Tensor& reference,
                                  const torch::Tensor& tokens, const dsl::TrainingSpec& t, double kl = 0.0,
                                  const torch::Tensor& pair_weights = torch::Tensor());

// kto on labelled completions (data.label_field), each row alone as above,
// desirable where `desirable` (a bool vector of the rows) is true: the
// terms of the rows, weighted, summed (the caller divides by the rows, TRL's
// mean over them); the sums count rows in `pairs` and each kind apart.
PreferenceLossOut labelled_loss(const torch::Tensor& logps, const torch::Tensor& reference,
                                const torch::Tensor& desirable, const dsl::TrainingSpec& t, double kl = 0.0);

// reward, on each row's score r (fp32, chosen rows then rejected):
// -log sigmoid(r_w - r_l - m) (the Bradley-Terry model; Ouyang et al. 2022;
// m each pair's margin from `margins`, Touvron et al. 2023, Llama 2's
// reward models), plus `center` (r_w + r_l)^2 (training.center_rewards;
// Eisenstein et al. 2023), as TRL's RewardTrainer computes them. `margins`
// is undefined (no margin) or one value a pair. The sums' loss holds both
// terms, as TRL logs it; their rewards are the scores, and their margins
// r_w - r_l without m (TRL's "margin" metric).
PreferenceLossOut reward_loss(const torch::Tensor& scores, double center = 0.0,
                              const torch::Tensor& margins = torch::Tensor());

}  // namespace tailor::runner
