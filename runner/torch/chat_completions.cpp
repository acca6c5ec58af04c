#include "runner/torch/chat_completions.h"

#include <algorithm>
#include <random>
#include <variant>

#include "core/text.h"
#include "runner/torch/chat_tools.h"
#include "runner/torch/openai_request.h"

namespace tailor::runner {
namespace {

using namespace openai;

struct ChatRequest {
  Json record;                  // {"messages": [...]}, each content a string or null
  std::int64_t max_tokens = 0;  // 0: as many as the context leaves (capped by the limit)
  Sampling sampling;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::int64_t n = 1;          // choices
  bool logprobs = false;       // each token's log-probability
  std::int64_t top_logprobs = 0;  // and that many alternatives at each
  // The format the reply's tool calls are read in (tool_choice "auto" with
  // tools); kNone: the reply is text.
  data::ToolCallFormat tool_calls = data::ToolCallFormat::kNone;
  // OpenAI's parallel_tool_calls: false keeps a reply's first call only
  // (as vLLM filters them).
  bool parallel_tool_calls = true;
};

const std::vector<std::string>& known_chat_fields() {
  // clang-format off
  static const std::vector<std::string> fields = {
      "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "seed", "stop",
      "n", "stream", "stream_options", "logprobs", "top_logprobs", "presence_penalty", "frequency_penalty",
      "repetition_penalty", "min_p", "logit_bias", "tools", "tool_choice", "parallel_tool_calls", "response_format", "user"};
  // clang-format on
  return fields;
}

// A turn's content as the template is given it: a list of text parts
// becomes their text joined with "\n" (vLLM's "string" content format); any
// other part is refused.
std::optional<Problem> text_content(Json& turn, const std::string& where) {
  if (!turn.contains("content") || !turn["content"].is_array()) return std::nullopt;
  std::vector<std::string> texts;
  const Json& parts = turn["content"];
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string at = where + ".content[" + std::to_string(i) + "]";
    const Json& part = parts[i];
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      return Problem{"messages", at + ": expected a part {\"type\": \"text\", \"text\": ...}"};
    }
    if (part["type"] != "text") {
      return Problem{"messages", at + ": a \"" + part["type"].get<std::string>() +
                                     "\" part; only text parts are served (the models Tailor trains read text)"};
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      return Problem{"messages", at + ".text: expected a string"};
    }
    texts.push_back(part["text"].get<std::string>());
  }
  turn["content"] = join(texts, "\n");
  return std::nullopt;
}

std::optional<Problem> read_messages(const Json& j, ChatRequest& r) {
  if (!j.contains("messages")) return Problem{"messages", "messages: required"};
  if (!j["messages"].is_array() || j["messages"].empty()) {
    return Problem{"messages", "messages: expected a non-empty list of turns"};
  }
  Json turns = j["messages"];
  for (std::size_t i = 0; i < turns.size(); ++i) {
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (turns[i].is_object()) {
      if (auto bad = text_content(turns[i], where)) return bad;
      if (auto bad = call_arguments_as_values(turns[i], where)) return bad;
    }
  }
  r.record = Json{{"messages", std::move(turns)}};
  if (Status s = check_conversation(r.record); !s.is_ok()) return Problem{"messages", s.message()};
  return std::nullopt;
}

// `tool_format`: the format the model's chat template writes tool calls in.
std::variant<ChatRequest, Problem> parse_chat_request(const Json& j, const CompletionLimits& limits,
                                                      data::ToolCallFormat tool_format) {
  if (!j.is_object()) return Problem{"", "the request body must be a JSON object"};
  if (auto bad = check_known(j, known_chat_fields())) return *bad;
  ChatRequest r;
  if (auto bad = read_messages(j, r)) return *bad;
  if (auto bad = read_tools(j, tool_format, r.record, r.tool_calls)) return *bad;
  if (auto bad = read_bool(j, "parallel_tool_calls", r.parallel_tool_calls)) return *bad;
  if (auto bad = refuse_unless(j, "response_format", Json{{"type", "text"}},
                               "only {\"type\": \"text\"} is served (no JSON modes)")) {
    return *bad;
  }
  for (const char* key : {"model", "user"}) {
    if (auto bad = read_optional_string(j, key)) return *bad;
  }
  std::int64_t max_tokens = 0, max_completion_tokens = 0;
  if (auto bad = read_integer(j, "max_tokens", 1, limits.max_tokens, max_tokens)) return *bad;
  if (auto bad = read_integer(j, "max_completion_tokens", 1, limits.max_tokens, max_completion_tokens)) return *bad;
  if (max_tokens && max_completion_tokens && max_tokens != max_completion_tokens) {
    return Problem{"max_tokens", "max_tokens and max_completion_tokens differ; give one of them"};
  }
  r.max_tokens = max_completion_tokens ? max_completion_tokens : max_tokens;
  if (auto bad = read_sampling(j, r.sampling)) return *bad;
  std::int64_t candidates = 1;  // chat has no best_of: never a known field
  if (auto bad = read_choices(j, limits.max_choices, r.n, candidates)) return *bad;
  if (auto bad = read_stream(j, r.stream, r.include_usage)) return *bad;
  if (auto bad = read_bool(j, "logprobs", r.logprobs)) return *bad;
  std::int64_t top = -1;
  if (auto bad = read_integer(j, "top_logprobs", 0, limits.max_logprobs, top)) return *bad;
  if (top >= 0 && !r.logprobs) return Problem{"top_logprobs", "top_logprobs: needs logprobs: true"};
  r.top_logprobs = std::max<std::int64_t>(top, 0);
  return r;
}

// The calls read from a reply's text, the first only where parallel calls
// are not asked for.
data::ReadToolCalls reply_calls(const ChatRequest& r, const std::string& text) {
  data::ReadToolCalls read = data::read_tool_calls(r.tool_calls, text);
  if (!r.parallel_tool_calls && read.calls.size() > 1) read.calls.resize(1);
  return read;
}

// What a reply scores: each new token, and top_logprobs alternatives.
Scoring scoring_of(const ChatRequest& r) {
  Scoring scoring;
  scoring.generated = r.logprobs;
  scoring.top = r.top_logprobs;
  return scoring;
}

// One token as OpenAI's chat logprobs list it: its text, its
// log-probability and its text's UTF-8 bytes (a byte-level token inside a
// character reads as U+FFFD, as Hugging Face's decoders give it).
Json token_logprob(const data::Tokenizer& tok, std::int32_t id, float logprob) {
  const std::string text = tok.decode({id});
  Json bytes = Json::array();
  for (unsigned char c : text)
    bytes.push_back(static_cast<int>(c));
  return {{"token", text}, {"logprob", logprob}, {"bytes", std::move(bytes)}};
}

// One `content` entry: the token with its top_logprobs (the likeliest
// first).
Json content_entry(const data::Tokenizer& tok, std::int32_t id, const TokenScore& score) {
  Json entry = token_logprob(tok, id, score.logprob);
  Json top = Json::array();
  for (const auto& [alt, lp] : score.top)
    top.push_back(token_logprob(tok, alt, lp));
  entry["top_logprobs"] = std::move(top);
  return entry;
}

// A choice's (or a chunk's) logprobs object: {content, refusal: null}.
Json logprobs_of(Json content) { return {{"content", std::move(content)}, {"refusal", nullptr}}; }

// OpenAI's chat.completion.chunk objects of one streamed reply.
class Chunks {
 public:
  Chunks(const std::string& model_name, const ChunkSink& emit)
      : stream_("chatcmpl", "chat.completion.chunk", model_name, emit) {}

  // Each answers whether the client still listens (ChunkStream::listening).
  bool role(std::int64_t index) { return delta(index, Json{{"role", "assistant"}, {"content", ""}}); }
  // `logprobs`: the chunk's (null unless asked).
  bool content(std::int64_t index, std::string_view text, Json logprobs = nullptr) {
    return delta(index, Json{{"content", text}}, nullptr, std::move(logprobs));
  }
  // The reply's calls in one delta, each whole.
  bool tool_calls(std::int64_t index, Json calls) { return delta(index, Json{{"tool_calls", std::move(calls)}}); }
  bool finish(std::int64_t index, const char* reason, Json logprobs = nullptr) {
    return delta(index, Json::object(), reason, std::move(logprobs));
  }
  bool usage_of(std::size_t prompt_tokens, std::size_t completion_tokens) {
    return stream_.usage_of(prompt_tokens, completion_tokens);
  }
  bool listening() const { return stream_.listening(); }

 private:
  bool delta(std::int64_t index, Json d, const char* finish_reason = nullptr, Json logprobs = nullptr) {
    return stream_.choice(index, Json{{"delta", std::move(d)}, {"logprobs", std::move(logprobs)}}, finish_reason);
  }

  ChunkStream stream_;
};

}  // namespace

CompletionReply complete_chat(InferenceModel& model, const std::string& model_name, const std::string& body,
                              const CompletionLimits& limits, const ChunkSink& emit, const Listening& listening) {
  auto parsed = read_body(model, body);
  if (auto* failed = std::get_if<CompletionReply>(&parsed)) return std::move(*failed);
  const data::ToolCallFormat tool_format =
      model.chat ? data::tool_call_format_of(model.chat->template_text) : data::ToolCallFormat::kNone;
  auto request = parse_chat_request(std::get<Json>(parsed), limits, tool_format);
  if (const auto* bad = std::get_if<Problem>(&request)) return bad_request(*bad);
  const ChatRequest& r = std::get<ChatRequest>(request);
  auto prompt = prompt_ids_of_conversation(model, r.record.dump());
  if (!prompt.is_ok()) return bad_request({"messages", "messages: " + prompt.status().message()});
  // Unasked, the reply may run to the end of the context (OpenAI's default);
  // generation stops there by itself.
  const std::int64_t max_tokens = r.max_tokens ? r.max_tokens : limits.max_tokens;
  const std::uint64_t seed = r.sampling.seed ? *r.sampling.seed : std::random_device{}();
  if (Status s = check_prompt(model.model, *prompt, max_tokens); !s.is_ok()) {
    return error_reply(400, "invalid_request_error", "messages: " + s.message(), "messages");
  }
  // The prompt's forward pass once, for every choice.
  auto passes = prefill_prompts(model, {*prompt}, max_tokens, scoring_of(r));
  if (auto* failed = std::get_if<CompletionReply>(&passes)) return std::move(*failed);
  Prefill& pass = std::get<std::vector<Prefill>>(passes).front();
  if (r.stream) {
    if (!emit) return bad_request({"stream", "stream: this server does not stream; ask without stream"});
    // Each choice's first chunk once the prompt is taken: an error before
    // the first is an ordinary reply, one after it ends the stream.
    Chunks chunks(model_name, emit);
    std::size_t completion_tokens = 0;
    for (std::int64_t k = 0; k < r.n; ++k) {
      // Each content chunk with the log-probabilities of the tokens chosen
      // since the one before (a token whose text is held back comes with
      // the text after it), the rest with the last.
      Json pending = Json::array();
      auto logprobs = [&] {
        if (!r.logprobs) return Json();
        Json out = logprobs_of(std::move(pending));
        pending = Json::array();
        return out;
      };
      // Where calls are read, the text from a call's opening tag on (or
      // from what may begin one) is held back: at the end it is either
      // the calls, in one delta, or the content it was. `sent`: how much
      // of the reply so far went out as content.
      std::string so_far;
      std::size_t sent = 0;
      bool in_call = false;
      auto on_text = [&, k, begun = false](std::string_view piece, const std::vector<ChosenToken>& tokens) mutable {
        if (!begun) chunks.role(k);
        begun = true;
        if (r.logprobs) {
          for (const ChosenToken& t : tokens)
            pending.push_back(content_entry(*model.tokenizer, t.id, t.score));
        }
        so_far += piece;
        if (!in_call) {
          std::size_t cut = data::tool_call_start(r.tool_calls, so_far);
          in_call = cut != std::string::npos && cut >= sent;
          if (!in_call) cut = so_far.size() - data::tool_call_tag_prefix(r.tool_calls, so_far);
          if (cut > sent) chunks.content(k, std::string_view(so_far).substr(sent, cut - sent), logprobs());
          sent = std::max(sent, cut);
        }
        return chunks.listening();
      };
      auto run = run_completion(model, *prompt, max_tokens, r.sampling, choice_seed(seed, k), scoring_of(r), "messages",
                                "messages", on_text, &pass);
      if (auto* failed = std::get_if<CompletionReply>(&run)) return std::move(*failed);
      const Completion& c = std::get<Completion>(run);
      const char* finish = c.stopped ? "stop" : "length";
      if (sent < so_far.size()) {
        const data::ReadToolCalls read = reply_calls(r, c.text);
        if (!read.calls.empty()) {
          chunks.tool_calls(k, tool_calls_json(read.calls, /*indexed=*/true));
          finish = "tool_calls";
        } else {
          chunks.content(k, std::string_view(so_far).substr(sent), logprobs());
        }
      }
      // A client that left is answered no further: the model is free again.
      if (!chunks.finish(k, finish, logprobs())) return {200, "null"};
      completion_tokens += c.ids.size();
    }
    if (r.include_usage) chunks.usage_of(prompt->size(), completion_tokens);
    return {200, "null"};
  }
  // The choices generated together.
  std::vector<CompletionJob> jobs;
  for (std::int64_t k = 0; k < r.n; ++k)
    jobs.push_back({&*prompt, &pass, choice_seed(seed, k), "messages", "messages"});
  auto run = run_completions(model, jobs, max_tokens, r.sampling, scoring_of(r), limits.batch_positions, listening);
  if (auto* failed = std::get_if<CompletionReply>(&run)) return std::move(*failed);
  Json choices = Json::array();
  std::size_t completion_tokens = 0;
  for (const Completion& c : std::get<std::vector<Completion>>(run)) {
    Json choice;
    choice["index"] = choices.size();
    choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    const char* finish = c.stopped ? "stop" : "length";
    if (const data::ReadToolCalls read = reply_calls(r, c.text); !read.calls.empty()) {
      choice["message"]["content"] = read.content ? Json(*read.content) : Json();
      choice["message"]["tool_calls"] = tool_calls_json(read.calls, /*indexed=*/false);
      finish = "tool_calls";  // whatever ended the text, as vLLM says
    }
    if (r.logprobs) {
      Json content = Json::array();
      for (std::size_t i = 0; i < c.ids.size(); ++i)
        content.push_back(content_entry(*model.tokenizer, c.ids[i], c.scores[i]));
      choice["logprobs"] = logprobs_of(std::move(content));
    } else {
      choice["logprobs"] = nullptr;
    }
    choice["finish_reason"] = finish;
    choices.push_back(std::move(choice));
    completion_tokens += c.ids.size();
  }
  return response("chatcmpl", "chat.completion", model_name, std::move(choices), prompt->size(), completion_tokens);
}

}  // namespace tailor::runner
