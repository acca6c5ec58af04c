// OpenAI completions (runner/torch/completions.h) on a tiny chat model with
// a trained byte-level tokenizer (generate_reference.py chat): the echoed
// prompt's log-probabilities are those generation gave its tokens, greedy
// tokens head their top_logprobs, stop sequences cut the text, seeds
// repeat, batches keep their order and generate together as each prompt
// alone, logit biases, min-p and n choices generate as generation.h does, a streamed reply is each choice's text and
// log-probabilities in chunks, and what is not served is refused by name. lm-eval's own client against `tailor serve`
// is tests/cli/serve_test.py.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runner/torch/completions.h"
#include "runner/torch/generation.h"
#include "tests/runner/torch/generate_fixture.h"

namespace tailor::runner {
namespace {

using Json = nlohmann::json;

class CompletionsTest : public TinyChatModelTest {
 protected:
  // The reply's status and body.
  static std::pair<int, Json> ask(const Json& request, CompletionLimits limits = {}) {
    const CompletionReply r = complete(*model_, "tiny", request.dump(), limits);
    return {r.status, Json::parse(r.body)};
  }
};

TEST_F(CompletionsTest, EchoScoresThePromptAsGenerationScoredItsTokens) {
  const std::string text = "The capital of Japan is";
  auto [status, body] = ask({{"prompt", text}, {"max_tokens", 6}, {"temperature", 0}, {"logprobs", 3}});
  ASSERT_EQ(status, 200) << body;
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["model"], "tiny");
  const Json& choice = body["choices"][0];
  const Json& lp = choice["logprobs"];
  const std::size_t n = body["usage"]["completion_tokens"];
  ASSERT_EQ(lp["tokens"].size(), n);
  // Greedy: each token is the most likely one of its top three.
  for (std::size_t i = 0; i < n; ++i) {
    const Json& top = lp["top_logprobs"][i];
    EXPECT_LE(top.size(), 3u);
    double best = -1e30;
    for (const auto& [key, value] : top.items()) best = std::max(best, value.get<double>());
    EXPECT_EQ(lp["token_logprobs"][i].get<double>(), best) << "token " << i;
  }

  // The same tokens echoed after the prompt, scored by one forward: the
  // log-probabilities of the cached, token-at-a-time generation.
  auto prompt = prompt_ids_of_text(*model_, text);
  ASSERT_TRUE(prompt.is_ok());
  SamplingOptions o;
  o.max_new_tokens = 6;
  auto g = generate(model_->model, *prompt, o);
  ASSERT_TRUE(g.is_ok());
  ASSERT_EQ(g->ids.size(), n);  // the folder's EOS is not among 6 random tokens here
  std::vector<std::int32_t> all = *prompt;
  all.insert(all.end(), g->ids.begin(), g->ids.end());
  auto [echo_status, echoed] = ask({{"prompt", all}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 1}});
  ASSERT_EQ(echo_status, 200) << echoed;
  const Json& elp = echoed["choices"][0]["logprobs"];
  ASSERT_EQ(elp["tokens"].size(), all.size());
  EXPECT_TRUE(elp["token_logprobs"][0].is_null());
  EXPECT_TRUE(elp["top_logprobs"][0].is_null());
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_NEAR(elp["token_logprobs"][prompt->size() + i].get<double>(), lp["token_logprobs"][i].get<double>(), 1e-4)
        << "token " << i;
  }
  EXPECT_EQ(echoed["usage"]["completion_tokens"], 0);
  EXPECT_EQ(echoed["usage"]["prompt_tokens"], all.size());
  EXPECT_EQ(echoed["choices"][0]["text"], model_->tokenizer->decode(all));
  // The text offsets rise with the text.
  for (std::size_t i = 1; i < all.size(); ++i) {
    EXPECT_GE(elp["text_offset"][i].get<int>(), elp["text_offset"][i - 1].get<int>());
  }

  // max_tokens 0 without echo: nothing, and no logprobs asked.
  auto [none_status, none] = ask({{"prompt", text}, {"max_tokens", 0}});
  ASSERT_EQ(none_status, 200) << none;
  EXPECT_EQ(none["choices"][0]["text"], "");
  EXPECT_TRUE(none["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(none["choices"][0]["finish_reason"], "length");
}

TEST_F(CompletionsTest, StopSequencesSeedsAndBatchesBehaveAsOpenAIs) {
  auto [status, body] = ask({{"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 0}});
  ASSERT_EQ(status, 200) << body;
  const std::string whole = body["choices"][0]["text"];
  ASSERT_GE(whole.size(), 8u) << whole;
  // A stop sequence from the middle of the text: the text ends before its
  // first occurrence.
  const std::string stop = whole.substr(whole.size() / 2, 2);
  auto [s2, cut] = ask({{"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 0}, {"stop", {stop}}});
  ASSERT_EQ(s2, 200) << cut;
  EXPECT_EQ(cut["choices"][0]["text"], whole.substr(0, whole.find(stop)));
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "stop");
  EXPECT_LT(cut["usage"]["completion_tokens"].get<int>(), body["usage"]["completion_tokens"].get<int>());

  // Sampling with a seed repeats; another seed differs.
  const Json sampled = {{"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 1.5}, {"seed", 11}};
  auto [sa, a] = ask(sampled);
  auto [sb, b] = ask(sampled);
  Json other = sampled;
  other["seed"] = 12;
  auto [sc, c] = ask(other);
  ASSERT_EQ(sa + sb + sc, 600);
  EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]);
  EXPECT_NE(a["choices"][0]["text"], c["choices"][0]["text"]);

  // A batch: one choice a prompt, in order, each as it would be alone.
  auto [sbatch, batch] =
      ask({{"prompt", {"Once upon a time", "Hello"}}, {"max_tokens", 24}, {"temperature", 0}, {"echo", true}});
  ASSERT_EQ(sbatch, 200) << batch;
  ASSERT_EQ(batch["choices"].size(), 2u);
  EXPECT_EQ(batch["choices"][0]["index"], 0);
  EXPECT_EQ(batch["choices"][1]["index"], 1);
  EXPECT_EQ(batch["choices"][0]["text"], "Once upon a time" + whole);

  // What lm-eval's batches of log-likelihood requests send: several prompts
  // of different lengths, echoed and scored, one token each. They run
  // through one forward pass; each choice is the one its prompt gets alone.
  const std::vector<std::string> texts = {"Once upon a time", "Hi", "The quick brown fox jumps over the lazy dog"};
  auto [sscored, scored] =
      ask({{"prompt", texts}, {"max_tokens", 1}, {"temperature", 0}, {"echo", true}, {"logprobs", 1}});
  ASSERT_EQ(sscored, 200) << scored;
  std::size_t prompt_tokens = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    auto [salone, alone] =
        ask({{"prompt", texts[i]}, {"max_tokens", 1}, {"temperature", 0}, {"echo", true}, {"logprobs", 1}});
    ASSERT_EQ(salone, 200) << alone;
    const Json& one = alone["choices"][0];
    const Json& together = scored["choices"][i];
    EXPECT_EQ(together["index"], i);
    EXPECT_EQ(together["text"], one["text"]);
    EXPECT_EQ(together["logprobs"]["tokens"], one["logprobs"]["tokens"]);
    ASSERT_EQ(together["logprobs"]["token_logprobs"].size(), one["logprobs"]["token_logprobs"].size());
    for (std::size_t t = 1; t < one["logprobs"]["token_logprobs"].size(); ++t) {
      EXPECT_NEAR(together["logprobs"]["token_logprobs"][t].get<double>(),
                  one["logprobs"]["token_logprobs"][t].get<double>(), 1e-5)
          << "prompt " << i << ", token " << t;
    }
    prompt_tokens += alone["usage"]["prompt_tokens"].get<std::size_t>();
  }
  EXPECT_EQ(scored["usage"]["prompt_tokens"], prompt_tokens);
}

// What lm-eval's generative batches send: prompts of different lengths
// that generate together (rows at different positions, rows ending at a
// stop sequence or a stop token before the others), sampled, two choices
// each. Each choice is the text its prompt and seed give alone; the
// request is the same whether its choices generate in one batch or, under
// a bound of 96 positions, in several passes and batches.
TEST_F(CompletionsTest, PromptsGeneratedTogetherAreEachTheTextItGetsAlone) {
  const std::vector<std::string> texts = {"Once upon a time", "Hi", "The quick brown fox jumps over the lazy dog",
                                          "Hello", "A"};
  auto request = [](const Json& prompt) {
    return Json{{"prompt", prompt}, {"max_tokens", 20}, {"temperature", 0.9}, {"seed", 5},
                {"n", 2},           {"stop", {"e"}},    {"logprobs", 2}};
  };
  // The same choice: text, finish, tokens, their log-probabilities within
  // 1e-5 (sums in another order).
  auto expect_same = [](const Json& mine, const Json& theirs) {
    EXPECT_EQ(mine["index"], theirs["index"]);
    EXPECT_EQ(mine["text"], theirs["text"]);
    EXPECT_EQ(mine["finish_reason"], theirs["finish_reason"]);
    EXPECT_EQ(mine["logprobs"]["tokens"], theirs["logprobs"]["tokens"]);
    const Json& lp = theirs["logprobs"]["token_logprobs"];
    ASSERT_EQ(mine["logprobs"]["token_logprobs"].size(), lp.size());
    for (std::size_t t = 0; t < lp.size(); ++t)
      EXPECT_NEAR(mine["logprobs"]["token_logprobs"][t].get<double>(), lp[t].get<double>(), 1e-5) << "token " << t;
  };
  auto [status, together] = ask(request(texts));
  ASSERT_EQ(status, 200) << together;
  ASSERT_EQ(together["choices"].size(), 2 * texts.size());
  CompletionLimits small;
  small.batch_positions = 96;  // about two rows of the longest prompt and its 20 tokens
  auto [bounded_status, bounded] = ask(request(texts), small);
  ASSERT_EQ(bounded_status, 200) << bounded;
  ASSERT_EQ(bounded["choices"].size(), together["choices"].size());
  for (std::size_t c = 0; c < together["choices"].size(); ++c) {
    SCOPED_TRACE("bounded, choice " + std::to_string(c));
    expect_same(bounded["choices"][c], together["choices"][c]);
  }
  std::size_t stopped = 0, completion_tokens = 0;
  std::set<std::size_t> lengths;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    auto [alone_status, alone] = ask(request(texts[i]));
    ASSERT_EQ(alone_status, 200) << alone;
    for (std::size_t k = 0; k < 2; ++k) {
      SCOPED_TRACE("prompt " + std::to_string(i) + ", choice " + std::to_string(k));
      Json one = alone["choices"][k];
      one["index"] = 2 * i + k;
      expect_same(together["choices"][2 * i + k], one);
      stopped += one["finish_reason"] == "stop" ? 1 : 0;
      lengths.insert(one["logprobs"]["tokens"].size());
    }
    completion_tokens += alone["usage"]["completion_tokens"].get<std::size_t>();
  }
  EXPECT_EQ(together["usage"]["completion_tokens"], completion_tokens);
  // Rows left the batch before others: some stopped, at different lengths.
  EXPECT_GT(stopped, 0u);
  EXPECT_GT(lengths.size(), 2u);
}

// presence_penalty, frequency_penalty and repetition_penalty reach
// generation: the text is the one generation.h gives with them (whose
// tokens generation_test.cpp checks against transformers), and not the
// unpenalised one.
TEST_F(CompletionsTest, PenaltiesGenerateAsGenerationDoesWithThem) {
  const std::string text = "Once upon a time";
  auto [status, body] = ask({{"prompt", text},
                             {"max_tokens", 24},
                             {"temperature", 0},
                             {"presence_penalty", 0.5},
                             {"frequency_penalty", 0.5},
                             {"repetition_penalty", 1.3}});
  ASSERT_EQ(status, 200) << body;
  auto prompt = prompt_ids_of_text(*model_, text);
  ASSERT_TRUE(prompt.is_ok());
  SamplingOptions o;
  o.max_new_tokens = 24;
  o.stop_ids = model_->stop_ids;
  auto plain = generate(model_->model, *prompt, o);
  o.presence_penalty = 0.5;
  o.frequency_penalty = 0.5;
  o.repetition_penalty = 1.3;
  auto penalised = generate(model_->model, *prompt, o);
  ASSERT_TRUE(plain.is_ok() && penalised.is_ok());
  EXPECT_NE(plain->ids, penalised->ids);
  std::vector<std::int32_t> ids = penalised->ids;
  if (penalised->stopped) ids.pop_back();  // a final stop id is not text
  EXPECT_EQ(body["choices"][0]["text"], model_->tokenizer->decode(ids));
  EXPECT_EQ(body["usage"]["completion_tokens"], ids.size());
}

// logit_bias and min_p reach generation as presence_penalty does above; n
// gives each prompt n choices, in OpenAI's order, choice k sampled with
// seed + k, and the prompt's tokens counted once.
TEST_F(CompletionsTest, LogitBiasMinPAndSeveralChoicesGenerateAsGenerationDoes) {
  const std::string text = "Once upon a time";
  auto prompt = prompt_ids_of_text(*model_, text);
  ASSERT_TRUE(prompt.is_ok());
  SamplingOptions o;
  o.max_new_tokens = 16;
  o.stop_ids = model_->stop_ids;
  auto plain = generate(model_->model, *prompt, o);
  ASSERT_TRUE(plain.is_ok());
  ASSERT_FALSE(plain->ids.empty());
  auto text_of = [&](const Generated& g) {
    std::vector<std::int32_t> ids = g.ids;
    if (g.stopped) ids.pop_back();
    return model_->tokenizer->decode(ids);
  };
  // Greedy with the first token forbidden.
  const std::int32_t first = plain->ids.front();
  auto [status, body] = ask({{"prompt", text},
                             {"max_tokens", 16},
                             {"temperature", 0},
                             {"logit_bias", {{std::to_string(first), -100}, {"7", 0.5}}}});
  ASSERT_EQ(status, 200) << body;
  o.logit_bias = {{first, -100.0}, {7, 0.5}};
  auto biased = generate(model_->model, *prompt, o);
  ASSERT_TRUE(biased.is_ok());
  EXPECT_NE(biased->ids.front(), first);
  EXPECT_EQ(body["choices"][0]["text"], text_of(*biased));

  // Sampled with min_p: the tokens generation draws with the same seed.
  // Sampled at temperature 1.5 with min-p 0.2 from seed 3.
  auto sampled_request = [&](int max_tokens, int n, int best_of) {
    return Json{{"prompt", text}, {"max_tokens", max_tokens}, {"temperature", 1.5}, {"min_p", 0.2},
                {"seed", 3},      {"n", n},                   {"best_of", best_of}};
  };
  auto [ms, sampled] = ask(sampled_request(16, 3, 3));
  ASSERT_EQ(ms, 200) << sampled;
  ASSERT_EQ(sampled["choices"].size(), 3u);
  SamplingOptions s;
  s.max_new_tokens = 16;
  s.stop_ids = model_->stop_ids;
  s.temperature = 1.5;
  s.min_p = 0.2;
  std::set<std::string> texts;
  std::size_t completion_tokens = 0;
  for (std::uint64_t k = 0; k < 3; ++k) {
    s.seed = 3 + k;
    auto g = generate(model_->model, *prompt, s);
    ASSERT_TRUE(g.is_ok());
    EXPECT_EQ(sampled["choices"][k]["index"], k);
    EXPECT_EQ(sampled["choices"][k]["text"], text_of(*g)) << "choice " << k;
    texts.insert(sampled["choices"][k]["text"].get<std::string>());
    completion_tokens += g->ids.size() - (g->stopped ? 1 : 0);
  }
  EXPECT_GT(texts.size(), 1u);  // the choices are not copies of one
  EXPECT_EQ(sampled["usage"]["prompt_tokens"], prompt->size());
  EXPECT_EQ(sampled["usage"]["completion_tokens"], completion_tokens);

  // best_of 5, n 2: the two of the five candidates (seeds 3 to 7) with the
  // highest log-probability per token, likeliest first; usage counts all five.
  auto [bs5, best] = ask(sampled_request(8, 2, 5));
  ASSERT_EQ(bs5, 200) << best;
  ASSERT_EQ(best["choices"].size(), 2u);
  std::vector<std::pair<double, std::string>> ranked;
  std::size_t all_tokens = 0;
  s.max_new_tokens = 8;
  Scoring scored;
  scored.generated = true;
  for (std::uint64_t k = 0; k < 5; ++k) {
    s.seed = 3 + k;
    auto g = generate(model_->model, *prompt, s, {}, scored);
    ASSERT_TRUE(g.is_ok());
    double sum = 0;
    for (const TokenScore& t : g->scores)
      sum += t.logprob;
    ranked.emplace_back(sum / static_cast<double>(g->scores.size()), text_of(*g));
    all_tokens += g->ids.size() - (g->stopped ? 1 : 0);
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  EXPECT_EQ(best["choices"][0]["text"], ranked[0].second);
  EXPECT_EQ(best["choices"][1]["text"], ranked[1].second);
  EXPECT_EQ(best["choices"][1]["index"], 1);
  EXPECT_EQ(best["usage"]["completion_tokens"], all_tokens);

  // Two prompts of two choices: a prompt's choices together.
  auto [bs, batch] = ask({{"prompt", {text, "Hello"}}, {"max_tokens", 4}, {"temperature", 0}, {"n", 2}});
  ASSERT_EQ(bs, 200) << batch;
  ASSERT_EQ(batch["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(batch["choices"][i]["index"], i);
  EXPECT_EQ(batch["choices"][0]["text"], batch["choices"][1]["text"]);  // greedy: equal
  EXPECT_EQ(batch["choices"][2]["text"], batch["choices"][3]["text"]);
  EXPECT_NE(batch["choices"][1]["text"], batch["choices"][2]["text"]);  // the second prompt's
}

// A streamed request's chunks, gathered by choice: each choice's text,
// finish reason and logprobs lists (tokens, token_logprobs, top_logprobs,
// text_offset) in the order they came, then the last chunk (the usage).
struct Streamed {
  std::vector<std::string> texts, finished;
  std::vector<Json> logprobs;
  Json last;
};
Streamed stream_of(InferenceModel& model, Json request, std::size_t choices) {
  request["stream"] = true;
  request["stream_options"] = {{"include_usage", true}};
  std::vector<Json> chunks;
  const CompletionReply r = complete(model, "tiny", request.dump(), {}, [&](const std::string& c) {
    chunks.push_back(Json::parse(c));
    return true;
  });
  Streamed out{std::vector<std::string>(choices), std::vector<std::string>(choices), std::vector<Json>(choices), {}};
  EXPECT_EQ(r.status, 200) << r.body;
  if (chunks.empty()) {
    ADD_FAILURE() << "no chunk";
    return out;
  }
  const char* lists[] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
  for (Json& l : out.logprobs) {
    for (const char* key : lists)
      l[key] = Json::array();
  }
  for (std::size_t i = 0; i + 1 < chunks.size(); ++i) {
    const Json& c = chunks[i];
    EXPECT_EQ(c["object"], "text_completion");
    EXPECT_EQ(c["id"], chunks[0]["id"]);
    if (c["choices"].size() != 1u) {
      ADD_FAILURE() << "a chunk of " << c["choices"].size() << " choices: " << c;
      continue;
    }
    const Json& choice = c["choices"][0];
    const std::size_t k = choice["index"];
    if (k >= choices) {
      ADD_FAILURE() << "choice " << k << " of " << choices;
      continue;
    }
    EXPECT_TRUE(out.finished[k].empty()) << "a chunk after choice " << k << " finished";
    out.texts[k] += choice["text"].get<std::string>();
    if (!choice["finish_reason"].is_null()) out.finished[k] = choice["finish_reason"];
    const Json& l = choice["logprobs"];
    if (!request.contains("logprobs")) {
      EXPECT_TRUE(l.is_null()) << c;
      continue;
    }
    EXPECT_EQ(l["tokens"].size(), l["text_offset"].size()) << c;
    for (const char* key : lists) {
      for (const Json& v : l[key])
        out.logprobs[k][key].push_back(v);
    }
  }
  out.last = chunks.back();
  return out;
}

// A streamed choice's logprobs lists against the unstreamed reply's object.
// The reply asked without stream generated its choices together (one
// forward for all), the stream one after another: the same up to the order
// of sums.
void expect_same_logprobs(const Json& got, const Json& expected) {
  EXPECT_EQ(got["tokens"], expected["tokens"]);
  EXPECT_EQ(got["text_offset"], expected["text_offset"]);
  ASSERT_EQ(got["token_logprobs"].size(), expected["token_logprobs"].size());
  for (std::size_t t = 0; t < got["token_logprobs"].size(); ++t) {
    const Json& a = got["token_logprobs"][t];
    const Json& b = expected["token_logprobs"][t];
    ASSERT_EQ(a.is_null(), b.is_null()) << "token " << t;
    if (!a.is_null()) {
      EXPECT_NEAR(a.get<double>(), b.get<double>(), 1e-4) << "token " << t;
    }
    const Json& top_a = got["top_logprobs"][t];
    const Json& top_b = expected["top_logprobs"][t];
    ASSERT_EQ(top_a.size(), top_b.size()) << "token " << t;
    for (const auto& [alt, lp] : top_b.items()) {
      ASSERT_TRUE(top_a.contains(alt)) << "token " << t << ": " << alt;
      EXPECT_NEAR(top_a[alt].get<double>(), lp.get<double>(), 1e-4) << "token " << t << ": " << alt;
    }
  }
}

// A streamed reply: each choice's pieces (the echoed prompt first) add up
// to its text asked without stream, their log-probabilities to its
// logprobs object (the echoed prompt's, each token's with its two likeliest
// alternatives, the offsets into the whole text; a final stop id left out
// as the reply leaves it out), each chunk naming its choice, one finish
// reason a choice, then the usage when asked.
TEST_F(CompletionsTest, AStreamedReplyIsEachChoicesTextInChunks) {
  const Json request = {{"prompt", {"Once upon a time", "Hi"}},
                        {"max_tokens", 12},
                        {"temperature", 1.2},
                        {"seed", 5},
                        {"n", 2},
                        {"echo", true},
                        {"logprobs", 2},
                        {"stop", "e"}};
  auto [status, whole] = ask(request);
  ASSERT_EQ(status, 200) << whole;
  const Streamed streamed = stream_of(*model_, request, 4);
  for (std::size_t k = 0; k < 4; ++k) {
    SCOPED_TRACE("choice " + std::to_string(k));
    EXPECT_EQ(streamed.texts[k], whole["choices"][k]["text"]);
    EXPECT_EQ(streamed.finished[k], whole["choices"][k]["finish_reason"]);
    expect_same_logprobs(streamed.logprobs[k], whole["choices"][k]["logprobs"]);
    // The echoed prompt, then at least one generated token.
    EXPECT_TRUE(whole["choices"][k]["logprobs"]["token_logprobs"][0].is_null());
    EXPECT_GT(whole["choices"][k]["logprobs"]["tokens"].size(), 2u);
  }
  EXPECT_TRUE(streamed.last["choices"].empty());
  EXPECT_EQ(streamed.last["usage"], whole["usage"]);
  // Choices that end at the model's stop id (made likelier by a bias),
  // unechoed, and without logprobs: every chunk's logprobs null.
  ASSERT_FALSE(model_->stop_ids.empty());
  const Json ending = {{"prompt", "Once upon a time"},
                       {"max_tokens", 16},
                       {"temperature", 1.0},
                       {"seed", 11},
                       {"n", 4},
                       {"logprobs", 1},
                       {"logit_bias", {{std::to_string(model_->stop_ids.front()), 4}}}};
  auto [status2, whole2] = ask(ending);
  ASSERT_EQ(status2, 200) << whole2;
  const Streamed ended = stream_of(*model_, ending, 4);
  std::size_t stopped = 0;
  for (std::size_t k = 0; k < 4; ++k) {
    SCOPED_TRACE("choice " + std::to_string(k) + " of the biased request");
    EXPECT_EQ(ended.texts[k], whole2["choices"][k]["text"]);
    EXPECT_EQ(ended.finished[k], whole2["choices"][k]["finish_reason"]);
    expect_same_logprobs(ended.logprobs[k], whole2["choices"][k]["logprobs"]);
    stopped += ended.finished[k] == "stop" ? 1 : 0;
  }
  EXPECT_GE(stopped, 1u) << "no choice ended at the stop id: the bias no longer reaches it";
  Json plain = ending;
  plain.erase("logprobs");
  const Streamed without = stream_of(*model_, plain, 4);
  for (std::size_t k = 0; k < 4; ++k)
    EXPECT_EQ(without.texts[k], ended.texts[k]) << "choice " << k;
  // Refused: a caller that cannot take a stream, and stream_options
  // without it.
  Json no_sink = request;
  no_sink["stream"] = true;
  auto [s1, b1] = ask(no_sink);
  EXPECT_EQ(s1, 400);
  EXPECT_EQ(b1["error"]["param"], "stream") << b1;
  Json options = request;
  options["stream_options"] = {{"include_usage", true}};
  auto [s3, b3] = ask(options);
  EXPECT_EQ(s3, 400);
  EXPECT_EQ(b3["error"]["param"], "stream_options") << b3;
}

// A client that leaves (the sink answers false): nothing is sent after it
// said so, the choices after it are never generated, and the reply ends as
// a streamed one.
TEST_F(CompletionsTest, AStreamStopsWhereItsClientLeaves) {
  const Json request = {
      {"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}, {"n", 3}, {"stream", true}};
  std::vector<Json> chunks;
  const auto sink = [&](const std::string& c) {
    chunks.push_back(Json::parse(c));
    return chunks.size() < 3;
  };
  const CompletionReply r = complete(*model_, "tiny", request.dump(), {}, sink);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "null");
  ASSERT_EQ(chunks.size(), 3u);
  for (const Json& c : chunks) {
    EXPECT_EQ(c["choices"][0]["index"], 0) << c;
    EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null()) << c;
  }
  // Asked whole, the first choice has more to it than the chunks sent.
  auto [status, whole] = ask({{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}});
  ASSERT_EQ(status, 200);
  std::string sent;
  for (const Json& c : chunks)
    sent += c["choices"][0]["text"].get<std::string>();
  EXPECT_LT(sent.size(), whole["choices"][0]["text"].get<std::string>().size());
}

// Unstreamed: once `listening` says the client has gone, every prompt's
// choices stop at their next token, no later pass runs, and the reply is
// 200 with the body null; while it says the client waits, the reply is the
// one asked without it.
TEST_F(CompletionsTest, AnUnstreamedRequestStopsWhereItsClientLeaves) {
  const Json request = {{"prompt", {"Once upon a time", "Hi"}}, {"max_tokens", 24}, {"temperature", 0}, {"n", 2}};
  int asked = 0;
  const CompletionReply gone = complete(*model_, "tiny", request.dump(), {}, {}, [&asked] { return ++asked < 3; });
  EXPECT_EQ(gone.status, 200);
  EXPECT_EQ(gone.body, "null");
  EXPECT_LT(asked, 10);  // asked at each token until it said no: 96 tokens were asked for
  const CompletionReply there = complete(*model_, "tiny", request.dump(), {}, {}, [] { return true; });
  ASSERT_EQ(there.status, 200) << there.body;
  const Json with = Json::parse(there.body), without = ask(request).second;
  ASSERT_EQ(with["choices"].size(), 4u);
  EXPECT_EQ(with["choices"], without["choices"]);
  EXPECT_EQ(with["usage"], without["usage"]);
}

TEST_F(CompletionsTest, WhatIsNotServedIsRefusedByName) {
  const int context = static_cast<int>(model_->model->arch().max_seq_len);
  const int vocab = static_cast<int>(model_->model->arch().vocab);
  const std::vector<std::pair<Json, std::string>> cases = {
      {{{"prompt", "x"}, {"frobnicate", 1}}, "unknown field \"frobnicate\""},
      {{{"prompt", "x"}, {"n", 17}}, "n: expected an integer from 1 to 16"},
      {{{"prompt", "x"}, {"best_of", 17}}, "best_of: expected an integer from 1 to 16"},
      {{{"prompt", "x"}, {"n", 2}, {"best_of", 3}, {"stream", true}}, "best_of: the likeliest choices"},
      {{{"prompt", "x"}, {"n", 2}, {"best_of", 1}}, "best_of: must be at least n"},
      {{{"prompt", "x"}, {"min_p", 1.5}}, "min_p: expected a number in [0, 1]"},
      {{{"prompt", "x"}, {"logit_bias", {{"5", 101}}}}, "logit_bias[\"5\"]: expected a number in [-100, 100]"},
      {{{"prompt", "x"}, {"logit_bias", {{"a5", 1}}}}, "logit_bias[\"a5\"]: a key is a token id"},
      {{{"prompt", "x"}, {"logit_bias", {{std::to_string(vocab), 1}}}}, "logit_bias: token id"},
      {{{"prompt", "x"}, {"logit_bias", 3}}, "logit_bias: expected an object"},
      {{{"prompt", "x"}, {"stream", "yes"}}, "stream: expected true or false"},
      {{{"prompt", "x"}, {"presence_penalty", 2.5}}, "presence_penalty: expected a number in [-2, 2]"},
      {{{"prompt", "x"}, {"repetition_penalty", 0}}, "repetition_penalty: expected a positive number"},
      {{{"prompt", "x"}, {"logprobs", 21}}, "logprobs: expected an integer from 0 to 20"},
      {{{"prompt", "x"}, {"max_tokens", 5000}}, "max_tokens: expected an integer from 0 to 4096"},
      {{{"prompt", "x"}, {"temperature", -1}}, "temperature: "},
      {{{"prompt", "x"}, {"top_p", 0}}, "top_p: "},
      {{{"prompt", Json::array()}}, "prompt: expected"},
      {{{"prompt", {{1, -1}}}}, "prompt[0][1]: expected a token id"},
      {{{"prompt", {1, vocab}}}, "outside the model's vocabulary"},
      {{{"prompt", std::vector<int>(static_cast<std::size_t>(context), 5)}, {"max_tokens", 1}}, "leaves no room"},
      {{{"prompt", std::vector<int>(static_cast<std::size_t>(context) + 1, 5)}, {"max_tokens", 0}}, "context is"},
      {{{"max_tokens", 1}}, "prompt: required"},
      {Json::array(), "must be a JSON object"},
  };
  for (const auto& [request, says] : cases) {
    auto [status, body] = ask(request);
    EXPECT_EQ(status, 400) << request;
    EXPECT_EQ(body["error"]["type"], "invalid_request_error") << body;
    EXPECT_NE(body["error"]["message"].get<std::string>().find(says), std::string::npos) << body;
  }
  // A prompt that fills the context exactly is scored (max_tokens 0).
  auto [full_status, full] = ask({{"prompt", std::vector<int>(static_cast<std::size_t>(context), 5)},
                                  {"max_tokens", 0}, {"echo", true}, {"logprobs", 0}});
  EXPECT_EQ(full_status, 200) << full;
  const CompletionReply not_json = complete(*model_, "tiny", "{\"prompt\": ", {});
  EXPECT_EQ(not_json.status, 400);
  CompletionLimits few;
  few.max_prompts = 1;
  EXPECT_EQ(ask({{"prompt", {"a", "b"}}}, few).first, 400);
  few.max_prompts = 3;
  auto [many_status, many] = ask({{"prompt", {"a", "b"}}, {"n", 2}}, few);
  EXPECT_EQ(many_status, 400);
  EXPECT_EQ(many["error"]["param"], "n") << many;
}

}  // namespace
}  // namespace tailor::runner
