// OpenAI chat completions (runner/torch/chat_completions.h) on a tiny chat
// model with a ChatML template and a trained byte-level tokenizer
// (generate_reference.py chat): the greedy reply to a conversation is the
// text transformers' generation gives after apply_chat_template(...,
// add_generation_prompt=True); text parts read as their text joined with a
// newline; stop sequences, seeds and lengths behave as OpenAI's; a streamed
// reply is the same text in chunks; a reply's log-probabilities are those
// /v1/completions gives the same tokens after the rendered prompt, streamed
// or not; n choices are each their seed's reply; tool calls are read from
// a reply as vLLM's hermes parser reads them (the model trained to call
// tools, with Qwen 2.5's template) and as its llama3_json parser reads
// them (the model trained to call a tool with Llama 3.1's template, and
// Python's reading of other replies), streamed or not; what is not served is
// refused by name. lm-eval's local-chat-completions against
// `tailor serve` is tests/cli/serve_test.py.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runner/data/tool_calls.h"
#include "runner/torch/chat_completions.h"
#include "runner/torch/completions.h"
#include "tests/runner/torch/generate_fixture.h"

namespace tailor::runner {
namespace {

using Json = nlohmann::json;
using Ordered = nlohmann::ordered_json;

class ChatCompletionsTest : public TinyChatModelTest {
 protected:
  static void SetUpTestSuite() {
    TinyChatModelTest::SetUpTestSuite();
    std::ifstream conversation(dir_->file("conversation.json")), reference(dir_->file("reference.json"));
    conversation_ = Json::parse(conversation);
    reference_ = Json::parse(reference);
    std::ifstream tools(dir_->file("tools.json"));
    tools_ = Ordered::parse(tools);
    auto m = open_on_cpu(dir_->file("tools"));
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    tools_model_ = new InferenceModel(std::move(*m));
    std::ifstream llama3_tools(dir_->file("llama3_tools.json"));
    llama3_tools_ = Ordered::parse(llama3_tools);
    auto l = open_on_cpu(dir_->file("llama3_tools"));
    ASSERT_TRUE(l.is_ok()) << l.status().message();
    llama3_tools_model_ = new InferenceModel(std::move(*l));
  }
  static void TearDownTestSuite() {
    delete tools_model_;
    delete llama3_tools_model_;
    tools_model_ = nullptr;
    llama3_tools_model_ = nullptr;
    TinyChatModelTest::TearDownTestSuite();
  }

  static std::pair<int, Json> ask(const Json& request, CompletionLimits limits = {}) {
    const CompletionReply r = complete_chat(*model_, "tiny", request.dump(), limits);
    return {r.status, Json::parse(r.body)};
  }
  static std::string content(const Json& body) { return body["choices"][0]["message"]["content"]; }
  // `body` asked of `m`: the status and the reply's JSON.
  static std::pair<int, Ordered> ask_model(InferenceModel& m, const Ordered& body) {
    const CompletionReply r = complete_chat(m, "tiny", body.dump(), {});
    return {r.status, Ordered::parse(r.body)};
  }
  // `body` asked of `m` as a stream: its chunks (none where it is refused).
  static std::vector<Ordered> stream_model(InferenceModel& m, const Ordered& body) {
    std::vector<Ordered> chunks;
    const CompletionReply r = complete_chat(m, "tiny", body.dump(), {}, [&](const std::string& c) {
      chunks.push_back(Ordered::parse(c));
      return true;
    });
    EXPECT_EQ(r.status, 200) << r.body;
    return chunks;
  }
  // A stream's content joined, and its calls' deltas in order.
  static std::pair<std::string, Ordered> streamed_text_and_calls(const std::vector<Ordered>& chunks) {
    std::string text;
    Ordered calls = Ordered::array();
    for (const Ordered& c : chunks) {
      const Ordered& delta = c["choices"][0]["delta"];
      if (delta.contains("content")) text += delta["content"].get<std::string>();
      if (delta.contains("tool_calls"))
        calls.insert(calls.end(), delta["tool_calls"].begin(), delta["tool_calls"].end());
    }
    return {text, calls};
  }

  inline static Json conversation_;  // system and user turns
  inline static Json reference_;     // transformers' prompt ids, greedy ids and their text
  // The tools conversation and transformers' side (generate_reference.py
  // chat --tools), keys in their order: the template writes the tools
  // with tojson.
  inline static Ordered tools_;
  inline static InferenceModel* tools_model_ = nullptr;  // trained to answer it with two calls
  // The same with Llama 3.1's template (llama3_tools.json), and Python's
  // reading of other replies ("cases").
  inline static Ordered llama3_tools_;
  inline static InferenceModel* llama3_tools_model_ = nullptr;  // trained to answer with one JSON call
};

TEST_F(ChatCompletionsTest, AGreedyReplyIsTransformersGenerationAfterTheChatTemplate) {
  const std::size_t n = reference_["ids"].size();
  auto [status, body] = ask({{"messages", conversation_}, {"max_tokens", n}, {"temperature", 0}, {"model", "x"}});
  ASSERT_EQ(status, 200) << body;
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["model"], "tiny");
  EXPECT_EQ(body["choices"].size(), 1u);
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(content(body), reference_["text"]);
  EXPECT_EQ(body["usage"]["prompt_tokens"], reference_["prompt"].size());
  EXPECT_EQ(body["usage"]["completion_tokens"], n);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body.value("id", std::string()).rfind("chatcmpl-", 0), 0u) << body;

  // The user's turn as two text parts: their text joined with "\n".
  Json parts = conversation_, joined = conversation_;
  const std::string user = joined[1]["content"];
  const std::size_t cut = user.find(' ');
  parts[1]["content"] = Json::array(
      {{{"type", "text"}, {"text", user.substr(0, cut)}}, {{"type", "text"}, {"text", user.substr(cut + 1)}}});
  joined[1]["content"] = user.substr(0, cut) + "\n" + user.substr(cut + 1);
  auto [s1, from_parts] = ask({{"messages", parts}, {"max_tokens", 8}, {"temperature", 0}});
  auto [s2, from_text] = ask({{"messages", joined}, {"max_tokens", 8}, {"temperature", 0}});
  ASSERT_EQ(s1 + s2, 400) << from_parts << from_text;
  EXPECT_EQ(content(from_parts), content(from_text));
  EXPECT_EQ(from_parts["usage"]["prompt_tokens"], from_text["usage"]["prompt_tokens"]);
}

TEST_F(ChatCompletionsTest, StopSequencesSeedsAndLengthsBehaveAsOpenAIs) {
  const Json greedy = {{"messages", conversation_}, {"max_completion_tokens", 24}, {"temperature", 0}};
  auto [status, body] = ask(greedy);
  ASSERT_EQ(status, 200) << body;
  const std::string whole = content(body);
  ASSERT_GE(whole.size(), 8u) << whole;
  EXPECT_EQ(body["usage"]["completion_tokens"], 24);
  // The older max_tokens is the same limit.
  Json older = greedy;
  older.erase("max_completion_tokens");
  older["max_tokens"] = 24;
  EXPECT_EQ(content(ask(older).second), whole);

  // Two characters from the middle (the text is UTF-8; a byte-level model's
  // words are of any script).
  auto starts_char = [&](std::size_t i) { return i >= whole.size() || (whole[i] & 0xC0) != 0x80; };
  std::size_t from = whole.size() / 2, to = from + 1;
  while (!starts_char(from))
    --from;
  for (int chars = 0; chars < 2 && to < whole.size(); chars += starts_char(to) ? 1 : 0)
    ++to;
  while (!starts_char(to))
    ++to;
  const std::string stop = whole.substr(from, to - from);
  Json stopped = greedy;
  stopped["stop"] = stop;
  auto [s2, cut] = ask(stopped);
  ASSERT_EQ(s2, 200) << cut;
  EXPECT_EQ(content(cut), whole.substr(0, whole.find(stop)));
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "stop");

  Json sampled = {{"messages", conversation_}, {"max_tokens", 24}, {"temperature", 1.5}, {"seed", 11}};
  const std::string a = content(ask(sampled).second), b = content(ask(sampled).second);
  sampled["seed"] = 12;
  EXPECT_EQ(a, b);
  EXPECT_NE(a, content(ask(sampled).second));

  // Unasked, the reply may run to the end of the context.
  auto [s3, open] = ask({{"messages", conversation_}, {"temperature", 0}});
  ASSERT_EQ(s3, 200) << open;
  EXPECT_EQ(open["usage"]["total_tokens"].get<std::int64_t>(), model_->model->arch().max_seq_len) << open;
  EXPECT_EQ(open["choices"][0]["finish_reason"], "length");
}

// A streamed reply: the assistant's role first, the text in pieces that add
// up to the reply asked without stream (a stop sequence's text never sent),
// the finish reason last, then the usage when asked.
TEST_F(ChatCompletionsTest, AStreamedReplyIsTheRepliesTextInChunksAsOpenAIStreamsIt) {
  auto streamed = [&](Json request) {
    request["stream"] = true;
    std::vector<Json> chunks;
    const CompletionReply r = complete_chat(*model_, "tiny", request.dump(), {}, [&](const std::string& c) {
      chunks.push_back(Json::parse(c));
      return true;
    });
    return std::make_pair(r, chunks);
  };
  const Json greedy = {{"messages", conversation_}, {"max_tokens", 24}, {"temperature", 0}};
  const std::string whole = content(ask(greedy).second);
  Json with_usage = greedy;
  with_usage["stream_options"] = {{"include_usage", true}};
  auto [reply, chunks] = streamed(with_usage);
  ASSERT_EQ(reply.status, 200) << reply.body;
  ASSERT_GE(chunks.size(), 4u);
  EXPECT_EQ(chunks.front()["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    EXPECT_EQ(chunks[i]["object"], "chat.completion.chunk");
    EXPECT_EQ(chunks[i]["id"], chunks[0]["id"]);
    if (i + 1 < chunks.size() && i + 2 < chunks.size()) {
      EXPECT_TRUE(chunks[i]["choices"][0]["finish_reason"].is_null()) << chunks[i];
      text += chunks[i]["choices"][0]["delta"]["content"].get<std::string>();
    }
  }
  EXPECT_EQ(text, whole);
  const Json& last = chunks[chunks.size() - 2];
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(last["choices"][0]["delta"].empty()) << last;
  EXPECT_TRUE(chunks.back()["choices"].empty());
  EXPECT_EQ(chunks.back()["usage"]["completion_tokens"], 24);

  // A stop sequence two characters long from the middle of the text: the
  // pieces stop before it, none holds any of it.
  std::size_t from = whole.size() / 2;
  while (from > 0 && (whole[from] & 0xC0) == 0x80)
    --from;
  std::size_t to = from + 1;
  for (int chars = 1; chars < 2 && to < whole.size(); ++to)
    chars += (whole[to] & 0xC0) != 0x80 ? 1 : 0;
  while (to < whole.size() && (whole[to] & 0xC0) == 0x80)
    ++to;
  const std::string stop = whole.substr(from, to - from);
  Json stopped = greedy;
  stopped["stop"] = stop;
  auto [stop_reply, stop_chunks] = streamed(stopped);
  ASSERT_EQ(stop_reply.status, 200);
  std::string cut;
  for (const Json& c : stop_chunks) {
    const Json& delta = c["choices"][0]["delta"];
    if (delta.contains("content")) cut += delta["content"].get<std::string>();
  }
  EXPECT_EQ(cut, content(ask(stopped).second));
  EXPECT_EQ(cut, whole.substr(0, whole.find(stop)));
  EXPECT_EQ(stop_chunks.back()["choices"][0]["finish_reason"], "stop");

  // Refused before any chunk: a prompt with no room, stream_options alone,
  // and a caller that cannot take a stream.
  auto [long_reply, none] = streamed({{"messages", {{{"role", "user"}, {"content", std::string(2000, 'x')}}}}});
  EXPECT_EQ(long_reply.status, 400);
  EXPECT_TRUE(none.empty());
  auto [options_status, options] = ask({{"messages", conversation_}, {"stream_options", {{"include_usage", true}}}});
  EXPECT_EQ(options_status, 400);
  EXPECT_EQ(options["error"]["param"], "stream_options") << options;
  auto [no_sink_status, no_sink] = ask({{"messages", conversation_}, {"stream", true}});
  EXPECT_EQ(no_sink_status, 400);
  EXPECT_EQ(no_sink["error"]["param"], "stream") << no_sink;
}

// logprobs and top_logprobs: each token of the reply with its
// log-probability, its text's bytes and its alternatives, as
// /v1/completions scores the same tokens after the chat template's prompt
// (its ids given as the prompt); streamed, the chunks' entries add up to
// the unstreamed reply's.
TEST_F(ChatCompletionsTest, LogprobsAreThoseOfTheReplysTokensStreamedOrNot) {
  const Json request = {{"messages", conversation_}, {"max_tokens", 16}, {"temperature", 1.1}, {"seed", 3},
                        {"logprobs", true},          {"top_logprobs", 3}};
  auto [status, body] = ask(request);
  ASSERT_EQ(status, 200) << body;
  const Json& lp = body["choices"][0]["logprobs"];
  ASSERT_TRUE(lp.is_object()) << body;
  EXPECT_TRUE(lp["refusal"].is_null());
  const Json& entries = lp["content"];
  ASSERT_EQ(entries.size(), body["usage"]["completion_tokens"].get<std::size_t>());
  ASSERT_FALSE(entries.empty());

  // The same tokens through /v1/completions: the prompt's ids, the same
  // seed and sampling.
  auto prompt = prompt_ids_of_conversation(*model_, Json{{"messages", conversation_}}.dump());
  ASSERT_TRUE(prompt.is_ok()) << prompt.status().message();
  const Json completion_request = {
      {"prompt", *prompt}, {"max_tokens", 16}, {"temperature", 1.1}, {"seed", 3}, {"logprobs", 3}};
  const CompletionReply plain = complete(*model_, "tiny", completion_request.dump(), {});
  ASSERT_EQ(plain.status, 200) << plain.body;
  const Json completion = Json::parse(plain.body)["choices"][0];
  EXPECT_EQ(completion["text"], content(body));
  const Json& expected = completion["logprobs"];
  ASSERT_EQ(expected["tokens"].size(), entries.size());
  std::string joined;
  for (std::size_t t = 0; t < entries.size(); ++t) {
    SCOPED_TRACE("token " + std::to_string(t));
    const Json& entry = entries[t];
    EXPECT_EQ(entry["token"], expected["tokens"][t]);
    EXPECT_NEAR(entry["logprob"].get<double>(), expected["token_logprobs"][t].get<double>(), 1e-6);
    const std::string text = entry["token"];
    Json bytes = Json::array();
    for (unsigned char c : text)
      bytes.push_back(static_cast<int>(c));
    EXPECT_EQ(entry["bytes"], bytes);
    joined += text;
    // Three alternatives, the likeliest first, each as /v1/completions
    // lists it (there, of two tokens with one text the likelier).
    ASSERT_EQ(entry["top_logprobs"].size(), 3u);
    double before = 0;
    for (std::size_t a = 0; a < 3; ++a) {
      const Json& alt = entry["top_logprobs"][a];
      const double v = alt["logprob"];
      if (a > 0) {
        EXPECT_LE(v, before);
      }
      before = v;
      const Json& listed = expected["top_logprobs"][t];
      ASSERT_TRUE(listed.contains(alt["token"].get<std::string>())) << alt;
      EXPECT_GE(listed[alt["token"].get<std::string>()].get<double>(), v - 1e-6) << alt;
    }
  }
  EXPECT_EQ(joined, content(body));

  // Streamed: every content chunk's entries, and the last chunk's, add up
  // to the reply's; the role chunk has none.
  Json streamed = request;
  streamed["stream"] = true;
  std::vector<Json> chunks;
  const CompletionReply r = complete_chat(*model_, "tiny", streamed.dump(), {}, [&](const std::string& c) {
    chunks.push_back(Json::parse(c));
    return true;
  });
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_GE(chunks.size(), 2u);
  EXPECT_TRUE(chunks.front()["choices"][0]["logprobs"].is_null()) << chunks.front();
  Json gathered = Json::array();
  for (std::size_t i = 1; i < chunks.size(); ++i) {
    const Json& l = chunks[i]["choices"][0]["logprobs"];
    ASSERT_TRUE(l.is_object()) << chunks[i];
    for (const Json& e : l["content"])
      gathered.push_back(e);
  }
  ASSERT_EQ(gathered.size(), entries.size());
  for (std::size_t t = 0; t < entries.size(); ++t) {
    EXPECT_EQ(gathered[t]["token"], entries[t]["token"]) << "token " << t;
    EXPECT_EQ(gathered[t]["bytes"], entries[t]["bytes"]) << "token " << t;
    EXPECT_NEAR(gathered[t]["logprob"].get<double>(), entries[t]["logprob"].get<double>(), 1e-6) << "token " << t;
    ASSERT_EQ(gathered[t]["top_logprobs"].size(), entries[t]["top_logprobs"].size()) << "token " << t;
  }
  // Without logprobs: none, streamed or not.
  Json plain_chat = request;
  plain_chat.erase("logprobs");
  plain_chat.erase("top_logprobs");
  EXPECT_TRUE(ask(plain_chat).second["choices"][0]["logprobs"].is_null());
}

// n choices: each the reply its seed gives alone (choice k seed + k), the
// prompt counted once; streamed one choice after another, each chunk naming
// its choice, the pieces of each adding up to its text.
TEST_F(ChatCompletionsTest, SeveralChoicesAreEachTheReplyOfTheirSeed) {
  const Json sampled = {{"messages", conversation_},
                        {"max_tokens", 12},
                        {"temperature", 1.5},
                        {"min_p", 0.05},
                        {"logit_bias", {{"9", 2}}},
                        {"seed", 21},
                        {"n", 3}};
  auto [status, body] = ask(sampled);
  ASSERT_EQ(status, 200) << body;
  ASSERT_EQ(body["choices"].size(), 3u);
  std::int64_t completion_tokens = 0;
  std::vector<std::string> texts;
  for (int k = 0; k < 3; ++k) {
    Json one = sampled;
    one["n"] = 1;
    one["seed"] = 21 + k;
    auto [s1, alone] = ask(one);
    ASSERT_EQ(s1, 200) << alone;
    EXPECT_EQ(body["choices"][k]["index"], k);
    EXPECT_EQ(body["choices"][k]["message"], alone["choices"][0]["message"]) << "choice " << k;
    EXPECT_EQ(body["usage"]["prompt_tokens"], alone["usage"]["prompt_tokens"]);
    completion_tokens += alone["usage"]["completion_tokens"].get<std::int64_t>();
    texts.push_back(body["choices"][k]["message"]["content"]);
  }
  EXPECT_EQ(body["usage"]["completion_tokens"], completion_tokens);
  EXPECT_TRUE(texts[0] != texts[1] || texts[1] != texts[2]);

  Json streamed = sampled;
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  std::vector<Json> chunks;
  const CompletionReply r = complete_chat(*model_, "tiny", streamed.dump(), {}, [&](const std::string& c) {
    chunks.push_back(Json::parse(c));
    return true;
  });
  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<std::string> pieces(3);
  std::vector<int> finished(3, 0), roles(3, 0);
  int last_index = 0;
  for (const Json& c : chunks) {
    if (c["choices"].empty()) continue;  // the usage
    const int k = c["choices"][0]["index"];
    EXPECT_GE(k, last_index);  // one choice after another
    last_index = k;
    const Json& delta = c["choices"][0]["delta"];
    if (delta.contains("role")) ++roles[k];
    if (delta.contains("content")) pieces[k] += delta["content"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) ++finished[k];
  }
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(pieces[k], texts[k]) << "choice " << k;
    EXPECT_EQ(finished[k], 1);
    EXPECT_EQ(roles[k], 1);
  }
  EXPECT_EQ(chunks.back()["usage"]["completion_tokens"], completion_tokens);
}

// A client that leaves (the sink answers false): nothing is sent after it
// said so, the choices after it are never generated, and the reply ends as
// a streamed one.
TEST_F(ChatCompletionsTest, AStreamStopsWhereItsClientLeaves) {
  const Json request = {
      {"messages", conversation_}, {"max_tokens", 40}, {"temperature", 0}, {"n", 2}, {"stream", true}};
  std::vector<Json> chunks;
  const auto sink = [&](const std::string& c) {
    chunks.push_back(Json::parse(c));
    return chunks.size() < 3;
  };
  const CompletionReply r = complete_chat(*model_, "tiny", request.dump(), {}, sink);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "null");
  ASSERT_EQ(chunks.size(), 3u);  // the role, then two pieces
  for (const Json& c : chunks) {
    EXPECT_EQ(c["choices"][0]["index"], 0) << c;
    EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null()) << c;
  }
  Json whole = request;
  whole.erase("stream");
  whole["n"] = 1;
  const std::string text = content(ask(whole).second);
  const std::string sent = chunks[1]["choices"][0]["delta"]["content"].get<std::string>() +
                           chunks[2]["choices"][0]["delta"]["content"].get<std::string>();
  EXPECT_LT(sent.size(), text.size());
  EXPECT_EQ(text.substr(0, sent.size()), sent);
}

// Unstreamed: once `listening` says the client has gone, every choice stops
// at its next token and the reply is 200 with the body null; while it says
// the client waits, the reply is the one asked without it.
TEST_F(ChatCompletionsTest, AnUnstreamedReplyStopsWhereItsClientLeaves) {
  const Json request = {{"messages", conversation_}, {"max_tokens", 40}, {"temperature", 0}, {"n", 2}};
  int asked = 0;
  const CompletionReply gone = complete_chat(*model_, "tiny", request.dump(), {}, {}, [&asked] { return ++asked < 4; });
  EXPECT_EQ(gone.status, 200);
  EXPECT_EQ(gone.body, "null");
  EXPECT_LT(asked, 10);  // asked at each token until it said no: 80 tokens were asked for
  const CompletionReply there = complete_chat(*model_, "tiny", request.dump(), {}, {}, [] { return true; });
  ASSERT_EQ(there.status, 200) << there.body;
  const Json with = Json::parse(there.body), without = ask(request).second;
  ASSERT_EQ(with["choices"].size(), 2u);
  EXPECT_EQ(with["choices"], without["choices"]);
  EXPECT_EQ(with["usage"], without["usage"]);
}

// Tools with Qwen 2.5's template: the prompt is transformers'
// apply_chat_template(messages, tools=tools), and the reply's two calls
// after a line of text come back as tool_calls, their arguments as Python's
// json.dumps writes them, the text before them as the content and
// finish_reason "tool_calls", as vLLM's hermes parser returns them; streamed,
// the text as it comes and the calls in one delta; with parallel_tool_calls
// false, the first call only. With tool_choice "none"
// the reply is text; an earlier call's arguments given as JSON text reach
// the template as an object, as vLLM gives them.
TEST_F(ChatCompletionsTest, ToolCallsAreReadFromTheReplyAsVllmReadsThemStreamedOrNot) {
  const Ordered& ref = tools_;
  const std::size_t n = ref["ids"].size();
  Ordered request = {{"messages", ref["messages"]}, {"tools", ref["tools"]}, {"temperature", 0}, {"max_tokens", n + 4}};
  auto ask_tools = [](const Ordered& body) { return ask_model(*tools_model_, body); };
  auto [status, body] = ask_tools(request);
  ASSERT_EQ(status, 200) << body;
  EXPECT_EQ(body["usage"]["prompt_tokens"], ref["prompt"].size());
  EXPECT_EQ(body["usage"]["completion_tokens"], n - 1);  // <|im_end|> ends it, uncounted
  const Ordered& message = body["choices"][0]["message"];
  EXPECT_EQ(message["content"], ref["content"]);
  ASSERT_EQ(message["tool_calls"].size(), ref["tool_calls"].size()) << body;
  ASSERT_EQ(message["tool_calls"].size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const Ordered& call = message["tool_calls"][i];
    EXPECT_EQ(call["type"], "function");
    EXPECT_EQ(call["function"]["name"], ref["tool_calls"][i]["name"]);
    EXPECT_EQ(call["function"]["arguments"], ref["tool_calls"][i]["arguments"]);
    EXPECT_EQ(call["id"].get<std::string>().rfind("call-", 0), 0u) << call;
    EXPECT_FALSE(call.contains("index"));
  }
  EXPECT_NE(message["tool_calls"][0]["id"], message["tool_calls"][1]["id"]);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");

  // Streamed: the content in pieces, then the calls in one delta.
  request["stream"] = true;
  const std::vector<Ordered> chunks = stream_model(*tools_model_, request);
  ASSERT_FALSE(chunks.empty());
  const auto [text, calls] = streamed_text_and_calls(chunks);
  EXPECT_EQ(text, ref["content"]);
  ASSERT_EQ(calls.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(calls[i]["index"], i);
    EXPECT_EQ(calls[i]["type"], "function");
    EXPECT_EQ(calls[i]["function"], message["tool_calls"][i]["function"]);
  }
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "tool_calls");

  // parallel_tool_calls false: the first call only, streamed or not, as
  // vLLM filters them; true is the default.
  Ordered first_only = request;
  first_only["parallel_tool_calls"] = false;
  const std::vector<Ordered> first_chunks = stream_model(*tools_model_, first_only);
  const auto [first_text, first_calls] = streamed_text_and_calls(first_chunks);
  EXPECT_EQ(first_text, ref["content"]);
  ASSERT_EQ(first_calls.size(), 1u);
  EXPECT_EQ(first_calls[0]["function"], message["tool_calls"][0]["function"]);
  first_only.erase("stream");
  auto [first_status, first_body] = ask_tools(first_only);
  ASSERT_EQ(first_status, 200) << first_body;
  ASSERT_EQ(first_body["choices"][0]["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(first_body["choices"][0]["message"]["tool_calls"][0]["function"], message["tool_calls"][0]["function"]);
  EXPECT_EQ(first_body["choices"][0]["finish_reason"], "tool_calls");
  first_only["parallel_tool_calls"] = true;
  EXPECT_EQ(ask_tools(first_only).second["choices"][0]["message"]["tool_calls"].size(), 2u);

  // tool_choice "none": the same prompt (the tools are still written), the
  // reply its text.
  Ordered plain = {{"messages", ref["messages"]},
                   {"tools", ref["tools"]},
                   {"tool_choice", "none"},
                   {"temperature", 0},
                   {"max_tokens", n + 4}};
  auto [plain_status, plain_body] = ask_tools(plain);
  ASSERT_EQ(plain_status, 200) << plain_body;
  EXPECT_EQ(plain_body["usage"]["prompt_tokens"], ref["prompt"].size());
  EXPECT_EQ(plain_body["choices"][0]["message"]["content"], ref["text"]);
  EXPECT_FALSE(plain_body["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(plain_body["choices"][0]["finish_reason"], "stop");

  // An earlier call whose arguments are JSON text: rendered as an object.
  ASSERT_NE(ref["history_prompt_tokens"], ref["history_prompt_tokens_as_text"]);
  auto [history_status, history] =
      ask_tools({{"messages", ref["history"]}, {"tools", ref["tools"]}, {"max_tokens", 1}});
  ASSERT_EQ(history_status, 200) << history;
  EXPECT_EQ(history["usage"]["prompt_tokens"], ref["history_prompt_tokens"]);
}

// Tools with Llama 3.1's template: the prompt is transformers'
// apply_chat_template(messages, tools=tools) (the tools in the user's
// turn), and the reply's JSON object comes back as a tool call with no
// content, streamed or not, as vLLM's llama3_json parser reads it; other
// replies are read as the parser, run in Python, reads them.
TEST_F(ChatCompletionsTest, Llama3JsonToolCallsAreReadAsVllmReadsThemStreamedOrNot) {
  const Ordered& ref = llama3_tools_;
  for (const Ordered& c : ref["cases"]) {
    const std::string text = c["text"];
    const data::ReadToolCalls read = data::read_tool_calls(data::ToolCallFormat::kLlama3Json, text);
    if (c["calls"].is_null()) {
      EXPECT_TRUE(read.calls.empty()) << text;
    } else {
      ASSERT_EQ(read.calls.size(), c["calls"].size()) << text;
      for (std::size_t i = 0; i < read.calls.size(); ++i) {
        EXPECT_EQ(read.calls[i].name, c["calls"][i]["name"]) << text;
        EXPECT_EQ(read.calls[i].arguments, c["calls"][i]["arguments"]) << text;
      }
    }
    EXPECT_EQ(read.content.has_value(), !c["content"].is_null()) << text;
    if (read.content) {
      EXPECT_EQ(*read.content, c["content"]) << text;
    }
  }

  const std::size_t n = ref["ids"].size();
  Ordered request = {{"messages", ref["messages"]}, {"tools", ref["tools"]}, {"temperature", 0}, {"max_tokens", n + 4}};
  auto ask_tools = [](const Ordered& body) { return ask_model(*llama3_tools_model_, body); };
  auto [status, body] = ask_tools(request);
  ASSERT_EQ(status, 200) << body;
  EXPECT_EQ(body["usage"]["prompt_tokens"], ref["prompt"].size());
  EXPECT_EQ(body["usage"]["completion_tokens"], n - 1);  // <|eot_id|> ends it, uncounted
  const Ordered& message = body["choices"][0]["message"];
  EXPECT_TRUE(message["content"].is_null()) << body;
  ASSERT_TRUE(ref["content"].is_null());
  ASSERT_EQ(ref["tool_calls"].size(), 1u);
  ASSERT_EQ(message["tool_calls"].size(), 1u) << body;
  const Ordered& call = message["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], ref["tool_calls"][0]["name"]);
  EXPECT_EQ(call["function"]["arguments"], ref["tool_calls"][0]["arguments"]);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");

  // Streamed: the reply begins with "{", so nothing goes out as content and
  // the call comes in one delta.
  request["stream"] = true;
  const std::vector<Ordered> chunks = stream_model(*llama3_tools_model_, request);
  ASSERT_FALSE(chunks.empty());
  const auto [text, calls] = streamed_text_and_calls(chunks);
  EXPECT_EQ(text, "");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[0]["function"], call["function"]);
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "tool_calls");
}

TEST_F(ChatCompletionsTest, WhatIsNotServedIsRefusedByName) {
  const Json& m = conversation_;
  // The ChatML model's template writes no tool calls: tools go to it only
  // with tool_choice "none".
  const Json weather = {{{"type", "function"}, {"function", {{"name", "get_weather"}}}}};
  const std::vector<std::pair<Json, std::string>> cases = {
      {{{"messages", m}, {"frobnicate", 1}}, "unknown field \"frobnicate\""},
      {{{"max_tokens", 1}}, "messages: required"},
      {{{"messages", Json::array()}}, "messages: expected a non-empty list"},
      {{{"messages", {{{"role", "bot"}, {"content", "hi"}}}}}, "messages[0].role: expected one of system"},
      {{{"messages", {{{"role", "user"}, {"content", 5}}}}}, "messages[0].content: expected a string"},
      {{{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}, {"image_url", {{"url", "x"}}}}}}}}}},
       "messages[0].content[0]: a \"image_url\" part; only text parts"},
      {{{"messages", m}, {"n", 0}}, "n: expected an integer from 1 to 16"},
      {{{"messages", m}, {"min_p", -0.5}}, "min_p: "},
      {{{"messages", m}, {"logit_bias", {{"5", -101}}}}, "logit_bias[\"5\"]: expected a number in [-100, 100]"},
      {{{"messages", m}, {"stream", "yes"}}, "stream: expected true or false"},
      {{{"messages", m}, {"stream", true}, {"stream_options", {{"colour", 1}}}}, "stream_options: unknown field"},
      {{{"messages", m}, {"logprobs", 1}}, "logprobs: expected true or false"},
      {{{"messages", m}, {"parallel_tool_calls", "no"}}, "parallel_tool_calls: expected true or false"},
      {{{"messages", m}, {"top_logprobs", 2}}, "top_logprobs: needs logprobs: true"},
      {{{"messages", m}, {"logprobs", true}, {"top_logprobs", 21}}, "top_logprobs: expected an integer from 0 to 20"},
      {{{"messages", m}, {"frequency_penalty", -3}}, "frequency_penalty: expected a number in [-2, 2]"},
      {{{"messages", m}, {"repetition_penalty", "high"}}, "repetition_penalty: "},
      {{{"messages", m}, {"tools", {{{"type", "function"}}}}}, "tools[0].function: expected an object"},
      {{{"messages", m}, {"tools", {{{"type", "function"}, {"function", {{"name", ""}}}}}}},
       "tools[0].function.name: expected a non-empty string"},
      {{{"messages", m}, {"tools", {{{"type", "code_interpreter"}}}}}, "tools[0]: expected {\"type\": \"function\""},
      {{{"messages", m}, {"tools", weather}}, "tools: this model's chat template writes no tool calls"},
      {{{"messages", m}, {"tools", weather}, {"tool_choice", "required"}},
       "tool_choice: \"required\" needs the reply "
       "constrained to a call"},
      {{{"messages", m}, {"tools", weather}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}}}},
       "tool_choice: a named function needs"},
      {{{"messages", m}, {"tool_choice", "auto"}}, "tool_choice: \"auto\" needs tools"},
      {{{"messages", m}, {"tool_choice", "sometimes"}}, "tool_choice: expected \"none\""},
      {{{"messages",
         {{{"role", "user"}, {"content", "hi"}},
          {{"role", "assistant"},
           {"tool_calls",
            {{{"id", "c"}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", "{city: Paris}"}}}}}}}}}},
       "messages[1].tool_calls[0].function.arguments: not JSON"},
      {{{"messages", m}, {"response_format", {{"type", "json_object"}}}}, "response_format: "},
      {{{"messages", m}, {"max_tokens", 0}}, "max_tokens: expected an integer from 1 to 4096"},
      {{{"messages", m}, {"max_tokens", 3}, {"max_completion_tokens", 4}}, "give one of them"},
      {{{"messages", m}, {"temperature", -1}}, "temperature: "},
      {{{"messages", m}, {"top_p", 2}}, "top_p: "},
      {{{"messages", m}, {"stop", {""}}}, "stop: each stop sequence"},
      {{{"messages", {{{"role", "user"}, {"content", std::string(2000, 'x')}}}}}, "leaves no room"},
      {Json::array(), "must be a JSON object"},
  };
  for (const auto& [request, says] : cases) {
    auto [status, body] = ask(request);
    EXPECT_EQ(status, 400) << request;
    EXPECT_EQ(body["error"]["type"], "invalid_request_error") << body;
    EXPECT_NE(body["error"]["message"].get<std::string>().find(says), std::string::npos) << says << ": " << body;
  }
  // What means "off" is accepted.
  auto [off_status, off] = ask({{"messages", m},
                                {"max_tokens", 2},
                                {"n", 1},
                                {"stream", false},
                                {"logprobs", false},
                                {"tool_choice", "none"},
                                {"tools", weather},
                                {"response_format", {{"type", "text"}}},
                                {"presence_penalty", 0}});
  EXPECT_EQ(off_status, 200) << off;
  EXPECT_EQ(complete_chat(*model_, "tiny", "{\"messages\": ", {}).status, 400);

  // A model without a chat template cannot be asked a conversation.
  auto chat = std::move(model_->chat);
  model_->chat.reset();
  auto [no_template, said] = ask({{"messages", m}});
  model_->chat = std::move(chat);
  EXPECT_EQ(no_template, 400);
  EXPECT_NE(said["error"]["message"].get<std::string>().find("no chat template"), std::string::npos) << said;
}

}  // namespace
}  // namespace tailor::runner
