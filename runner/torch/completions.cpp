#include "runner/torch/completions.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <list>
#include <optional>
#include <random>
#include <variant>

#include <nlohmann/json.hpp>

#include "core/text.h"
#include "runner/data/text_stream.h"
#include "runner/torch/generation.h"
#include "runner/torch/openai_request.h"

namespace tailor::runner {
namespace {

using namespace openai;
using Ids = std::vector<std::int32_t>;

const std::vector<std::string>& known_completion_fields() {
  static const std::vector<std::string> fields = {"model",
                                                  "prompt",
                                                  "max_tokens",
                                                  "temperature",
                                                  "top_p",
                                                  "top_k",
                                                  "seed",
                                                  "stop",
                                                  "echo",
                                                  "logprobs",
                                                  "n",
                                                  "best_of",
                                                  "stream",
                                                  "stream_options",
                                                  "presence_penalty",
                                                  "frequency_penalty",
                                                  "repetition_penalty",
                                                  "min_p",
                                                  "logit_bias",
                                                  "suffix",
                                                  "user"};
  return fields;
}

struct CompletionRequest {
  std::vector<std::variant<std::string, Ids>> prompts;
  std::int64_t max_tokens = 16;
  Sampling sampling;
  bool echo = false;
  std::optional<std::int64_t> logprobs;
  std::int64_t n = 1;        // choices per prompt
  std::int64_t best_of = 1;  // candidates per prompt, the n likeliest returned
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

std::optional<Problem> read_ids(const Json& list, const std::string& where, Ids& ids) {
  if (list.empty()) return Problem{where, where + ": a prompt has at least one token"};
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_number_integer() || list[i].get<std::int64_t>() < 0 || list[i].get<std::int64_t>() > INT32_MAX) {
      return Problem{where, where + "[" + std::to_string(i) + "]: expected a token id (a non-negative integer)"};
    }
    ids.push_back(static_cast<std::int32_t>(list[i].get<std::int64_t>()));
  }
  return std::nullopt;
}

std::optional<Problem> read_prompts(const Json& p, CompletionRequest& r) {
  if (p.is_string()) {
    r.prompts.emplace_back(p.get<std::string>());
    return std::nullopt;
  }
  const char* expected = "prompt: expected a string, a list of strings, a list of token ids or a list of such lists";
  if (!p.is_array() || p.empty()) return Problem{"prompt", expected};
  if (p.front().is_number()) {
    Ids ids;
    if (auto bad = read_ids(p, "prompt", ids)) return bad;
    r.prompts.emplace_back(std::move(ids));
    return std::nullopt;
  }
  for (std::size_t i = 0; i < p.size(); ++i) {
    const std::string where = "prompt[" + std::to_string(i) + "]";
    if (p[i].is_string()) {
      r.prompts.emplace_back(p[i].get<std::string>());
    } else if (p[i].is_array()) {
      Ids ids;
      if (auto bad = read_ids(p[i], where, ids)) return bad;
      r.prompts.emplace_back(std::move(ids));
    } else {
      return Problem{"prompt", expected};
    }
  }
  return std::nullopt;
}

std::variant<CompletionRequest, Problem> parse_completion_request(const Json& j, const CompletionLimits& limits) {
  if (!j.is_object()) return Problem{"", "the request body must be a JSON object"};
  if (auto bad = check_known(j, known_completion_fields())) return *bad;
  CompletionRequest r;
  if (!j.contains("prompt")) return Problem{"prompt", "prompt: required"};
  if (auto bad = read_prompts(j["prompt"], r)) return *bad;
  if (static_cast<std::int64_t>(r.prompts.size()) > limits.max_prompts) {
    return Problem{"prompt", "prompt: " + std::to_string(r.prompts.size()) + " prompts; at most " +
                                 std::to_string(limits.max_prompts) + " in one request"};
  }
  if (auto bad = read_choices(j, limits.max_choices, r.n, r.best_of)) return *bad;
  if (static_cast<std::int64_t>(r.prompts.size()) * r.best_of > limits.max_prompts) {
    const char* field = r.best_of > r.n ? "best_of" : "n";
    return Problem{field, std::string(field) + ": " + std::to_string(r.prompts.size()) + " prompts of " +
                              std::to_string(r.best_of) + " choices each; at most " +
                              std::to_string(limits.max_prompts) + " choices in one request"};
  }
  if (auto bad = refuse_unless(j, "suffix", "", "insertion (a suffix) is not served")) return *bad;
  if (auto bad = read_stream(j, r.stream, r.include_usage)) return *bad;
  for (const char* key : {"model", "user"}) {
    if (auto bad = read_optional_string(j, key)) return *bad;
  }
  if (auto bad = read_integer(j, "max_tokens", 0, limits.max_tokens, r.max_tokens)) return *bad;
  if (auto bad = read_sampling(j, r.sampling)) return *bad;
  if (auto bad = read_bool(j, "echo", r.echo)) return *bad;
  std::int64_t logprobs = -1;
  if (auto bad = read_integer(j, "logprobs", 0, limits.max_logprobs, logprobs)) return *bad;
  if (logprobs >= 0) r.logprobs = logprobs;
  if (r.stream && r.best_of > r.n) {
    return Problem{"best_of", "best_of: the likeliest choices are known only at the end; ask without stream"};
  }
  return r;
}

// A token as it is listed: its text alone (a byte-level token inside a
// character reads as U+FFFD, as Hugging Face's decoders give it).
std::string token_string(const data::Tokenizer& tok, std::int32_t id) { return tok.decode({id}); }

std::size_t code_points(const std::string& s) {
  return static_cast<std::size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

// OpenAI's logprobs object of one choice (tokens, token_logprobs,
// top_logprobs, text_offset), written as its tokens come: take() gives
// those added since the last take(), so that a stream's chunks add up to
// the object the unstreamed reply gives.
class LogprobsWriter {
 public:
  explicit LogprobsWriter(const data::Tokenizer& tok) : tok_(tok), offsets_(tok) {}

  // `s` null: a token not scored (the echoed prompt's first).
  void add(std::int32_t id, const TokenScore* s) {
    tokens_.push_back(token_string(tok_, id));
    // In code points from the start of the choice's text (the echoed prompt's
    // when echoed), as the token's text begins.
    text_offset_.push_back(code_points(offsets_.text()));
    offsets_.push(id);
    token_logprobs_.push_back(s ? Json(s->logprob) : Json());
    if (!s) {
      top_logprobs_.push_back(nullptr);
      return;
    }
    Json top = Json::object();
    for (const auto& [alt, lp] : s->top) {
      const std::string key = token_string(tok_, alt);
      if (!top.contains(key)) top[key] = lp;  // the likelier of two tokens with one text
    }
    top_logprobs_.push_back(std::move(top));
  }

  Json take() {
    Json out = {{"tokens", std::move(tokens_)},
                {"token_logprobs", std::move(token_logprobs_)},
                {"top_logprobs", std::move(top_logprobs_)},
                {"text_offset", std::move(text_offset_)}};
    tokens_ = token_logprobs_ = top_logprobs_ = text_offset_ = Json::array();
    return out;
  }

 private:
  const data::Tokenizer& tok_;
  data::TextStream offsets_;
  Json tokens_ = Json::array(), token_logprobs_ = Json::array(), top_logprobs_ = Json::array(),
       text_offset_ = Json::array();
};

// The echoed prompt's tokens in `w`: the first unscored, each other as
// generation scored it given those before it.
void add_prompt(LogprobsWriter& w, const Ids& prompt, const std::vector<TokenScore>& scores) {
  for (std::size_t i = 0; i < prompt.size(); ++i)
    w.add(prompt[i], i == 0 ? nullptr : &scores[i - 1]);
}

struct Choice {
  Json json;
  std::size_t prompt_tokens = 0, completion_tokens = 0;
  double mean_logprob = 0;  // of its tokens (its stop token where it has none): best_of's ranking
};

// What a request scores. max_tokens 0 scores the prompt (echo shows it, or
// nothing is returned but its length).
Scoring scoring_of(const CompletionRequest& r) {
  Scoring scoring;
  scoring.prompt = (r.echo && r.logprobs) || r.max_tokens == 0;
  scoring.generated = r.logprobs.has_value();
  scoring.top = r.logprobs.value_or(0);
  return scoring;
}

// How errors name prompt `i`: "prompt", or "prompt[i]" of several.
std::string where_of(const CompletionRequest& r, std::size_t i) {
  return "prompt" + (r.prompts.size() > 1 ? "[" + std::to_string(i) + "]" : std::string());
}

// A prompt's ids and the text echo gives it, or the reply with which the
// request fails (400 naming prompt[p]).
struct Prompt {
  Ids ids;
  std::string text;
};
std::variant<Prompt, CompletionReply> read_prompt(InferenceModel& m, const CompletionRequest& r, std::size_t p) {
  const std::string where = where_of(r, p);
  Prompt out;
  if (const auto* text = std::get_if<std::string>(&r.prompts[p])) {
    auto ids = prompt_ids_of_text(m, *text);
    if (!ids.is_ok()) return error_reply(400, "invalid_request_error", where + ": " + ids.status().message(), "prompt");
    out.ids = std::move(*ids);
    out.text = *text;
  } else {
    out.ids = std::get<Ids>(r.prompts[p]);
    if (r.echo) out.text = utf8_lossy(m.tokenizer->decode(out.ids));
  }
  if (Status s = check_prompt(m.model, out.ids, r.max_tokens); !s.is_ok()) {
    return error_reply(400, "invalid_request_error", where + ": " + s.message(), "prompt");
  }
  return out;
}

// What a choice scores: the request's, and its generated tokens where
// best_of ranks candidates by their log-probabilities.
Scoring choice_scoring(const CompletionRequest& r) {
  Scoring scoring = scoring_of(r);
  scoring.generated = scoring.generated || r.best_of > r.n;
  return scoring;
}

// Choice `index` (of every choice in the request): completion `g`, generated
// after `given`.
Choice choice_of(InferenceModel& m, const CompletionRequest& r, const Prompt& given, std::size_t index,
                 const Completion& g) {
  const data::Tokenizer& tok = *m.tokenizer;
  const Ids& prompt = given.ids;
  const std::string& prompt_text = given.text;
  const Scoring scoring = choice_scoring(r);
  const Ids& ids = g.ids;

  Choice c;
  if (scoring.generated) {
    double sum = g.stop_logprob.value_or(0);
    for (const TokenScore& s : g.scores)
      sum += s.logprob;
    const std::size_t count = g.scores.size() + (g.stop_logprob ? 1 : 0);
    c.mean_logprob = count ? sum / static_cast<double>(count) : 0;
  }
  c.prompt_tokens = prompt.size();
  c.completion_tokens = ids.size();
  c.json["index"] = index;
  c.json["text"] = (r.echo ? prompt_text : std::string()) + g.text;
  if (r.logprobs) {
    LogprobsWriter w(tok);
    if (r.echo) add_prompt(w, prompt, g.prompt_scores);
    for (std::size_t i = 0; i < ids.size(); ++i)
      w.add(ids[i], &g.scores[i]);
    c.json["logprobs"] = w.take();
  } else {
    c.json["logprobs"] = nullptr;
  }
  c.json["finish_reason"] = g.stopped ? "stop" : "length";
  return c;
}

}  // namespace

CompletionReply complete(InferenceModel& model, const std::string& model_name, const std::string& body,
                         const CompletionLimits& limits, const ChunkSink& emit, const Listening& listening) {
  auto parsed = read_body(model, body);
  if (auto* failed = std::get_if<CompletionReply>(&parsed)) return std::move(*failed);
  auto request = parse_completion_request(std::get<Json>(parsed), limits);
  if (const auto* bad = std::get_if<Problem>(&request)) return bad_request(*bad);
  const CompletionRequest& r = std::get<CompletionRequest>(request);
  const std::uint64_t seed = r.sampling.seed ? *r.sampling.seed : std::random_device{}();
  if (r.stream && !emit) return bad_request({"stream", "stream: this server does not stream; ask without stream"});
  // Every prompt read and checked before any runs.
  std::vector<Prompt> prompts;
  std::vector<std::int64_t> lengths;
  for (std::size_t i = 0; i < r.prompts.size(); ++i) {
    auto one = read_prompt(model, r, i);
    if (auto* failed = std::get_if<CompletionReply>(&one)) return std::move(*failed);
    prompts.push_back(std::move(std::get<Prompt>(one)));
    lengths.push_back(static_cast<std::int64_t>(prompts.back().ids.size()));
  }
  // The prompts' forward passes several at a time (what lm-eval's batches
  // of log-likelihood requests are mostly made of), then each choice; the
  // choices in OpenAI's order, a prompt's n together, its tokens counted once.
  std::vector<Json> slots(r.prompts.size() * static_cast<std::size_t>(r.n));
  std::size_t prompt_tokens = 0, completion_tokens = 0;
  ChunkStream stream("cmpl", "text_completion", model_name, emit);
  // Each prompt's best_of candidates (n unless asked), the n likeliest kept.
  std::vector<std::vector<Choice>> candidates(r.prompts.size());
  // Unstreamed, the candidates of several passes generate together, as
  // many as keep their rows times the longest prompt and its new tokens
  // within limits.batch_positions; their passes are held until then.
  std::list<std::vector<Prefill>> held;
  std::vector<CompletionJob> jobs;
  std::vector<std::pair<std::size_t, std::size_t>> job_of;  // (prompt, candidate)
  std::int64_t longest = 0;                                 // of the jobs' prompts and new tokens
  const std::int64_t context = model.model->arch().max_seq_len;
  auto generate_held = [&]() -> std::optional<CompletionReply> {
    if (jobs.empty()) return std::nullopt;
    auto run =
        run_completions(model, jobs, r.max_tokens, r.sampling, choice_scoring(r), limits.batch_positions, listening);
    if (auto* failed = std::get_if<CompletionReply>(&run)) return std::move(*failed);
    const auto& completions = std::get<std::vector<Completion>>(run);
    for (std::size_t j = 0; j < completions.size(); ++j) {
      const auto [i, k] = job_of[j];
      candidates[i].push_back(choice_of(model, r, prompts[i], i * static_cast<std::size_t>(r.n) + k, completions[j]));
    }
    jobs.clear();
    job_of.clear();
    held.clear();
    longest = 0;
    return std::nullopt;
  };
  for (const auto& group : prefill_groups(lengths, r.max_tokens, limits.batch_positions)) {
    if (!r.stream && listening && !listening()) return {200, "null"};  // the client has gone
    std::vector<Ids> ids;
    std::int64_t group_longest = 0;
    for (std::size_t i : group) {
      ids.push_back(prompts[i].ids);
      group_longest = std::max(group_longest, std::min(lengths[i] + r.max_tokens, context));
    }
    const auto rows = static_cast<std::int64_t>(group.size()) * r.best_of;
    if (!r.stream &&
        (static_cast<std::int64_t>(jobs.size()) + rows) * std::max(longest, group_longest) > limits.batch_positions) {
      if (auto failed = generate_held()) return std::move(*failed);
    }
    auto passes = prefill_prompts(model, ids, r.max_tokens, scoring_of(r));
    if (auto* failed = std::get_if<CompletionReply>(&passes)) return std::move(*failed);
    auto& pass = held.emplace_back(std::move(std::get<std::vector<Prefill>>(passes)));
    for (std::size_t g = 0; g < group.size(); ++g) {
      const std::size_t i = group[g];
      for (std::int64_t k = 0; k < r.best_of; ++k) {
        const std::size_t index = i * static_cast<std::size_t>(r.n) + static_cast<std::size_t>(k);
        if (!r.stream) {
          jobs.push_back({&prompts[i].ids, &pass[g], choice_seed(seed, k), where_of(r, i), "prompt"});
          job_of.emplace_back(i, static_cast<std::size_t>(k));
          continue;
        }
        // Streamed (best_of is n): a prompt's choices one after another,
        // each chunk with the log-probabilities of the tokens chosen since
        // the chunk before (a token whose text is still held back comes
        // with the text after it).
        LogprobsWriter w(*model.tokenizer);
        auto fields = [&](std::string text) {
          Json f = {{"text", std::move(text)}};
          if (r.logprobs) f["logprobs"] = w.take();
          return f;
        };
        auto on_text = [&, i, g, index, begun = false](std::string_view piece,
                                                       const std::vector<ChosenToken>& tokens) mutable {
          if (r.logprobs) {
            if (!begun && r.echo) add_prompt(w, prompts[i].ids, pass[g].prompt_scores);
            for (const ChosenToken& t : tokens)
              w.add(t.id, &t.score);
          }
          // The echoed prompt with the first token (the prompt was taken).
          std::string text = (!begun && r.echo ? prompts[i].text : std::string()) + std::string(piece);
          begun = true;
          return text.empty() ? stream.listening()
                              : stream.choice(static_cast<std::int64_t>(index), fields(std::move(text)));
        };
        auto run = run_completion(model, prompts[i].ids, r.max_tokens, r.sampling, choice_seed(seed, k),
                                  choice_scoring(r), where_of(r, i), "prompt", on_text, &pass[g]);
        if (auto* failed = std::get_if<CompletionReply>(&run)) return std::move(*failed);
        Choice c = choice_of(model, r, prompts[i], index, std::get<Completion>(run));
        // A client that left is answered no further: the model is free again.
        if (!stream.choice(static_cast<std::int64_t>(index), fields(""),
                           c.json["finish_reason"].get<std::string>().c_str())) {
          return {200, "null"};
        }
        candidates[i].push_back(std::move(c));
      }
    }
    if (r.stream) held.clear();
    longest = std::max(longest, group_longest);
  }
  if (auto failed = generate_held()) return std::move(*failed);
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    prompt_tokens += candidates[i].front().prompt_tokens;
    for (const Choice& c : candidates[i])
      completion_tokens += c.completion_tokens;  // every candidate's: all were computed
    if (r.best_of > r.n) {
      // OpenAI's "best": the highest log-probability per token.
      std::stable_sort(candidates[i].begin(), candidates[i].end(),
                       [](const Choice& a, const Choice& b) { return a.mean_logprob > b.mean_logprob; });
    }
    for (std::int64_t k = 0; k < r.n; ++k) {
      const std::size_t index = i * static_cast<std::size_t>(r.n) + static_cast<std::size_t>(k);
      Json& json = candidates[i][static_cast<std::size_t>(k)].json;
      json["index"] = index;
      slots[index] = std::move(json);
    }
  }
  if (r.stream) {
    if (r.include_usage) stream.usage_of(prompt_tokens, completion_tokens);
    return {200, "null"};
  }
  Json choices = Json::array();
  for (Json& c : slots)
    choices.push_back(std::move(c));
  return response("cmpl", "text_completion", model_name, std::move(choices), prompt_tokens, completion_tokens);
}

}  // namespace tailor::runner
