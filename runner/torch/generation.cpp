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

// The next token from one row of logits (V), fp32 on the CPU. Sampling
// follows transformers' warpers in their order: divide by the temperature,
// keep the top k, keep the smallest prefix of the sorted probabilities whose
// sum reaches top_p (the most likely token always kept), renormalise, draw.
std::int32_t choose(const Tensor& logits, const SamplingOptions& o, at::Generator& gen) {
  if (o.temperature == 0) return static_cast<std::int32_t>(logits.argmax().item<std::int64_t>());
  Tensor z = logits / o.temperature;
  auto [sorted, order] = z.sort(/*dim=*/-1, /*descending=*/true);
  std::int64_t keep = sorted.size(0);
  if (o.top_k > 0) keep = std::min(keep, o.top_k);
  Tensor probs = torch::softmax(sorted.slice(0, 0, keep), -1);
  if (o.top_p < 1.0) {
    // Tokens whose preceding mass already reaches top_p are dropped.
    const Tensor before = probs.cumsum(0) - probs;
    const std::int64_t n = std::max<std::int64_t>(1, (before < o.top_p).sum().item<std::int64_t>());
    probs = probs.slice(0, 0, n);
  }
  const std::int64_t pick = torch::multinomial(probs / probs.sum(), 1, /*replacement=*/false, gen).item<std::int64_t>();
  return static_cast<std::int32_t>(order[pick].item<std::int64_t>());
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

// `logits` with the options' penalties (a copy; the model's logits stay
// for scoring).
Tensor penalised(const Tensor& logits, const SamplingOptions& o, const Seen& seen) {
  Tensor z = logits;
  if (o.repetition_penalty != 1.0) {
    const Tensor repeated = seen.any.gt(0);
    z = torch::where(repeated, torch::where(z < 0, z * o.repetition_penalty, z / o.repetition_penalty), z);
  }
  if (o.frequency_penalty != 0 || o.presence_penalty != 0) {
    z = z - seen.generated * o.frequency_penalty - seen.generated.gt(0).to(torch::kFloat32) * o.presence_penalty;
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

// Each prompt token after the first, from the prompt's hidden states
// (1, n, C): the logits a slice of positions at a time, so that no (n, V)
// tensor of the whole prompt exists at once.
void score_prompt(CausalLM& model, const Tensor& hidden, const std::vector<std::int32_t>& prompt, std::int64_t top,
                  std::vector<TokenScore>& out) {
  constexpr std::int64_t kRows = 256;
  const auto n = static_cast<std::int64_t>(prompt.size());
  for (std::int64_t begin = 0; begin + 1 < n; begin += kRows) {
    const std::int64_t end = std::min(n - 1, begin + kRows);
    const Tensor logprobs =
        torch::log_softmax(model->logits(hidden[0].slice(0, begin, end)).to(torch::kCPU, torch::kFloat32), -1);
    score_rows(logprobs, std::vector<std::int64_t>(prompt.begin() + begin + 1, prompt.begin() + end + 1), top, out);
  }
}

}  // namespace

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
  return Status::ok();
}

Result<Generated> generate(CausalLM& model, const std::vector<std::int32_t>& prompt, const SamplingOptions& o,
                           const std::function<bool(std::int32_t)>& on_token, const Scoring& scoring) {
  TAILOR_RETURN_IF_ERROR(check_sampling(o, scoring.prompt ? 0 : 1));
  if (scoring.top < 0) return Status::invalid_argument("the alternatives scored must be 0 or more");
  const dsl::ModelArch& arch = model->arch();
  const auto n = static_cast<std::int64_t>(prompt.size());
  if (n == 0) return Status::invalid_argument("the prompt has no tokens");
  for (std::int32_t id : prompt) {
    if (id < 0 || id >= arch.vocab) {
      return Status::invalid_argument("prompt token id " + std::to_string(id) + " is outside the model's vocabulary (" +
                                      std::to_string(arch.vocab) + " ids)");
    }
  }
  if (o.max_new_tokens == 0 ? n > arch.max_seq_len : n >= arch.max_seq_len) {
    return Status::invalid_argument("the prompt has " + std::to_string(n) + " tokens; the model's context is " +
                                    std::to_string(arch.max_seq_len) +
                                    (o.max_new_tokens == 0 ? "" : ", which leaves no room to generate"));
  }
  const std::int64_t budget = std::min(o.max_new_tokens, arch.max_seq_len - n);
  Generated out;
  try {
    torch::NoGradGuard no_grad;
    const auto device = model->parameters().front().device();
    at::Generator gen = at::detail::createCPUGenerator(o.seed);
    KvCache cache = model->new_kv_cache(1, n + budget);
    auto start = std::chrono::steady_clock::now();
    const Tensor input = torch::tensor(std::vector<std::int64_t>(prompt.begin(), prompt.end()), torch::kInt64)
                             .to(device)
                             .unsqueeze(0);
    auto hidden = model->hidden_states_cached(input, cache);
    if (!hidden.is_ok()) return hidden.status();
    if (scoring.prompt) score_prompt(model, *hidden, prompt, scoring.top, out.prompt_scores);
    std::optional<Seen> seen;
    if (o.penalised()) seen.emplace(prompt, arch.vocab);
    while (static_cast<std::int64_t>(out.ids.size()) < budget) {
      // Only the last position's logits: the prompt's others are never read.
      const Tensor logits = model->logits(hidden->select(1, -1))[0].to(torch::kCPU, torch::kFloat32);
      const std::int32_t id = choose(seen ? penalised(logits, o, *seen) : logits, o, gen);
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
      hidden = model->hidden_states_cached(
          torch::full({1, 1}, static_cast<std::int64_t>(id), torch::TensorOptions().dtype(torch::kInt64).device(device)),
          cache);
      if (!hidden.is_ok()) return hidden.status();
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
