// Preference training's loss (training.method: dpo): each pair's chosen and
// rejected completions scored by the trained model and by the frozen
// reference, as TRL's DPOTrainer scores them (trl 1.16, dpo_trainer.py), so
// the losses and the metrics TRL users read compare one to one.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "dsl/job_spec.h"
#include "runner/torch/model.h"

namespace tailor::runner {

// Each row's summed log-probability of its trained targets (-100 ignored),
// an fp32 vector of B. Goes through the model's training loss a row at a
// time (loss_sum: the sliced cross-entropy or the fused head), so no
// (B, T, V) fp32 copy of the logits ever exists; backward flows as the
// loss's does.
torch::Tensor sequence_logps(CausalLMImpl& model, const torch::Tensor& hidden, const torch::Tensor& targets);

// Sums over a micro-batch's pairs (what the ranks and the accumulation add
// up; divide by the pairs for TRL's means).
struct PreferenceSums {
  double pairs = 0;
  double loss = 0;
  double chosen_rewards = 0, rejected_rewards = 0;  // beta * (log pi - log ref), TRL's rewards/*
  double accurate = 0;                              // pairs whose chosen reward is above the rejected
  double margins = 0;
  double chosen_logps = 0, rejected_logps = 0;      // the trained model's, TRL's logps/*
  void add(const PreferenceSums& o);
};

struct PreferenceLossOut {
  torch::Tensor loss_sum;  // fp32 scalar, the sum of the pairs' losses (differentiable)
  PreferenceSums sums;
};

// The rows are [chosen of pairs 0..P-1, rejected of pairs 0..P-1]: `logps`
// the trained model's (with gradients), `reference` the reference's (no
// gradients), `tokens` each row's count of trained targets (IPO averages
// over them). h = (logps_w - ref_w) - (logps_l - ref_l):
//   sigmoid  -log sigmoid(beta h)                   (Rafailov et al. 2023)
//   ipo      (h' - 1 / (2 beta))^2, h' on per-token means  (Azar et al. 2023)
//   hinge    relu(1 - beta h)                       (Zhao et al. 2023, SLiC)
// and the others of dsl::PreferenceLoss, each as TRL 1.16 computes it;
// `label_smoothing` is read by robust and exo_pair.
PreferenceLossOut preference_loss(const torch::Tensor& logps, const torch::Tensor& reference,
                                  const torch::Tensor& tokens, dsl::PreferenceLoss type, double beta,
                                  double label_smoothing = 0);

}  // namespace tailor::runner
