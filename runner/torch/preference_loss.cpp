#include "runner/torch/preference_loss.h"

#include <cmath>

#include <vector>

namespace tailor::runner {

torch::Tensor sequence_logps(CausalLMImpl& model, const torch::Tensor& hidden, const torch::Tensor& targets) {
  std::vector<torch::Tensor> rows;
  rows.reserve(static_cast<std::size_t>(hidden.size(0)));
  for (std::int64_t r = 0; r < hidden.size(0); ++r) {
    rows.push_back(-model.loss_sum(hidden.narrow(0, r, 1), targets.narrow(0, r, 1)).to(torch::kFloat32));
  }
  return torch::stack(rows);
}

void PreferenceSums::add(const PreferenceSums& o) {
  pairs += o.pairs;
  loss += o.loss;
  chosen_rewards += o.chosen_rewards;
  rejected_rewards += o.rejected_rewards;
  accurate += o.accurate;
  margins += o.margins;
  chosen_logps += o.chosen_logps;
  rejected_logps += o.rejected_logps;
}

PreferenceLossOut preference_loss(const torch::Tensor& logps, const torch::Tensor& reference,
                                  const torch::Tensor& tokens, dsl::PreferenceLoss type, double beta,
                                  double label_smoothing) {
  const std::int64_t pairs = logps.size(0) / 2;
  const torch::Tensor ratios = logps - reference.to(logps.dtype());
  const torch::Tensor chosen_ratio = ratios.narrow(0, 0, pairs);
  const torch::Tensor rejected_ratio = ratios.narrow(0, pairs, pairs);
  torch::Tensor per_pair;
  switch (type) {
    case dsl::PreferenceLoss::kSigmoid:
      per_pair = -torch::log_sigmoid(beta * (chosen_ratio - rejected_ratio));
      break;
    case dsl::PreferenceLoss::kHinge:
      per_pair = torch::relu(1.0 - beta * (chosen_ratio - rejected_ratio));
      break;
    case dsl::PreferenceLoss::kRobust: {
      const double e = label_smoothing;
      const torch::Tensor h = beta * (chosen_ratio - rejected_ratio);
      per_pair = (-(1.0 - e) * torch::log_sigmoid(h) + e * torch::log_sigmoid(-h)) / (1.0 - 2.0 * e);
      break;
    }
    case dsl::PreferenceLoss::kExoPair: {
      // KL of the pair's softmax (q_w, q_l) from the target (1 - e, e).
      const double e = label_smoothing;
      const torch::Tensor h = beta * (chosen_ratio - rejected_ratio);
      per_pair = torch::sigmoid(h) * (torch::log_sigmoid(h) - std::log1p(-e)) +
                 torch::sigmoid(-h) * (torch::log_sigmoid(-h) - std::log(e));
      break;
    }
    case dsl::PreferenceLoss::kNcaPair:
      per_pair = -torch::log_sigmoid(beta * chosen_ratio) - 0.5 * torch::log_sigmoid(-beta * chosen_ratio) -
                 0.5 * torch::log_sigmoid(-beta * rejected_ratio);
      break;
    case dsl::PreferenceLoss::kBcoPair:
      per_pair = -torch::log_sigmoid(beta * chosen_ratio) - torch::log_sigmoid(-beta * rejected_ratio);
      break;
    case dsl::PreferenceLoss::kSppoHard:
      per_pair = (chosen_ratio - 0.5 / beta).pow(2) + (rejected_ratio + 0.5 / beta).pow(2);
      break;
    case dsl::PreferenceLoss::kApoZero:
      per_pair = (1.0 - torch::sigmoid(beta * chosen_ratio)) + torch::sigmoid(beta * rejected_ratio);
      break;
    case dsl::PreferenceLoss::kApoDown:
      per_pair = torch::sigmoid(beta * chosen_ratio) + (1.0 - torch::sigmoid(beta * (chosen_ratio - rejected_ratio)));
      break;
    case dsl::PreferenceLoss::kIpo: {
      // TRL normalises IPO's log-ratios by the completion's length (its
      // authors' form, dpo_trainer.py), at least one token.
      const torch::Tensor n = tokens.to(logps.dtype()).clamp_min(1.0);
      const torch::Tensor delta = chosen_ratio / n.narrow(0, 0, pairs) - rejected_ratio / n.narrow(0, pairs, pairs);
      per_pair = (delta - 1.0 / (2.0 * beta)).pow(2);
      break;
    }
  }
  PreferenceLossOut out;
  out.loss_sum = per_pair.sum();
  const torch::Tensor d = ratios.detach().to(torch::kFloat64);
  const torch::Tensor chosen_rewards = beta * d.narrow(0, 0, pairs);
  const torch::Tensor rejected_rewards = beta * d.narrow(0, pairs, pairs);
  const torch::Tensor l = logps.detach().to(torch::kFloat64);
  PreferenceSums& s = out.sums;
  s.pairs = static_cast<double>(pairs);
  s.loss = per_pair.detach().sum().item<double>();
  s.chosen_rewards = chosen_rewards.sum().item<double>();
  s.rejected_rewards = rejected_rewards.sum().item<double>();
  s.accurate = (chosen_rewards > rejected_rewards).sum().item<double>();
  s.margins = (chosen_rewards - rejected_rewards).sum().item<double>();
  s.chosen_logps = l.narrow(0, 0, pairs).sum().item<double>();
  s.rejected_logps = l.narrow(0, pairs, pairs).sum().item<double>();
  return out;
}

}  // namespace tailor::runner
