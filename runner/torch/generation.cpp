#include "runner/torch/generation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <tuple>
#include <utility>

namespace tailor::runner {
namespace {

using torch::Tensor;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The next token from one row of logits (V), fp32 on the CPU.
std::int32_t choose(const Tensor& logits, const SamplingOptions& o, at::Generator& gen) {
  if (o.temperature == 0) return static_cast<std::int32_t>(logits.argmax().item<std::int64_t>());
  const Candidates c = sampling_candidates(logits, o);
  const std::int64_t pick = torch::multinomial(c.probs, 1, /*replacement=*/false, gen).item<std::int64_t>();
  return static_cast<std::int32_t>(c.ids[pick].item<std::int64_t>());
}

// What the penalties read: which tokens the prompt and the generated ones
// hold, and how many times each was generated (V each, fp32 on the CPU).
struct Seen {
  Tensor any, generated;
  Seen(const std::vector<std::int32_t>& prompt, std::int64_t vocab)
      : any(torch::zeros({vocab}, torch::kFloat32)), generated(torch::zeros({vocab}, torch::kFloat32)) {
    any.index_fill_(0, torch::tensor(std::vector<std::int64_t>(prompt.begin(), prompt.end()), torch::kInt64), 1.0);
  }
  void add(std::int32_t id) {
    any[id] = 1.0;
    generated[id] += 1.0;
  }
};

// `logits` with the options' biases and penalties (a copy; the model's
// logits stay for scoring).
Tensor processed(const Tensor& logits, const SamplingOptions& o, const std::optional<Seen>& seen) {
  Tensor z = logits;
  if (!o.logit_bias.empty()) {
    z = z.clone();
    auto at = z.accessor<float, 1>();
    for (const auto& [id, bias] : o.logit_bias)
      at[id] += static_cast<float>(bias);
  }
  if (!seen) return z;
  if (o.repetition_penalty != 1.0) {
    const Tensor repeated = seen->any.gt(0);
    z = torch::where(repeated, torch::where(z < 0, z * o.repetition_penalty, z / o.repetition_penalty), z);
  }
  if (o.frequency_penalty != 0 || o.presence_penalty != 0) {
    z = z - seen->generated * o.frequency_penalty - seen->generated.gt(0).to(torch::kFloat32) * o.presence_penalty;
  }
  return z;
}

// Rows of log-probabilities (R, V) fp32 on the CPU: each row's `targets`
// (R) and its `top` best.
void score_rows(const Tensor& logprobs, const std::vector<std::int64_t>& targets, std::int64_t top,
                std::vector<TokenScore>& out) {
  const Tensor picked = logprobs.gather(1, torch::tensor(targets, torch::kInt64).unsqueeze(1)).squeeze(1).contiguous();
  const auto picked_at = picked.accessor<float, 1>();
  Tensor best_values, best_ids;
  if (top > 0) {
    std::tie(best_values, best_ids) = logprobs.topk(std::min(top, logprobs.size(1)), /*dim=*/1);
    best_values = best_values.contiguous();
    best_ids = best_ids.contiguous();
  }
  for (std::int64_t r = 0; r < logprobs.size(0); ++r) {
    TokenScore s;
    s.logprob = picked_at[r];
    if (top > 0) {
      const auto values = best_values.accessor<float, 2>();
      const auto ids = best_ids.accessor<std::int64_t, 2>();
      for (std::int64_t k = 0; k < best_values.size(1); ++k) {
        s.top.emplace_back(static_cast<std::int32_t>(ids[r][k]), values[r][k]);
      }
    }
    out.push_back(std::move(s));
  }
}

}  // namespace

// Transformers' warpers in their order: divide by the temperature, keep the
// top k, keep the smallest prefix of the sorted probabilities whose sum
// reaches top_p, keep those at least min_p times the most likely (the most
// likely token always kept), renormalise.
Candidates sampling_candidates(const Tensor& logits, const SamplingOptions& o) {
  Tensor z = logits / o.temperature;
  auto [sorted, order] = z.sort(/*dim=*/-1, /*descending=*/true);
  std::int64_t keep = sorted.size(0);
  if (o.top_k > 0) keep = std::min(keep, o.top_k);
  Tensor probs = torch::softmax(sorted.slice(0, 0, keep), -1);
  if (o.top_p < 1.0) {
    // Tokens whose preceding mass already reaches top_p are dropped.
    const Tensor before = probs.cumsum(0) - probs;
    keep = std::max<std::int64_t>(1, (before < o.top_p).sum().item<std::int64_t>());
    probs = probs.slice(0, 0, keep);
  }
  if (o.min_p > 0) {
    // The ratio to the most likely token does not change with renormalising.
    keep = std::max<std::int64_t>(1, (probs >= probs[0] * o.min_p).sum().item<std::int64_t>());
    probs = probs.slice(0, 0, keep);
  }
  return {order.slice(0, 0, keep), probs / probs.sum()};
}

Status check_prompt(const CausalLM& model, const std::vector<std::int32_t>& prompt, std::int64_t max_new_tokens) {
  const dsl::ModelArch& arch = model->arch();
  const auto n = static_cast<std::int64_t>(prompt.size());
  if (n == 0) return Status::invalid_argument("the prompt has no tokens");
  for (std::int32_t id : prompt) {
    if (id < 0 || id >= arch.vocab) {
      return Status::invalid_argument("prompt token id " + std::to_string(id) + " is outside the model's vocabulary (" +
                                      std::to_string(arch.vocab) + " ids)");
    }
  }
  if (max_new_tokens == 0 ? n > arch.max_seq_len : n >= arch.max_seq_len) {
    return Status::invalid_argument("the prompt has " + std::to_string(n) + " tokens; the model's context is " +
                                    std::to_string(arch.max_seq_len) +
                                    (max_new_tokens == 0 ? "" : ", which leaves no room to generate"));
  }
  return Status::ok();
}

Prefill Prefill::clone() const {
  Prefill out = *this;
  for (Tensor& k : out.cache.k)
    k = k.clone();
  for (Tensor& v : out.cache.v)
    v = v.clone();
  return out;  // last_logits is read, never written
}

Result<std::vector<Prefill>> prefill(CausalLM& model, const std::vector<std::vector<std::int32_t>>& prompts,
                                     std::int64_t max_new_tokens, const Scoring& scoring) {
  if (prompts.empty()) return std::vector<Prefill>{};
  if (scoring.top < 0) return Status::invalid_argument("the alternatives scored must be 0 or more");
  const dsl::ModelArch& arch = model->arch();
  std::int64_t longest = 0, capacity = 0;
  for (const auto& p : prompts) {
    TAILOR_RETURN_IF_ERROR(check_prompt(model, p, max_new_tokens));
    const auto n = static_cast<std::int64_t>(p.size());
    longest = std::max(longest, n);
    capacity = std::max(capacity, n + std::min(max_new_tokens, arch.max_seq_len - n));
  }
  capacity = std::max(capacity, longest);
  const auto rows = static_cast<std::int64_t>(prompts.size());
  std::vector<Prefill> out(prompts.size());
  try {
    torch::NoGradGuard no_grad;
    const auto device = model->parameters().front().device();
    // Padding with id 0 after each prompt: causal attention keeps it out of
    // every real position's sight.
    Tensor input = torch::zeros({rows, longest}, torch::kInt64);
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto& p = prompts[static_cast<std::size_t>(r)];
      input[r]
          .slice(0, 0, static_cast<std::int64_t>(p.size()))
          .copy_(torch::tensor(std::vector<std::int64_t>(p.begin(), p.end()), torch::kInt64));
    }
    KvCache cache = model->new_kv_cache(rows, capacity);
    auto hidden = model->hidden_states_cached(input.to(device), cache);
    if (!hidden.is_ok()) return hidden.status();
    // The positions the head runs over, as rows of the flattened (B * T, C)
    // hidden states: each prompt's scored ones, then its last.
    struct Row {
      std::size_t prompt;
      std::int64_t target;  // the next prompt token; -1 for the last position
    };
    std::vector<std::int64_t> at;
    std::vector<Row> what;
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto& p = prompts[static_cast<std::size_t>(r)];
      const auto n = static_cast<std::int64_t>(p.size());
      for (std::int64_t t = scoring.prompt ? 0 : n - 1; t < n; ++t) {
        at.push_back(r * longest + t);
        what.push_back({static_cast<std::size_t>(r), t + 1 < n ? p[static_cast<std::size_t>(t + 1)] : -1});
      }
    }
    const Tensor flat = hidden->reshape({rows * longest, hidden->size(2)});
    const Tensor index = torch::tensor(at, torch::kInt64).to(device);
    constexpr std::int64_t kRows = 256;
    for (std::int64_t begin = 0; begin < static_cast<std::int64_t>(at.size()); begin += kRows) {
      const std::int64_t end = std::min<std::int64_t>(static_cast<std::int64_t>(at.size()), begin + kRows);
      const Tensor logits =
          model->logits(flat.index_select(0, index.slice(0, begin, end))).to(torch::kCPU, torch::kFloat32);
      const Tensor logprobs = scoring.prompt ? torch::log_softmax(logits, -1) : Tensor();
      for (std::int64_t i = begin; i < end;) {
        // A run of one prompt's scored rows, then (maybe) its last.
        const std::size_t p = what[static_cast<std::size_t>(i)].prompt;
        std::vector<std::int64_t> targets;
        const std::int64_t first = i;
        while (i < end && what[static_cast<std::size_t>(i)].prompt == p &&
               what[static_cast<std::size_t>(i)].target >= 0) {
          targets.push_back(what[static_cast<std::size_t>(i)].target);
          ++i;
        }
        if (!targets.empty()) {
          score_rows(logprobs.slice(0, first - begin, i - begin), targets, scoring.top, out[p].prompt_scores);
        }
        if (i < end && what[static_cast<std::size_t>(i)].prompt == p) {  // the last position
          out[p].last_logits = logits[i - begin].clone();
          ++i;
        }
      }
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      Prefill& one = out[static_cast<std::size_t>(r)];
      one.cache.length = static_cast<std::int64_t>(prompts[static_cast<std::size_t>(r)].size());
      for (const Tensor& k : cache.k)
        one.cache.k.push_back(k.narrow(0, r, 1));
      for (const Tensor& v : cache.v)
        one.cache.v.push_back(v.narrow(0, r, 1));
      one.scoring = scoring;
    }
  } catch (const c10::OutOfMemoryError&) {
    throw;
  } catch (const c10::Error& e) {
    return Status::internal(std::string("generation: ") + e.what_without_backtrace());
  }
  return out;
}

std::vector<std::vector<std::size_t>> prefill_groups(const std::vector<std::int64_t>& lengths, std::int64_t new_tokens,
                                                     std::int64_t max_positions) {
  std::vector<std::size_t> order(lengths.size());
  for (std::size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return lengths[a] < lengths[b]; });
  std::vector<std::vector<std::size_t>> groups;
  std::int64_t tokens = 0;  // the group's real prompt tokens
  for (std::size_t i : order) {
    // Shortest first, so a group's longest prompt is its last.
    const auto rows = static_cast<std::int64_t>(groups.empty() ? 0 : groups.back().size()) + 1;
    const std::int64_t padding = rows * lengths[i] - (tokens + lengths[i]);
    if (groups.empty() || rows * (lengths[i] + new_tokens) > max_positions ||
        padding > kPrefillPadding + (tokens + lengths[i]) / 4) {
      groups.emplace_back();
      tokens = 0;
    }
    groups.back().push_back(i);
    tokens += lengths[i];
  }
  return groups;
}

Status check_sampling(const SamplingOptions& o, std::int64_t min_new_tokens) {
  if (o.max_new_tokens < min_new_tokens) {
    return Status::invalid_argument("max new tokens must be at least " + std::to_string(min_new_tokens) + ", got " +
                                    std::to_string(o.max_new_tokens));
  }
  if (!std::isfinite(o.temperature) || o.temperature < 0) {
    return Status::invalid_argument("temperature must be 0 (greedy) or positive, got " + std::to_string(o.temperature));
  }
  if (!(o.top_p > 0 && o.top_p <= 1)) {
    return Status::invalid_argument("top-p must be in (0, 1], got " + std::to_string(o.top_p));
  }
  if (o.top_k < 0) return Status::invalid_argument("top-k must be 0 (off) or positive, got " + std::to_string(o.top_k));
  if (!(o.min_p >= 0 && o.min_p <= 1)) {
    return Status::invalid_argument("min-p must be in [0, 1] (0 is off), got " + std::to_string(o.min_p));
  }
  if (!std::isfinite(o.repetition_penalty) || o.repetition_penalty <= 0) {
    return Status::invalid_argument("repetition penalty must be positive (1 is off), got " +
                                    std::to_string(o.repetition_penalty));
  }
  for (const auto& [name, value] :
       {std::pair{"presence", o.presence_penalty}, std::pair{"frequency", o.frequency_penalty}}) {
    if (!(value >= -2.0 && value <= 2.0)) {
      return Status::invalid_argument(std::string(name) + " penalty must be in [-2, 2] (0 is off), got " +
                                      std::to_string(value));
    }
  }
  for (const auto& [id, bias] : o.logit_bias) {
    if (id < 0) return Status::invalid_argument("logit bias: " + std::to_string(id) + " is not a token id");
    if (!(bias >= -100.0 && bias <= 100.0)) {
      return Status::invalid_argument("logit bias of token " + std::to_string(id) + " must be in [-100, 100], got " +
                                      std::to_string(bias));
    }
  }
  return Status::ok();
}

Result<Generated> generate(CausalLM& model, const std::vector<std::int32_t>& prompt, const SamplingOptions& o,
                           const std::function<bool(std::int32_t)>& on_token, const Scoring& scoring,
                           Prefill* prefilled) {
  TAILOR_RETURN_IF_ERROR(check_sampling(o, scoring.prompt ? 0 : 1));
  if (scoring.top < 0) return Status::invalid_argument("the alternatives scored must be 0 or more");
  const dsl::ModelArch& arch = model->arch();
  const auto n = static_cast<std::int64_t>(prompt.size());
  TAILOR_RETURN_IF_ERROR(check_prompt(model, prompt, o.max_new_tokens));
  for (const auto& bias : o.logit_bias) {
    if (bias.first >= arch.vocab) {
      return Status::invalid_argument("logit bias: token id " + std::to_string(bias.first) +
                                      " is outside the model's vocabulary (" + std::to_string(arch.vocab) + " ids)");
    }
  }
  const std::int64_t budget = std::min(o.max_new_tokens, arch.max_seq_len - n);
  Generated out;
  try {
    torch::NoGradGuard no_grad;
    const auto device = model->parameters().front().device();
    at::Generator gen = at::detail::createCPUGenerator(o.seed);
    auto start = std::chrono::steady_clock::now();
    Prefill own;
    if (prefilled) {
      if (prefilled->cache.length != n || prefilled->cache.capacity() < n + budget ||
          prefilled->scoring.prompt != scoring.prompt || prefilled->scoring.top != scoring.top) {
        return Status::internal(
            "generation: the prefilled prompt is not this one, has no room for its tokens or "
            "was scored otherwise");
      }
    } else {
      auto made = prefill(model, {prompt}, o.max_new_tokens, scoring);
      if (!made.is_ok()) return made.status();
      own = std::move(made->front());
      prefilled = &own;
    }
    KvCache cache = std::move(prefilled->cache);
    out.prompt_scores = std::move(prefilled->prompt_scores);
    std::optional<Seen> seen;
    if (o.penalised()) seen.emplace(prompt, arch.vocab);
    // The last position's logits (fp32, on the CPU): the prompt's from its
    // pass, then each new token's.
    Tensor logits = prefilled->last_logits;
    while (static_cast<std::int64_t>(out.ids.size()) < budget) {
      const std::int32_t id = choose(processed(logits, o, seen), o, gen);
      if (seen) seen->add(id);
      if (scoring.generated) score_rows(torch::log_softmax(logits, -1).unsqueeze(0), {id}, scoring.top, out.scores);
      if (out.ids.empty()) {
        out.prompt_seconds = seconds_since(start);
        start = std::chrono::steady_clock::now();
      }
      out.ids.push_back(id);
      out.stopped = std::find(o.stop_ids.begin(), o.stop_ids.end(), id) != o.stop_ids.end();
      if ((on_token && !on_token(id)) || out.stopped) break;
      if (static_cast<std::int64_t>(out.ids.size()) == budget) break;
      auto hidden = model->hidden_states_cached(torch::full({1, 1}, static_cast<std::int64_t>(id),
                                                            torch::TensorOptions().dtype(torch::kInt64).device(device)),
                                                cache);
      if (!hidden.is_ok()) return hidden.status();
      logits = model->logits(hidden->select(1, -1))[0].to(torch::kCPU, torch::kFloat32);
    }
    if (out.ids.empty()) out.prompt_seconds = seconds_since(start);
    out.decode_seconds = out.ids.size() > 1 ? seconds_since(start) : 0;
  } catch (const c10::OutOfMemoryError&) {
    throw;  // the caller's to handle: a training run re-plans
  } catch (const c10::Error& e) {
    return Status::internal(std::string("generation: ") + e.what_without_backtrace());
  }
  return out;
}

}  // namespace tailor::runner
