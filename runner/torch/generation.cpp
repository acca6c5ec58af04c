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

namespace {

// Where generate_batch() checks a sequence: check_sampling's and
// check_prompt's errors, a logit bias outside the vocabulary, a prefill
// that is not this prompt's.
Status check_sequence(CausalLM& model, const Sequence& s, const Scoring& scoring) {
  TAILOR_RETURN_IF_ERROR(check_sampling(s.options, scoring.prompt ? 0 : 1));
  const dsl::ModelArch& arch = model->arch();
  const std::vector<std::int32_t>& prompt = *s.prompt;
  const auto n = static_cast<std::int64_t>(prompt.size());
  TAILOR_RETURN_IF_ERROR(check_prompt(model, prompt, s.options.max_new_tokens));
  for (const auto& bias : s.options.logit_bias) {
    if (bias.first >= arch.vocab) {
      return Status::invalid_argument("logit bias: token id " + std::to_string(bias.first) +
                                      " is outside the model's vocabulary (" + std::to_string(arch.vocab) + " ids)");
    }
  }
  const Prefill* p = s.prefilled;
  const std::int64_t budget = std::min(s.options.max_new_tokens, arch.max_seq_len - n);
  if (p == nullptr || p->cache.length != n || p->cache.capacity() < n + budget || p->scoring.prompt != scoring.prompt ||
      p->scoring.top != scoring.top) {
    return Status::internal(
        "generation: the prefilled prompt is not this one, has no room for its tokens or was scored otherwise");
  }
  return Status::ok();
}

// A row of generate_batch()'s batch: what chooses its tokens.
struct Row {
  std::int64_t length = 0;  // its cached positions
  std::int64_t budget = 0;  // new tokens at most
  at::Generator gen;
  std::optional<Seen> seen;
  Tensor logits;  // of its last position (V), fp32 on the CPU
  std::chrono::steady_clock::time_point first_at;
  bool done = false;
};

}  // namespace

Result<std::vector<Generated>> generate_batch(CausalLM& model, const std::vector<Sequence>& sequences,
                                              const Scoring& scoring) {
  if (scoring.top < 0) return Status::invalid_argument("the alternatives scored must be 0 or more");
  for (const Sequence& s : sequences)
    TAILOR_RETURN_IF_ERROR(check_sequence(model, s, scoring));
  const dsl::ModelArch& arch = model->arch();
  std::vector<Generated> out(sequences.size());
  if (sequences.empty()) return out;
  try {
    torch::NoGradGuard no_grad;
    const auto device = model->parameters().front().device();
    const auto start = std::chrono::steady_clock::now();
    std::vector<Row> rows(sequences.size());
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const Sequence& s = sequences[r];
      Row& row = rows[r];
      row.length = static_cast<std::int64_t>(s.prompt->size());
      row.budget = std::min(s.options.max_new_tokens, arch.max_seq_len - row.length);
      row.gen = at::detail::createCPUGenerator(s.options.seed);
      if (s.options.penalised()) row.seen.emplace(*s.prompt, arch.vocab);
      row.logits = s.prefilled->last_logits;
      out[r].prompt_scores = s.prefilled->prompt_scores;
      // Scoring alone (no new token): ended before it began.
      if (row.budget == 0) {
        row.done = true;
        out[r].prompt_seconds = seconds_since(start);
      }
    }
    std::vector<std::size_t> live;  // the rows still generating
    for (std::size_t r = 0; r < rows.size(); ++r) {
      if (!rows[r].done) live.push_back(r);
    }
    KvCache cache;
    std::vector<std::size_t> batch;  // the rows in the cache, in its order (none before the first forward)
    std::vector<std::int32_t> last(rows.size(), 0);
    while (!live.empty()) {
      for (std::size_t r : live) {
        Row& row = rows[r];
        const Sequence& s = sequences[r];
        Generated& g = out[r];
        const std::int32_t id = choose(processed(row.logits, s.options, row.seen), s.options, row.gen);
        if (row.seen) row.seen->add(id);
        if (scoring.generated) score_rows(torch::log_softmax(row.logits, -1).unsqueeze(0), {id}, scoring.top, g.scores);
        if (g.ids.empty()) {
          g.prompt_seconds = seconds_since(start);
          row.first_at = std::chrono::steady_clock::now();
        }
        g.ids.push_back(id);
        last[r] = id;
        g.stopped = std::find(s.options.stop_ids.begin(), s.options.stop_ids.end(), id) != s.options.stop_ids.end();
        if ((s.on_token && !s.on_token(id, scoring.generated ? &g.scores.back() : nullptr)) || g.stopped ||
            static_cast<std::int64_t>(g.ids.size()) == row.budget) {
          row.done = true;
          g.decode_seconds = g.ids.size() > 1 ? seconds_since(row.first_at) : 0;
        }
      }
      std::erase_if(live, [&](std::size_t r) { return rows[r].done; });
      if (live.empty()) break;
      if (batch.empty()) {
        // The first forward: a cache for the rows still generating (none is
        // made when every row ends at its first token, as scoring's do).
        // One sequence generates in its prefill's own cache, beyond its
        // length; several in a cache of their own, each row's prompt copied
        // in. Zeroed: a shorter row's unused positions are weighed by zero,
        // and 0 * NaN would not be zero. A row that ends later rides along,
        // writing at its length (below its prompt and budget), until dropped.
        batch = live;
        if (batch.size() == 1) {
          cache = sequences[batch.front()].prefilled->cache;
        } else {
          std::int64_t capacity = 0;
          for (std::size_t r : batch)
            capacity = std::max(capacity, static_cast<std::int64_t>(sequences[r].prompt->size()) + rows[r].budget);
          cache = model->new_kv_cache(static_cast<std::int64_t>(batch.size()), capacity);
          for (std::size_t l = 0; l < cache.k.size(); ++l) {
            cache.k[l].zero_();
            cache.v[l].zero_();
            for (std::size_t j = 0; j < batch.size(); ++j) {
              const KvCache& from = sequences[batch[j]].prefilled->cache;
              const std::int64_t n = rows[batch[j]].length;
              const auto at = static_cast<std::int64_t>(j);
              cache.k[l][at].narrow(1, 0, n).copy_(from.k[l][0].narrow(1, 0, n));
              cache.v[l][at].narrow(1, 0, n).copy_(from.v[l][0].narrow(1, 0, n));
            }
          }
        }
      } else if ((batch.size() - live.size()) * 4 >= batch.size()) {
        // A quarter of the rows ended: the cache keeps the others alone.
        std::vector<std::int64_t> keep;
        for (std::size_t j = 0; j < batch.size(); ++j) {
          if (!rows[batch[j]].done) keep.push_back(static_cast<std::int64_t>(j));
        }
        const Tensor index = torch::tensor(keep, torch::kInt64).to(device);
        for (std::size_t l = 0; l < cache.k.size(); ++l) {
          cache.k[l] = cache.k[l].index_select(0, index);
          cache.v[l] = cache.v[l].index_select(0, index);
        }
        batch = live;
      }
      // Each row's last token at its length; a row that ended but is still
      // in the cache writes its own again where nothing reads it.
      std::vector<std::int64_t> ids, lengths;
      for (std::size_t r : batch) {
        ids.push_back(last[r]);
        lengths.push_back(rows[r].length);
      }
      const auto b = static_cast<std::int64_t>(batch.size());
      auto hidden = model->decode_step(torch::tensor(ids, torch::kInt64).view({b, 1}).to(device), cache, lengths);
      if (!hidden.is_ok()) return hidden.status();
      const Tensor logits = model->logits(hidden->select(1, -1)).to(torch::kCPU, torch::kFloat32);
      for (std::size_t j = 0; j < batch.size(); ++j) {
        Row& row = rows[batch[j]];
        if (row.done) continue;
        row.logits = logits[static_cast<std::int64_t>(j)];
        row.length += 1;
      }
    }
  } catch (const c10::OutOfMemoryError&) {
    throw;  // the caller's to handle: a training run re-plans
  } catch (const c10::Error& e) {
    return Status::internal(std::string("generation: ") + e.what_without_backtrace());
  }
  return out;
}

Result<Generated> generate(CausalLM& model, const std::vector<std::int32_t>& prompt, const SamplingOptions& o,
                           const TokenSink& on_token, const Scoring& scoring, Prefill* prefilled) {
  TAILOR_RETURN_IF_ERROR(check_sampling(o, scoring.prompt ? 0 : 1));
  if (scoring.top < 0) return Status::invalid_argument("the alternatives scored must be 0 or more");
  TAILOR_RETURN_IF_ERROR(check_prompt(model, prompt, o.max_new_tokens));
  const auto start = std::chrono::steady_clock::now();
  Prefill own;
  if (prefilled == nullptr) {
    auto made = prefill(model, {prompt}, o.max_new_tokens, scoring);
    if (!made.is_ok()) return made.status();
    own = std::move(made->front());
    prefilled = &own;
  }
  const double prefill_seconds = seconds_since(start);
  auto done = generate_batch(model, {Sequence{&prompt, o, prefilled, on_token}}, scoring);
  if (!done.is_ok()) return done.status();
  Generated out = std::move(done->front());
  out.prompt_seconds += prefill_seconds;
  return out;
}

}  // namespace tailor::runner
