#include "runner/torch/preference_loss.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "runner/torch/cross_entropy.h"
#include "strategies/memory_model.h"

namespace tailor::runner {

ScoredSpans scored_spans(const std::vector<std::int32_t>& targets, std::int64_t rows, std::int64_t T,
                         bool shared_length) {
  ScoredSpans out;
  std::vector<std::int64_t> counts(static_cast<std::size_t>(rows), 0);
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t first = T, end = T, n = 0;
    for (std::int64_t t = 0; t < T; ++t) {
      if (targets[static_cast<std::size_t>(r * T + t)] == -100) continue;
      if (n++ == 0) first = t;
      end = t + 1;
    }
    if (n == 0) first = end = 0;
    out.first.push_back(first);
    out.end.push_back(end);
    counts[static_cast<std::size_t>(r)] = n;
  }
  out.split = out.end;
  if (!shared_length) return out;
  const std::int64_t pairs = rows / 2;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t p = r % pairs;
    const std::int64_t keep =
        std::min(counts[static_cast<std::size_t>(p)], counts[static_cast<std::size_t>(pairs + p)]);
    // The position after the row's keep-th scored target.
    std::int64_t n = 0, at = out.first[static_cast<std::size_t>(r)];
    while (n < keep && at < T)
      n += targets[static_cast<std::size_t>(r * T + at++)] != -100;
    out.split[static_cast<std::size_t>(r)] = keep == 0 ? out.first[static_cast<std::size_t>(r)] : at;
  }
  return out;
}

torch::Tensor RowLogps::weighted(double tail_weight) const {
  return tail_weight == 1.0 ? shared + tail : shared + tail_weight * tail;
}

RowLogps row_logps(CausalLMImpl& model, const torch::Tensor& hidden, const torch::Tensor& targets,
                   const ScoredSpans& spans) {
  const std::int64_t rows = hidden.size(0);
  // The summed log-probability of row r's targets at positions [from, to).
  const auto span = [&](std::int64_t r, std::int64_t from, std::int64_t to) {
    if (to <= from) return torch::zeros({}, hidden.options().dtype(torch::kFloat32));
    const torch::Tensor h = hidden.narrow(0, r, 1).narrow(1, from, to - from);
    return -model.loss_sum(h, targets.narrow(0, r, 1).narrow(1, from, to - from)).to(torch::kFloat32);
  };
  // The row whole, as the memory model counts it (every position's
  // logits), in two pieces only where LD-DPO splits it.
  const std::int64_t T = hidden.size(1);
  std::vector<torch::Tensor> shared, tail;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t split = spans.split[static_cast<std::size_t>(r)] < spans.end[static_cast<std::size_t>(r)]
                                   ? spans.split[static_cast<std::size_t>(r)]
                                   : T;
    shared.push_back(span(r, 0, split));
    tail.push_back(span(r, split, T));
  }
  return {torch::stack(shared), torch::stack(tail)};
}

torch::Tensor wpo_weights(CausalLMImpl& model, const torch::Tensor& hidden, const torch::Tensor& targets,
                          const ScoredSpans& spans, const torch::Tensor& logps) {
  torch::NoGradGuard no_grad;
  const std::int64_t rows = hidden.size(0), vocab = model.arch().vocab;
  const std::int64_t slice = cross_entropy_slice_rows(strategies::kCrossEntropySliceElements, vocab);
  std::vector<torch::Tensor> sums, counts;
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto i = static_cast<std::size_t>(r);
    const std::int64_t from = spans.first[i], to = spans.end[i];
    torch::Tensor sum = torch::zeros({}, hidden.options().dtype(torch::kFloat32));
    for (std::int64_t at = from; at < to; at += slice) {
      const std::int64_t n = std::min(slice, to - at);
      // log sum_v p(v)^2 = log sum e^(2 (z - m)) - 2 log sum e^(z - m), on
      // the logits the loss reads (soft-capped where the model caps them),
      // in fp32, in place: the slice's logits and one fp32 copy at most
      // (strategies' logits_bytes counts them).
      torch::Tensor z = model.logits(hidden.narrow(0, r, 1).narrow(1, at, n)).to(torch::kFloat32);
      z.sub_(std::get<0>(z.max(-1, /*keepdim=*/true)));
      z.exp_();
      const torch::Tensor total = z.sum(-1);
      const torch::Tensor lss = torch::log(z.square_().sum(-1)) - 2.0 * torch::log(total);
      const torch::Tensor scored = targets.narrow(0, r, 1).narrow(1, at, n).ne(-100);
      sum = sum + (lss * scored).sum();
    }
    sums.push_back(sum);
    counts.push_back(targets.narrow(0, r, 1).ne(-100).sum().to(torch::kFloat32));
  }
  const torch::Tensor lss = torch::stack(sums), n = torch::stack(counts).clamp_min(1.0);
  return torch::exp((logps.detach().to(torch::kFloat32) - lss) / n);
}

const std::vector<double PreferenceSums::*>& PreferenceSums::fields() {
  static const std::vector<double PreferenceSums::*> k = {&PreferenceSums::pairs,
                                                          &PreferenceSums::loss,
                                                          &PreferenceSums::chosen_rewards,
                                                          &PreferenceSums::rejected_rewards,
                                                          &PreferenceSums::accurate,
                                                          &PreferenceSums::margins,
                                                          &PreferenceSums::chosen_logps,
                                                          &PreferenceSums::rejected_logps,
                                                          &PreferenceSums::nll,
                                                          &PreferenceSums::nll_tokens,
                                                          &PreferenceSums::log_odds_ratio,
                                                          &PreferenceSums::log_odds_chosen,
                                                          &PreferenceSums::kl,
                                                          &PreferenceSums::desirable,
                                                          &PreferenceSums::undesirable};
  return k;
}

std::vector<double> PreferenceSums::values() const {
  std::vector<double> v;
  for (double PreferenceSums::*f : fields()) v.push_back(this->*f);
  return v;
}

PreferenceSums PreferenceSums::from_values(const std::vector<double>& v) {
  PreferenceSums s;
  for (std::size_t i = 0; i < fields().size(); ++i) s.*fields()[i] = v.at(i);
  return s;
}

void PreferenceSums::add(const PreferenceSums& o) {
  for (double PreferenceSums::*f : fields()) this->*f += o.*f;
  min_reward = std::min(min_reward, o.min_reward);
  max_reward = std::max(max_reward, o.max_reward);
}

double PreferenceSums::mean_loss(double nll_weight) const {
  return loss / std::max(1.0, pairs) + (nll_tokens > 0 ? nll_weight * nll / nll_tokens : 0.0);
}

namespace {

// log(1 - e^x) for x < 0, as TRL's ORPOTrainer computes it (log1mexp):
// two forms, split at -log 2 where each loses the least.
torch::Tensor log1mexp(const torch::Tensor& x) {
  return torch::where(x < -0.6931471805599453, torch::log1p(-torch::exp(x)), torch::log(-torch::expm1(x)));
}

// A completion's log-ratio u as f-DPO's f'(e^u) (dsl::FDivergence), as TRL
// computes each: alpha_divergence through exp((a - 1) u) clamped at 80, as
// TRL clamps it in fp32, and u itself at a = 1 (TRL's limit case).
torch::Tensor f_divergence_score(const torch::Tensor& u, const dsl::TrainingSpec& o) {
  switch (o.f_divergence_type) {
    case dsl::FDivergence::kReverseKl: return u;
    case dsl::FDivergence::kForwardKl: return 1.0 - torch::exp(-u);
    case dsl::FDivergence::kJsDivergence: return std::log(2.0) + torch::log_sigmoid(u);
    case dsl::FDivergence::kAlphaDivergence: {
      const double a = o.f_alpha_divergence_coef;
      if (std::abs(a - 1.0) < 1e-6) return u;
      return (torch::exp(torch::clamp_max((a - 1.0) * u, 80.0)) - 1.0) / (a - 1.0);
    }
  }
  return u;
}

// One dpo loss's term of each pair.
torch::Tensor dpo_terms(dsl::PreferenceLoss loss, const torch::Tensor& chosen_logratio,
                        const torch::Tensor& rejected_logratio, const torch::Tensor& tokens, std::int64_t pairs,
                        const dsl::TrainingSpec& o) {
  const double beta = o.beta;
  // The losses of h alone read the log-ratios through the f-divergence
  // (the spec refuses another divergence for the rest).
  const bool f = dsl::uses_f_divergence(loss);
  const torch::Tensor chosen_ratio = f ? f_divergence_score(chosen_logratio, o) : chosen_logratio;
  const torch::Tensor rejected_ratio = f ? f_divergence_score(rejected_logratio, o) : rejected_logratio;
  switch (loss) {
    case dsl::PreferenceLoss::kSigmoid:
      return -torch::log_sigmoid(beta * (chosen_ratio - rejected_ratio));
    case dsl::PreferenceLoss::kHinge:
      return torch::relu(1.0 - beta * (chosen_ratio - rejected_ratio));
    case dsl::PreferenceLoss::kRobust: {
      const double e = o.label_smoothing;
      const torch::Tensor h = beta * (chosen_ratio - rejected_ratio);
      return (-(1.0 - e) * torch::log_sigmoid(h) + e * torch::log_sigmoid(-h)) / (1.0 - 2.0 * e);
    }
    case dsl::PreferenceLoss::kExoPair: {
      // KL of the pair's softmax (q_w, q_l) from the target (1 - e, e).
      const double e = o.label_smoothing;
      const torch::Tensor h = beta * (chosen_ratio - rejected_ratio);
      return torch::sigmoid(h) * (torch::log_sigmoid(h) - std::log1p(-e)) +
             torch::sigmoid(-h) * (torch::log_sigmoid(-h) - std::log(e));
    }
    case dsl::PreferenceLoss::kNcaPair:
      return -torch::log_sigmoid(beta * chosen_ratio) - 0.5 * torch::log_sigmoid(-beta * chosen_ratio) -
             0.5 * torch::log_sigmoid(-beta * rejected_ratio);
    case dsl::PreferenceLoss::kBcoPair:
      return -torch::log_sigmoid(beta * chosen_ratio) - torch::log_sigmoid(-beta * rejected_ratio);
    case dsl::PreferenceLoss::kSppoHard:
      return (chosen_ratio - 0.5 / beta).pow(2) + (rejected_ratio + 0.5 / beta).pow(2);
    case dsl::PreferenceLoss::kApoZero:
      return (1.0 - torch::sigmoid(beta * chosen_ratio)) + torch::sigmoid(beta * rejected_ratio);
    case dsl::PreferenceLoss::kApoDown:
      return torch::sigmoid(beta * chosen_ratio) + (1.0 - torch::sigmoid(beta * (chosen_ratio - rejected_ratio)));
    case dsl::PreferenceLoss::kIpo:
    case dsl::PreferenceLoss::kSigmoidNorm: {
      // TRL normalises IPO's log-ratios by the completion's length (its
      // authors' form, dpo_trainer.py), at least one token; sigmoid_norm
      // is DPO's sigmoid on the same per-token means.
      const torch::Tensor n = tokens.to(chosen_ratio.dtype()).clamp_min(1.0);
      const torch::Tensor delta = chosen_ratio / n.narrow(0, 0, pairs) - rejected_ratio / n.narrow(0, pairs, pairs);
      if (loss == dsl::PreferenceLoss::kSigmoidNorm) return -torch::log_sigmoid(beta * delta);
      return (delta - 1.0 / (2.0 * beta)).pow(2);
    }
    case dsl::PreferenceLoss::kDiscopop: {
      // A logistic and an exponential term, mixed by sigmoid(h / tau).
      const torch::Tensor h = beta * (chosen_ratio - rejected_ratio);
      const torch::Tensor mix = torch::sigmoid(h / o.discopop_tau);
      return -torch::log_sigmoid(h) * (1.0 - mix) + torch::exp(-h) * mix;
    }
    case dsl::PreferenceLoss::kSft:  // the caller's NLL
      return torch::zeros_like(chosen_ratio);
    case dsl::PreferenceLoss::kKto:  // kto's (kto_terms); the spec refuses them for dpo
    case dsl::PreferenceLoss::kApoZeroUnpaired: break;
  }
  return {};
}

// KTO's term of a desirable and of an undesirable completion, each of its
// log-ratio u, weighted.
torch::Tensor kto_desirable(const torch::Tensor& u, double kl, const dsl::TrainingSpec& o) {
  const double beta = o.beta;
  if (dsl::has_loss(o, dsl::PreferenceLoss::kApoZeroUnpaired))
    return o.desirable_weight * (1.0 - torch::sigmoid(beta * u));
  return o.desirable_weight * (1.0 - torch::sigmoid(beta * (u - kl)));
}
torch::Tensor kto_undesirable(const torch::Tensor& u, double kl, const dsl::TrainingSpec& o) {
  const double beta = o.beta;
  if (dsl::has_loss(o, dsl::PreferenceLoss::kApoZeroUnpaired)) return o.undesirable_weight * torch::sigmoid(beta * u);
  return o.undesirable_weight * (1.0 - torch::sigmoid(beta * (kl - u)));
}

torch::Tensor kto_terms(const torch::Tensor& chosen_ratio, const torch::Tensor& rejected_ratio, double kl,
                        const dsl::TrainingSpec& o) {
  return 0.5 * (kto_desirable(chosen_ratio, kl, o) + kto_undesirable(rejected_ratio, kl, o));
}

}  // namespace

PreferenceLossOut preference_loss(const torch::Tensor& logps, const torch::Tensor& reference,
                                  const torch::Tensor& tokens, const dsl::TrainingSpec& o, double kl,
                                  const torch::Tensor& pair_weights) {
  const std::int64_t pairs = logps.size(0) / 2;
  PreferenceLossOut out;
  PreferenceSums& s = out.sums;
  torch::Tensor per_pair, scores, rewards;
  if (dsl::needs_reference(o.method)) {
    const torch::Tensor ratios = logps - reference.to(logps.dtype());
    const torch::Tensor chosen = ratios.narrow(0, 0, pairs), rejected = ratios.narrow(0, pairs, pairs);
    if (o.method == dsl::TrainingMethod::kKto) {
      per_pair = kto_terms(chosen, rejected, kl, o);
      s.kl = kl * static_cast<double>(pairs);
    } else {
      // The losses' terms, each times its weight, added (TRL's list).
      for (std::size_t i = 0; i < o.losses.size(); ++i) {
        const torch::Tensor term = dsl::loss_weight(o, i) * dpo_terms(o.losses[i], chosen, rejected, tokens, pairs, o);
        per_pair = per_pair.defined() ? per_pair + term : term;
      }
      if (pair_weights.defined()) per_pair = per_pair * pair_weights.to(per_pair.dtype());
    }
    scores = logps;
    rewards = o.beta * ratios.detach().to(torch::kFloat64);
  } else {
    // Per-token means, at least one token (a completion is never empty).
    const torch::Tensor means = logps / tokens.to(logps.dtype()).clamp_min(1.0);
    // The rewards before their scale: the means, or under AlphaPO (1 -
    // p^-alpha) / alpha of p = exp(mean), through expm1 so that it stays
    // exact near alpha m = 0 (TRL computes exp(m).pow(-alpha)). logps/*
    // stay the means, as TRL logs them.
    const torch::Tensor shaped =
        o.method == dsl::TrainingMethod::kSimpo && o.alpha != 0 ? -torch::expm1(-o.alpha * means) / o.alpha : means;
    const torch::Tensor chosen = shaped.narrow(0, 0, pairs), rejected = shaped.narrow(0, pairs, pairs);
    double scale = o.beta;
    if (o.method == dsl::TrainingMethod::kSimpo) {
      // TRL's order: the margin gamma / beta inside the scaled difference;
      // label smoothing e as its CPOTrainer weighs the flipped label.
      const torch::Tensor h = o.beta * ((chosen - rejected) - o.gamma / o.beta);
      const double e = o.label_smoothing;
      per_pair = e > 0 ? -(1.0 - e) * torch::log_sigmoid(h) - e * torch::log_sigmoid(-h) : -torch::log_sigmoid(h);
    } else {
      const torch::Tensor log_odds = (chosen - rejected) - (log1mexp(chosen) - log1mexp(rejected));
      const torch::Tensor ratio = torch::log_sigmoid(log_odds);
      per_pair = -o.orpo_lambda * ratio;
      scale = o.orpo_lambda;
      s.log_odds_ratio = ratio.detach().to(torch::kFloat64).sum().item<double>();
      s.log_odds_chosen = log_odds.detach().to(torch::kFloat64).sum().item<double>();
    }
    scores = means;
    rewards = scale * shaped.detach().to(torch::kFloat64);
  }
  out.loss_sum = per_pair.sum();
  const torch::Tensor chosen_rewards = rewards.narrow(0, 0, pairs);
  const torch::Tensor rejected_rewards = rewards.narrow(0, pairs, pairs);
  const torch::Tensor l = scores.detach().to(torch::kFloat64);
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

PreferenceLossOut labelled_loss(const torch::Tensor& logps, const torch::Tensor& reference,
                                const torch::Tensor& desirable, const dsl::TrainingSpec& o, double kl) {
  const torch::Tensor ratios = logps - reference.to(logps.dtype());
  const torch::Tensor per_row = torch::where(desirable, kto_desirable(ratios, kl, o), kto_undesirable(ratios, kl, o));
  PreferenceLossOut out;
  out.loss_sum = per_row.sum();
  PreferenceSums& s = out.sums;
  const auto rows = static_cast<double>(logps.size(0));
  const torch::Tensor good = desirable.to(torch::kFloat64), bad = 1.0 - good;
  const torch::Tensor rewards = o.beta * ratios.detach().to(torch::kFloat64);
  const torch::Tensor l = logps.detach().to(torch::kFloat64);
  // The sums in one copy to the host (one wait for the device, not six).
  const torch::Tensor sums =
      torch::stack({good.sum(), per_row.detach().to(torch::kFloat64).sum(), (rewards * good).sum(),
                    (rewards * bad).sum(), (l * good).sum(), (l * bad).sum()})
          .cpu();
  const auto v = sums.accessor<double, 1>();
  s.pairs = rows;
  s.desirable = v[0];
  s.undesirable = rows - s.desirable;
  s.loss = v[1];
  s.kl = kl * rows;
  s.chosen_rewards = v[2];
  s.rejected_rewards = v[3];
  s.chosen_logps = v[4];
  s.rejected_logps = v[5];
  return out;
}

PreferenceLossOut reward_loss(const torch::Tensor& scores, double center, const torch::Tensor& margins) {
  const std::int64_t pairs = scores.size(0) / 2;
  const torch::Tensor chosen = scores.narrow(0, 0, pairs), rejected = scores.narrow(0, pairs, pairs);
  PreferenceLossOut out;
  torch::Tensor per_pair = margins.defined() ? -torch::log_sigmoid(chosen - rejected - margins.to(scores.dtype()))
                                             : -torch::log_sigmoid(chosen - rejected);
  if (center > 0) per_pair = per_pair + center * (chosen + rejected).square();
  out.loss_sum = per_pair.sum();
  const torch::Tensor r = scores.detach().to(torch::kFloat64);
  const torch::Tensor w = r.narrow(0, 0, pairs), l = r.narrow(0, pairs, pairs);
  PreferenceSums& s = out.sums;
  s.pairs = static_cast<double>(pairs);
  s.loss = per_pair.detach().to(torch::kFloat64).sum().item<double>();
  s.chosen_rewards = w.sum().item<double>();
  s.rejected_rewards = l.sum().item<double>();
  s.accurate = (w > l).sum().item<double>();
  s.margins = (w - l).sum().item<double>();
  s.min_reward = r.min().item<double>();
  s.max_reward = r.max().item<double>();
  return out;
}

}  // namespace tailor::runner
