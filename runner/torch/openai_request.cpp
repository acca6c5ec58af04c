#include "runner/torch/openai_request.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <utility>

#include "core/text.h"
#include "runner/data/text_stream.h"

namespace tailor::runner::openai {

CompletionReply error_reply(int status, const std::string& type, const std::string& message, const std::string& param) {
  Json body;
  body["error"] = {
      {"message", message}, {"type", type}, {"param", param.empty() ? Json() : Json(param)}, {"code", nullptr}};
  return {status, body.dump()};
}

CompletionReply bad_request(const Problem& p) { return error_reply(400, "invalid_request_error", p.message, p.param); }

std::optional<Problem> check_known(const Json& j, const std::vector<std::string>& known) {
  for (const auto& [key, value] : j.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      return Problem{key, "unknown field \"" + key + "\" (read: " + join(known, ", ") + ")"};
    }
  }
  return std::nullopt;
}

std::optional<Problem> read_integer(const Json& j, const char* key, std::int64_t lo, std::int64_t hi,
                                    std::int64_t& out) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  const Json& v = j[key];
  if (!v.is_number_integer() || v.get<std::int64_t>() < lo || v.get<std::int64_t>() > hi) {
    return Problem{key, std::string(key) + ": expected an integer from " + std::to_string(lo) + " to " +
                            std::to_string(hi) + ", got " + v.dump()};
  }
  out = v.get<std::int64_t>();
  return std::nullopt;
}

std::optional<Problem> read_number(const Json& j, const char* key, double& out) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  if (!j[key].is_number() || !std::isfinite(j[key].get<double>())) {
    return Problem{key, std::string(key) + ": expected a number, got " + j[key].dump()};
  }
  out = j[key].get<double>();
  return std::nullopt;
}

std::optional<Problem> read_bool(const Json& j, const char* key, bool& out) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  if (!j[key].is_boolean()) return Problem{key, std::string(key) + ": expected true or false"};
  out = j[key].get<bool>();
  return std::nullopt;
}

std::optional<Problem> read_optional_string(const Json& j, const char* key) {
  if (j.contains(key) && !j[key].is_null() && !j[key].is_string()) {
    return Problem{key, std::string(key) + ": expected a string"};
  }
  return std::nullopt;
}

std::optional<Problem> refuse_unless(const Json& j, const char* key, const Json& off, const std::string& why) {
  if (!j.contains(key) || j[key].is_null() || j[key] == off) return std::nullopt;
  return Problem{key, std::string(key) + ": " + why};
}

std::optional<Problem> read_sampling(const Json& j, Sampling& s) {
  if (auto bad = read_number(j, "temperature", s.temperature)) return bad;
  if (s.temperature < 0) return Problem{"temperature", "temperature: expected 0 (greedy) or more"};
  if (auto bad = read_number(j, "top_p", s.top_p)) return bad;
  if (!(s.top_p > 0 && s.top_p <= 1)) return Problem{"top_p", "top_p: expected a number in (0, 1]"};
  if (auto bad = read_integer(j, "top_k", -1, INT32_MAX, s.top_k)) return bad;
  s.top_k = std::max<std::int64_t>(s.top_k, 0);  // vLLM's -1 and 0 both mean every token
  if (auto bad = read_number(j, "min_p", s.min_p)) return bad;
  if (!(s.min_p >= 0 && s.min_p <= 1)) return Problem{"min_p", "min_p: expected a number in [0, 1]"};
  if (j.contains("logit_bias") && !j["logit_bias"].is_null()) {
    const Json& bias = j["logit_bias"];
    if (!bias.is_object()) return Problem{"logit_bias", "logit_bias: expected an object of token ids to biases"};
    for (const auto& [key, value] : bias.items()) {
      const std::string at = "logit_bias[\"" + key + "\"]";
      char* end = nullptr;
      errno = 0;
      const long long id = std::strtoll(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || errno == ERANGE || id < 0 || id > INT32_MAX ||
          key.find_first_not_of("0123456789") != std::string::npos) {
        return Problem{"logit_bias", at + ": a key is a token id (a non-negative integer as a string)"};
      }
      if (!value.is_number() || !(value.get<double>() >= -100.0 && value.get<double>() <= 100.0)) {
        return Problem{"logit_bias", at + ": expected a number in [-100, 100]"};
      }
      s.logit_bias.emplace_back(static_cast<std::int32_t>(id), value.get<double>());
    }
  }
  for (const auto& [key, value] :
       {std::pair{"presence_penalty", &s.presence_penalty}, std::pair{"frequency_penalty", &s.frequency_penalty}}) {
    if (auto bad = read_number(j, key, *value)) return bad;
    if (!(*value >= -2.0 && *value <= 2.0)) return Problem{key, std::string(key) + ": expected a number in [-2, 2]"};
  }
  if (auto bad = read_number(j, "repetition_penalty", s.repetition_penalty)) return bad;
  if (!(s.repetition_penalty > 0) || !std::isfinite(s.repetition_penalty)) {
    return Problem{"repetition_penalty", "repetition_penalty: expected a positive number (1 is off)"};
  }
  std::int64_t seed = 0;
  if (auto bad = read_integer(j, "seed", 0, INT64_MAX, seed)) return bad;
  if (j.contains("seed") && !j["seed"].is_null()) s.seed = static_cast<std::uint64_t>(seed);
  if (j.contains("stop") && !j["stop"].is_null()) {
    const Json& stop = j["stop"];
    const Json list = stop.is_string() ? Json::array({stop}) : stop;
    if (!list.is_array() || list.size() > 16) return Problem{"stop", "stop: expected a string or a list of up to 16"};
    for (const Json& one : list) {
      if (!one.is_string() || one.get<std::string>().empty()) {
        return Problem{"stop", "stop: each stop sequence is a non-empty string"};
      }
      s.stop.push_back(one.get<std::string>());
    }
  }
  return std::nullopt;
}

std::optional<Problem> read_stream(const Json& j, bool& stream, bool& include_usage) {
  if (auto bad = read_bool(j, "stream", stream)) return bad;
  if (!j.contains("stream_options") || j["stream_options"].is_null()) return std::nullopt;
  const Json& o = j["stream_options"];
  if (!stream) return Problem{"stream_options", "stream_options: only with stream: true"};
  if (!o.is_object()) return Problem{"stream_options", "stream_options: expected an object"};
  if (auto bad = check_known(o, {"include_usage"})) return Problem{"stream_options", "stream_options: " + bad->message};
  if (auto bad = read_bool(o, "include_usage", include_usage)) {
    return Problem{"stream_options", "stream_options." + bad->message};
  }
  return std::nullopt;
}

std::optional<Problem> read_choices(const Json& j, std::int64_t max, std::int64_t& n, std::int64_t& best_of) {
  n = 1;
  if (auto bad = read_integer(j, "n", 1, max, n)) return bad;
  best_of = n;
  if (auto bad = read_integer(j, "best_of", 1, max, best_of)) return bad;
  if (best_of < n) return Problem{"best_of", "best_of: must be at least n"};
  return std::nullopt;
}

std::size_t first_stop(const std::string& text, const std::vector<std::string>& stops) {
  std::size_t at = std::string::npos;
  for (const std::string& s : stops)
    at = std::min(at, text.find(s));
  return at;
}

namespace {

// The sampling options of a request's sequence, or the reply with which the
// request fails (a logit bias outside the vocabulary).
std::variant<SamplingOptions, CompletionReply> options_of(InferenceModel& m, std::int64_t max_tokens, const Sampling& s,
                                                          std::uint64_t seed) {
  SamplingOptions so;
  so.max_new_tokens = max_tokens;
  so.temperature = s.temperature;
  so.top_p = s.top_p;
  so.top_k = s.top_k;
  so.presence_penalty = s.presence_penalty;
  so.frequency_penalty = s.frequency_penalty;
  so.repetition_penalty = s.repetition_penalty;
  so.min_p = s.min_p;
  so.logit_bias = s.logit_bias;
  for (const auto& [id, bias] : s.logit_bias) {
    if (id >= m.model->arch().vocab) {
      return error_reply(400, "invalid_request_error",
                         "logit_bias: token id " + std::to_string(id) + " is outside the model's vocabulary (" +
                             std::to_string(m.model->arch().vocab) + " ids)",
                         "logit_bias");
    }
  }
  so.seed = seed;
  so.stop_ids = m.stop_ids;
  return so;
}

// One sequence's text as its tokens come: decoded, cut at the first stop
// sequence, given to its sink as it becomes final.
class CompletionText {
 public:
  // `stop_ids`: the ids that end generation, which the text sink is not
  // given (the completion drops a final one).
  CompletionText(const data::Tokenizer& tok, const std::vector<std::string>& stops,
                 const std::vector<std::int32_t>& stop_ids, TextSink on_text)
      : stream_(tok), stops_(stops), stop_ids_(stop_ids), on_text_(std::move(on_text)) {}

  // generation.h's on_token: false once a stop sequence is found or the
  // sink says stop.
  bool on_token(std::int32_t id, const TokenScore* score) {
    stream_.push(id);
    if (!stops_.empty()) stop_at_ = first_stop(stream_.text(), stops_);
    if (on_text_) {
      if (std::find(stop_ids_.begin(), stop_ids_.end(), id) == stop_ids_.end()) {
        pending_.push_back({id, score ? *score : TokenScore{}});
      }
      const std::string& text = stream_.text();
      // Up to a stop sequence found, else short of what may begin one.
      const std::size_t safe =
          stop_at_ != std::string::npos ? stop_at_ : text.size() - stop_prefix_at_end(text, stops_);
      if (safe > sent_ || !begun_) {
        left_ = !on_text_(std::string_view(text).substr(sent_, safe > sent_ ? safe - sent_ : 0), pending_);
        pending_.clear();
        sent_ = std::max(sent_, safe);
        begun_ = true;
      }
    }
    return stop_at_ == std::string::npos && !left_;
  }

  // The completion of what was generated; the sink's last piece.
  Completion finish(Generated&& g) {
    Completion c;
    c.text = stream_.text();
    if (stop_at_ == std::string::npos) {
      c.text += stream_.finish();
      // A stop sequence may end in the last, held-back character.
      if (!stops_.empty()) stop_at_ = first_stop(c.text, stops_);
    }
    if (stop_at_ != std::string::npos) c.text.resize(stop_at_);
    c.ids = std::move(g.ids);
    c.scores = std::move(g.scores);
    c.prompt_scores = std::move(g.prompt_scores);
    if (g.stopped) {  // the end-of-sequence token is not part of the text
      c.ids.pop_back();
      if (!c.scores.empty()) {
        c.stop_logprob = c.scores.back().logprob;
        c.scores.pop_back();
      }
    }
    c.stopped = g.stopped || stop_at_ != std::string::npos;
    if (on_text_ && !left_ && (c.text.size() > sent_ || !begun_ || !pending_.empty()))
      on_text_(std::string_view(c.text).substr(std::min(sent_, c.text.size())), pending_);
    return c;
  }

 private:
  data::TextStream stream_;
  const std::vector<std::string>& stops_;
  const std::vector<std::int32_t>& stop_ids_;
  TextSink on_text_;
  std::vector<ChosenToken> pending_;  // chosen since the sink's last piece
  std::size_t stop_at_ = std::string::npos;
  std::size_t sent_ = 0;  // bytes of text given to on_text
  bool begun_ = false;
  bool left_ = false;  // on_text said to stop: the client is gone
};

CompletionReply failure_of(const Status& s, const std::string& where, const std::string& param) {
  if (s.code() == StatusCode::kInvalidArgument) {
    return error_reply(400, "invalid_request_error", where + ": " + s.message(), param);
  }
  return error_reply(500, "server_error", s.message());
}

}  // namespace

std::variant<Completion, CompletionReply> run_completion(InferenceModel& m, const std::vector<std::int32_t>& prompt,
                                                         std::int64_t max_tokens, const Sampling& s, std::uint64_t seed,
                                                         const Scoring& scoring, const std::string& where,
                                                         const std::string& param, const TextSink& on_text,
                                                         Prefill* prefilled) {
  auto so = options_of(m, max_tokens, s, seed);
  if (auto* failed = std::get_if<CompletionReply>(&so)) return std::move(*failed);
  CompletionText text(*m.tokenizer, s.stop, m.stop_ids, on_text);
  Result<Generated> g = Status::internal("not run");
  try {
    g = generate(
        m.model, prompt, std::get<SamplingOptions>(so),
        [&](std::int32_t id, const TokenScore* score) { return text.on_token(id, score); }, scoring, prefilled);
  } catch (const c10::OutOfMemoryError& e) {
    return error_reply(503, "server_error", std::string("out of memory: ") + e.what_without_backtrace());
  }
  if (!g.is_ok()) return failure_of(g.status(), where, param);
  return text.finish(std::move(*g));
}

namespace {

// One run of run_completions(): jobs generated together.
std::variant<std::vector<Completion>, CompletionReply> run_together(InferenceModel& m,
                                                                    const std::vector<CompletionJob>& jobs,
                                                                    std::int64_t max_tokens, const Sampling& s,
                                                                    const Scoring& scoring,
                                                                    const Listening& listening) {
  std::vector<Sequence> sequences;
  std::vector<CompletionText> texts;
  texts.reserve(jobs.size());  // the sequences' callbacks hold their addresses
  for (const CompletionJob& job : jobs) {
    auto so = options_of(m, max_tokens, s, job.seed);
    if (auto* failed = std::get_if<CompletionReply>(&so)) return std::move(*failed);
    CompletionText& text = texts.emplace_back(*m.tokenizer, s.stop, m.stop_ids, TextSink());
    sequences.push_back({job.prompt, std::get<SamplingOptions>(so), job.prefilled,
                         [&text, &listening](std::int32_t id, const TokenScore* score) {
                           return text.on_token(id, score) && (!listening || listening());
                         }});
  }
  Result<std::vector<Generated>> g = Status::internal("not run");
  try {
    g = generate_batch(m.model, sequences, scoring);
  } catch (const c10::OutOfMemoryError& e) {
    return error_reply(503, "server_error", std::string("out of memory: ") + e.what_without_backtrace());
  }
  if (!g.is_ok()) {
    // Named by the first prompt the model cannot take, if one is at fault.
    std::size_t at = 0;
    while (at + 1 < jobs.size() && check_prompt(m.model, *jobs[at].prompt, max_tokens).is_ok())
      ++at;
    return failure_of(g.status(), jobs[at].where, jobs[at].param);
  }
  if (listening && !listening()) return CompletionReply{200, "null"};  // the client has gone
  std::vector<Completion> out;
  for (std::size_t i = 0; i < jobs.size(); ++i)
    out.push_back(texts[i].finish(std::move((*g)[i])));
  return out;
}

}  // namespace

std::variant<std::vector<Completion>, CompletionReply> run_completions(
    InferenceModel& m, const std::vector<CompletionJob>& jobs, std::int64_t max_tokens, const Sampling& s,
    const Scoring& scoring, std::int64_t max_positions, const Listening& listening) {
  std::vector<Completion> out;
  const std::int64_t context = m.model->arch().max_seq_len;
  for (std::size_t begin = 0; begin < jobs.size();) {
    // As many jobs as keep rows times the run's longest within the bound.
    std::size_t end = begin + 1;
    std::int64_t longest = std::min(static_cast<std::int64_t>(jobs[begin].prompt->size()) + max_tokens, context);
    while (end < jobs.size()) {
      const std::int64_t wider =
          std::max(longest, std::min(static_cast<std::int64_t>(jobs[end].prompt->size()) + max_tokens, context));
      if (static_cast<std::int64_t>(end - begin + 1) * wider > max_positions) break;
      longest = wider;
      ++end;
    }
    auto run = run_together(
        m, {jobs.begin() + static_cast<std::ptrdiff_t>(begin), jobs.begin() + static_cast<std::ptrdiff_t>(end)},
        max_tokens, s, scoring, listening);
    if (auto* failed = std::get_if<CompletionReply>(&run)) return std::move(*failed);
    for (Completion& c : std::get<std::vector<Completion>>(run))
      out.push_back(std::move(c));
    begin = end;
  }
  return out;
}

std::variant<std::vector<Prefill>, CompletionReply> prefill_prompts(
    InferenceModel& m, const std::vector<std::vector<std::int32_t>>& prompts, std::int64_t max_tokens,
    const Scoring& scoring) {
  Result<std::vector<Prefill>> done = Status::internal("not run");
  try {
    done = prefill(m.model, prompts, max_tokens, scoring);
  } catch (const c10::OutOfMemoryError& e) {
    return error_reply(503, "server_error", std::string("out of memory: ") + e.what_without_backtrace());
  }
  if (!done.is_ok()) return error_reply(500, "server_error", done.status().message());
  return std::move(*done);
}

std::size_t stop_prefix_at_end(std::string_view text, const std::vector<std::string>& stops) {
  std::size_t longest = 0;
  for (const std::string& stop : stops) {
    for (std::size_t k = std::min(stop.size() - 1, text.size()); k > longest; --k) {
      if (text.substr(text.size() - k) == std::string_view(stop).substr(0, k)) {
        longest = k;
        break;
      }
    }
  }
  return longest;
}

std::string new_response_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char id[48];
  std::snprintf(id, sizeof id, "%s-%016llx", prefix, static_cast<unsigned long long>(rng()));
  return id;
}

ChunkStream::ChunkStream(const char* id_prefix, const char* object, const std::string& model_name,
                         const ChunkSink& emit)
    : id_(new_response_id(id_prefix)), object_(object), created_(now_seconds()), model_(model_name), emit_(emit) {}

Json ChunkStream::head() const {
  Json chunk;
  chunk["id"] = id_;
  chunk["object"] = object_;
  chunk["created"] = created_;
  chunk["model"] = model_;
  return chunk;
}

bool ChunkStream::choice(std::int64_t index, Json fields, const char* finish_reason) {
  Json chunk = head();
  Json choice;
  choice["index"] = index;
  for (auto& [key, value] : fields.items())
    choice[key] = std::move(value);
  if (!choice.contains("logprobs")) choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason ? Json(finish_reason) : Json();
  chunk["choices"] = Json::array({std::move(choice)});
  return send(chunk);
}

bool ChunkStream::usage_of(std::size_t prompt_tokens, std::size_t completion_tokens) {
  Json chunk = head();
  chunk["choices"] = Json::array();
  chunk["usage"] = usage(prompt_tokens, completion_tokens);
  return send(chunk);
}

bool ChunkStream::send(const Json& chunk) {
  if (listening_) listening_ = emit_(chunk.dump());
  return listening_;
}

std::int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Json usage(std::size_t prompt_tokens, std::size_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

std::variant<Json, CompletionReply> read_body(const InferenceModel& m, const std::string& body) {
  if (!m.tokenizer) return error_reply(500, "server_error", "the model has no tokenizer");
  Json parsed = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return error_reply(400, "invalid_request_error", "the request body is not JSON");
  return parsed;
}

CompletionReply response(const char* id_prefix, const char* object, const std::string& model_name, Json choices,
                         std::size_t prompt_tokens, std::size_t completion_tokens) {
  Json out;
  out["id"] = new_response_id(id_prefix);
  out["object"] = object;
  out["created"] = now_seconds();
  out["model"] = model_name;
  out["choices"] = std::move(choices);
  out["usage"] = usage(prompt_tokens, completion_tokens);
  return {200, out.dump()};
}

}  // namespace tailor::runner::openai
