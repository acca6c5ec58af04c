// Generation (runner/torch/generation.h) against transformers' generate()
// and PEFT on tiny random models of every family (generate_reference.py in
// .venv): greedy ids equal with and without an adapter, through the KV
// cache, fused and materialised attention, sliding windows and Gemma's
// caps, under repetition, presence and frequency penalties and under logit
// biases; the distribution sampling draws from equal to what transformers'
// warpers leave (temperature, top-k, top-p, min-p); a chat model's prompt
// rendered and its text decoded as transformers does, through the
// tailor-runner and tailor commands; seeded sampling, stop ids and bad input;
// sequences generated together (generate_batch) as each alone.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "dsl/model_family.h"
#include "runner/torch/generation.h"
#include "tests/runner/torch/generate_fixture.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/text_file.h"

namespace tailor::runner {
namespace {

using Json = nlohmann::json;
using tailor::testing::read_text;
using tailor::testing::TempDir;

// A step where transformers' two best logits are this close may go either
// way in fp32 (the sums run in another order); a divergence elsewhere fails.
constexpr double kTieMargin = 1e-4;

// Runs a command, its stdout into `out`; the exit code.
int shell(const std::string& cmd, std::string& out, const TempDir& dir) {
  const std::string file = dir.file("stdout.txt");
  const int rc = std::system((cmd + " > " + file + " 2> " + dir.file("stderr.txt")).c_str());
  out = read_text(file);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::vector<std::int32_t> ids_of(const Json& j) { return j.get<std::vector<std::int32_t>>(); }

// Ours against transformers': equal, or equal up to a step that was a near
// tie for transformers. The number of steps that agree.
std::size_t agree(const std::vector<std::int32_t>& ours, const std::vector<std::int32_t>& theirs,
                  const std::vector<double>& margins) {
  const std::size_t n = std::min(ours.size(), theirs.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (ours[i] == theirs[i]) continue;
    EXPECT_LT(margins.at(i), kTieMargin) << "step " << i << ": " << ours[i] << " vs transformers' " << theirs[i];
    return i;
  }
  EXPECT_EQ(ours.size(), theirs.size());
  return n;
}

SamplingOptions greedy(std::int64_t n = 64) {
  SamplingOptions o;
  o.max_new_tokens = n;
  return o;
}

// generate_batch() against generate() alone: prompts of three lengths (rows
// at different positions in every step), greedy, penalised, biased and
// sampled sequences, two on one prompt's pass, one stopped by its callback
// after 5 tokens and one at 20 (so that rows ride along, then leave the
// cache), with every token scored. Equal ids, scores within 1e-5. The
// number of sequences that agree.
std::size_t expect_batch_equals_alone(CausalLM& model, const std::vector<std::int32_t>& prompt) {
  const std::vector<std::int32_t> short_prompt(prompt.begin(), prompt.begin() + 3);
  std::vector<std::int32_t> long_prompt = prompt;
  long_prompt.insert(long_prompt.end(), prompt.begin(), prompt.begin() + 5);
  Scoring scoring;
  scoring.generated = true;
  scoring.top = 2;
  SamplingOptions penalised = greedy(40);
  penalised.repetition_penalty = 1.3;
  penalised.presence_penalty = 0.5;
  SamplingOptions sampled = greedy(64);
  sampled.temperature = 0.8;
  sampled.top_p = 0.9;
  sampled.seed = 7;
  SamplingOptions other_seed = sampled;
  other_seed.seed = 8;
  SamplingOptions biased = greedy(20);
  biased.logit_bias = {{prompt[0], 5.0}};
  struct Case {
    const std::vector<std::int32_t>* prompt;
    SamplingOptions options;
    std::int64_t stop_after = 0;  // the callback says stop after this many tokens (0: never)
  };
  const std::vector<Case> cases = {{&prompt, greedy(64)},   {&short_prompt, penalised},
                                   {&long_prompt, sampled}, {&long_prompt, other_seed},
                                   {&prompt, biased},       {&short_prompt, greedy(64), 5}};
  auto passes = prefill(model, {prompt, short_prompt, long_prompt}, 64, scoring);
  EXPECT_TRUE(passes.is_ok()) << passes.status().message();
  if (!passes.is_ok()) return 0;
  auto pass_of = [&](const std::vector<std::int32_t>* p) {
    return &(*passes)[p == &prompt ? 0 : p == &short_prompt ? 1 : 2];
  };
  std::vector<Sequence> sequences;
  std::vector<std::int64_t> seen(cases.size(), 0);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    TokenSink on_token;
    if (c.stop_after > 0)
      on_token = [&seen, i, n = c.stop_after](std::int32_t, const TokenScore*) { return ++seen[i] < n; };
    sequences.push_back({c.prompt, c.options, pass_of(c.prompt), on_token});
  }
  auto together = generate_batch(model, sequences, scoring);
  EXPECT_TRUE(together.is_ok()) << together.status().message();
  if (!together.is_ok()) return 0;
  std::size_t equal = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("sequence " + std::to_string(i));
    std::int64_t count = 0;
    auto alone = generate(
        model, *cases[i].prompt, cases[i].options,
        [&](std::int32_t, const TokenScore*) { return cases[i].stop_after == 0 || ++count < cases[i].stop_after; },
        scoring);
    EXPECT_TRUE(alone.is_ok()) << alone.status().message();
    if (!alone.is_ok()) continue;
    const Generated& t = (*together)[i];
    EXPECT_EQ(t.ids, alone->ids);
    EXPECT_EQ(t.stopped, alone->stopped);
    EXPECT_EQ(t.scores.size(), alone->scores.size());
    for (std::size_t k = 0; k < std::min(t.scores.size(), alone->scores.size()); ++k) {
      EXPECT_NEAR(t.scores[k].logprob, alone->scores[k].logprob, 1e-5) << "token " << k;
      EXPECT_EQ(t.scores[k].top.size(), 2u);
    }
    equal += t.ids == alone->ids ? 1 : 0;
  }
  const std::vector<std::size_t> lengths = {64, 40, 64, 64, 20, 5};
  for (std::size_t i = 0; i < cases.size(); ++i)
    EXPECT_EQ((*together)[i].ids.size(), lengths[i]) << "sequence " << i;
  return equal;
}

TEST(GenerationTest, GreedyEqualsTransformersOnEveryFamilyWithAndWithoutAdapters) {
  TempDir dir;
  std::string names;
  const std::vector<std::string> families = family_names(&names);
  ASSERT_TRUE(generate_reference(dir, "make " + dir.path().string() + names));
  for (const std::string& family : families) {
    SCOPED_TRACE(family);
    const std::string d = dir.file(family);
    const Json ref = Json::parse(read_text(d + "/reference.json"));
    const auto prompt = ids_of(ref["prompt"]);

    auto base = open_on_cpu(d + "/base");
    ASSERT_TRUE(base.is_ok()) << base.status().message();
    EXPECT_TRUE(base->stop_ids.empty());  // the folder declares no EOS: all 64 tokens
    auto out = generate(base->model, prompt, greedy());
    ASSERT_TRUE(out.is_ok()) << out.status().message();
    EXPECT_FALSE(out->stopped);
    const std::size_t base_steps =
        agree(out->ids, ids_of(ref["base"]), ref["base_margins"].get<std::vector<double>>());

    // The prompt's forward pass beside a longer prompt's (so that padding
    // follows it in its row): the same tokens.
    std::vector<std::int32_t> longer = prompt;
    longer.insert(longer.end(), prompt.begin(), prompt.begin() + 5);
    auto passes = prefill(base->model, {prompt, longer}, 64);
    ASSERT_TRUE(passes.is_ok()) << passes.status().message();
    auto prefilled = generate(base->model, prompt, greedy(), {}, {}, &passes->front());
    ASSERT_TRUE(prefilled.is_ok()) << prefilled.status().message();
    agree(prefilled->ids, ids_of(ref["base"]), ref["base_margins"].get<std::vector<double>>());

    // Sequences generated together, each as it generates alone.
    const std::size_t batched = expect_batch_equals_alone(base->model, prompt);

    // Materialised attention over the cache (the masks it builds for
    // windows and caps) gives the same tokens, alone and together.
    base->model->set_fused_attention(false);
    auto materialised = generate(base->model, prompt, greedy());
    ASSERT_TRUE(materialised.is_ok()) << materialised.status().message();
    agree(materialised->ids, ids_of(ref["base"]), ref["base_margins"].get<std::vector<double>>());
    const std::size_t batched_materialised = expect_batch_equals_alone(base->model, prompt);

    // The adapter folder alone: its base_model_name_or_path is the base.
    auto adapted = open_on_cpu(d + "/adapter");
    ASSERT_TRUE(adapted.is_ok()) << adapted.status().message();
    auto with_adapter = generate(adapted->model, prompt, greedy());
    ASSERT_TRUE(with_adapter.is_ok()) << with_adapter.status().message();
    const std::size_t adapter_steps =
        agree(with_adapter->ids, ids_of(ref["adapter"]), ref["adapter_margins"].get<std::vector<double>>());
    EXPECT_NE(ref["base"], ref["adapter"]);  // the adapter changes what is generated

    // Penalties: transformers' repetition_penalty alone, then with
    // OpenAI's presence and frequency penalties after it.
    SamplingOptions repetition = greedy();
    repetition.repetition_penalty = 1.3;
    auto repeated = generate(base->model, prompt, repetition);
    ASSERT_TRUE(repeated.is_ok()) << repeated.status().message();
    const std::size_t repetition_steps =
        agree(repeated->ids, ids_of(ref["repetition"]), ref["repetition_margins"].get<std::vector<double>>());
    SamplingOptions openai = greedy();
    openai.repetition_penalty = 1.2;
    openai.presence_penalty = 0.7;
    openai.frequency_penalty = 0.4;
    auto penalised = generate(base->model, prompt, openai);
    ASSERT_TRUE(penalised.is_ok()) << penalised.status().message();
    const std::size_t openai_steps =
        agree(penalised->ids, ids_of(ref["openai"]), ref["openai_margins"].get<std::vector<double>>());
    // Logit biases, added before the repetition penalty as transformers'
    // sequence_bias is.
    SamplingOptions biased = greedy();
    biased.repetition_penalty = 1.2;
    for (const Json& b : ref["logit_bias"])
      biased.logit_bias.emplace_back(b[0].get<std::int32_t>(), b[1].get<double>());
    auto with_bias = generate(base->model, prompt, biased);
    ASSERT_TRUE(with_bias.is_ok()) << with_bias.status().message();
    const std::size_t bias_steps =
        agree(with_bias->ids, ids_of(ref["bias"]), ref["bias_margins"].get<std::vector<double>>());
    // Each changes what is generated.
    EXPECT_NE(ref["base"], ref["repetition"]);
    EXPECT_NE(ref["repetition"], ref["openai"]);
    EXPECT_NE(ref["base"].front(), ref["bias"].front());  // the base's first token is biased by -100
    std::printf(
        "%-12s greedy: base %zu/64 steps equal transformers', adapter %zu/64 equal PEFT's, "
        "repetition_penalty %zu/64, with presence and frequency penalties %zu/64, with logit biases %zu/64; "
        "generated together as alone: %zu/6 sequences fused, %zu/6 materialised\n",
        family.c_str(), base_steps, adapter_steps, repetition_steps, openai_steps, bias_steps, batched,
        batched_materialised);
  }
}

TEST(GenerationTest, RunFoldersAdaptersAndStopIdsResolveAsDocumented) {
  TempDir dir;
  ASSERT_TRUE(generate_reference(dir, "make " + dir.path().string() + " llama gpt2"));
  const std::string d = dir.file("llama");
  const Json ref = Json::parse(read_text(d + "/reference.json"));
  const auto prompt = ids_of(ref["prompt"]);
  namespace fs = std::filesystem;

  // A LoRA run's output folder: its adapter/ over the base it names.
  fs::create_directories(dir.file("run"));
  fs::copy(d + "/adapter", dir.file("run/adapter"), fs::copy_options::recursive);
  auto sources = resolve_model_sources(dir.file("run"), "");
  ASSERT_TRUE(sources.is_ok()) << sources.status().message();
  EXPECT_EQ(sources->adapter, dir.file("run") + "/adapter");
  EXPECT_EQ(sources->base, d + "/base");
  // An explicit adapter over the base, and a full fine-tune's model/.
  auto explicit_adapter = open_on_cpu(d + "/base", d + "/adapter");
  ASSERT_TRUE(explicit_adapter.is_ok()) << explicit_adapter.status().message();
  auto out = generate(explicit_adapter->model, prompt, greedy());
  ASSERT_TRUE(out.is_ok());
  agree(out->ids, ids_of(ref["adapter"]), ref["adapter_margins"].get<std::vector<double>>());
  fs::copy(d + "/base", dir.file("run/model"), fs::copy_options::recursive);
  sources = resolve_model_sources(dir.file("run"), "");
  ASSERT_TRUE(sources.is_ok());
  EXPECT_EQ(sources->base, dir.file("run") + "/model");
  EXPECT_TRUE(sources->adapter.empty());

  // A stop id ends generation at its first occurrence, which is kept.
  auto base = open_on_cpu(d + "/base");
  ASSERT_TRUE(base.is_ok());
  const auto all = ids_of(ref["base"]);
  SamplingOptions stop = greedy();
  stop.stop_ids = {all.at(10)};
  auto stopped = generate(base->model, prompt, stop);
  ASSERT_TRUE(stopped.is_ok());
  EXPECT_TRUE(stopped->stopped);
  const auto first = std::find(all.begin(), all.end(), all.at(10));
  EXPECT_EQ(stopped->ids, std::vector<std::int32_t>(all.begin(), first + 1));

  // Bad input, named.
  auto other = open_on_cpu(d + "/base", dir.file("gpt2") + "/adapter");
  ASSERT_FALSE(other.is_ok());
  EXPECT_NE(other.status().message().find("unknown target module \"c_attn\""), std::string::npos)
      << other.status().message();
  auto nothing = resolve_model_sources(dir.path().string(), "");
  ASSERT_FALSE(nothing.is_ok());
  EXPECT_NE(nothing.status().message().find("not a model folder"), std::string::npos);
  std::vector<std::int32_t> long_prompt(static_cast<std::size_t>(base->model->arch().max_seq_len), 5);
  auto too_long = generate(base->model, long_prompt, greedy());
  ASSERT_FALSE(too_long.is_ok());
  EXPECT_NE(too_long.status().message().find("context is 128"), std::string::npos) << too_long.status().message();
  auto outside = generate(base->model, {1, 300}, greedy());
  ASSERT_FALSE(outside.is_ok());
  EXPECT_NE(outside.status().message().find("token id 300"), std::string::npos);
  // The context bounds how many tokens come: 128 - 120.
  std::vector<std::int32_t> near_end(120, 5);
  auto bounded = generate(base->model, near_end, greedy());
  ASSERT_TRUE(bounded.is_ok());
  EXPECT_EQ(bounded->ids.size(), 8u);
  EXPECT_FALSE(bounded->stopped);
}

// Prompts run several to a forward pass: each row's scores and tokens are
// its own pass's, whatever the rows beside it; groups are shortest first,
// within their positions.
TEST(GenerationTest, PromptsPrefilledTogetherGenerateAsEachAlone) {
  TempDir dir;
  ASSERT_TRUE(generate_reference(dir, "make " + dir.path().string() + " gemma2"));
  const Json ref = Json::parse(read_text(dir.file("gemma2/reference.json")));
  const auto prompt = ids_of(ref["prompt"]);
  auto m = open_on_cpu(dir.file("gemma2/base"));
  ASSERT_TRUE(m.is_ok());
  // Three lengths, the shortest in the middle.
  std::vector<std::vector<std::int32_t>> prompts = {prompt, {prompt.begin(), prompt.begin() + 3}, prompt};
  prompts[2].insert(prompts[2].end(), prompt.begin(), prompt.end());
  Scoring scoring;
  scoring.prompt = scoring.generated = true;
  scoring.top = 3;
  SamplingOptions o = greedy(16);
  auto passes = prefill(m->model, prompts, o.max_new_tokens, scoring);
  ASSERT_TRUE(passes.is_ok()) << passes.status().message();
  ASSERT_EQ(passes->size(), 3u);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE(i);
    auto alone = generate(m->model, prompts[i], o, {}, scoring);
    auto together = generate(m->model, prompts[i], o, {}, scoring, &(*passes)[i]);
    auto again = generate(m->model, prompts[i], o, {}, scoring, &(*passes)[i]);
    ASSERT_TRUE(alone.is_ok() && together.is_ok() && again.is_ok());
    EXPECT_EQ(together->ids, alone->ids);
    // The same pass again generates the same: generation writes its cache
    // only beyond the prompt, so a pass serves several choices uncopied.
    EXPECT_EQ(again->ids, alone->ids);
    ASSERT_EQ(together->prompt_scores.size(), prompts[i].size() - 1);
    for (std::size_t t = 0; t < together->prompt_scores.size(); ++t) {
      EXPECT_NEAR(together->prompt_scores[t].logprob, alone->prompt_scores[t].logprob, 1e-5) << "prompt token " << t;
    }
    for (std::size_t t = 0; t < together->scores.size(); ++t) {
      EXPECT_NEAR(together->scores[t].logprob, alone->scores[t].logprob, 1e-5) << "new token " << t;
    }
  }
  // A pass made for fewer new tokens, or scored otherwise, is refused, not
  // overrun or misread.
  auto short_pass = prefill(m->model, {prompt}, 2);
  ASSERT_TRUE(short_pass.is_ok());
  EXPECT_FALSE(generate(m->model, prompt, o, {}, {}, &short_pass->front()).is_ok());
  auto unscored = prefill(m->model, {prompt}, o.max_new_tokens);
  ASSERT_TRUE(unscored.is_ok());
  EXPECT_FALSE(generate(m->model, prompt, o, {}, scoring, &unscored->front()).is_ok());
  // A prompt prefill cannot take is refused as generate() refuses it.
  auto bad = prefill(m->model, {prompt, {static_cast<std::int32_t>(m->model->arch().vocab)}}, 4);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("outside the model's vocabulary"), std::string::npos);

  using Groups = std::vector<std::vector<std::size_t>>;
  EXPECT_EQ(prefill_groups({10, 3, 20, 3}, 6, 40), (Groups{{1, 3}, {0}, {2}}));
  EXPECT_EQ(prefill_groups({10, 3, 20, 3}, 0, 1000), (Groups{{1, 3, 0, 2}}));
  EXPECT_EQ(prefill_groups({50}, 0, 10), (Groups{{0}}));  // longer than a pass: alone
  EXPECT_TRUE(prefill_groups({}, 0, 10).empty());
  // Padding: 3 rows of 100 beside one of 1000 would be 2,700 tokens of it.
  EXPECT_EQ(prefill_groups({100, 1000, 100, 100}, 0, 100000), (Groups{{0, 2, 3}, {1}}));
  // 16 prompts of 300 and one of 330: 480 tokens of padding, within 256 and
  // a quarter of 5,130.
  std::vector<std::int64_t> close(16, 300);
  close.push_back(330);
  EXPECT_EQ(prefill_groups(close, 0, 100000).size(), 1u);
}

TEST(GenerationTest, SamplingIsSeededAndTopKOfOneIsGreedy) {
  TempDir dir;
  ASSERT_TRUE(generate_reference(dir, "make " + dir.path().string() + " qwen2"));
  const std::string d = dir.file("qwen2");
  const Json ref = Json::parse(read_text(d + "/reference.json"));
  const auto prompt = ids_of(ref["prompt"]);
  auto m = open_on_cpu(d + "/base");
  ASSERT_TRUE(m.is_ok());
  SamplingOptions o = greedy();
  o.temperature = 2.0;
  o.top_p = 0.95;
  o.seed = 7;
  auto a = generate(m->model, prompt, o), b = generate(m->model, prompt, o);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(a->ids, b->ids);
  o.seed = 8;
  auto c = generate(m->model, prompt, o);
  ASSERT_TRUE(c.is_ok());
  EXPECT_NE(a->ids, c->ids);
  EXPECT_NE(a->ids, ids_of(ref["base"]));
  o.top_k = 1;
  auto k1 = generate(m->model, prompt, o);
  ASSERT_TRUE(k1.is_ok());
  agree(k1->ids, ids_of(ref["base"]), ref["base_margins"].get<std::vector<double>>());

  // What sampling draws from, against transformers' warpers on the same
  // logits: the same tokens kept, with the same probabilities.
  const Json warpers = Json::parse(read_text(dir.file("warpers.json")));
  const torch::Tensor logits = torch::tensor(warpers["logits"].get<std::vector<float>>());
  for (const Json& w : warpers["cases"]) {
    SCOPED_TRACE(w.dump().substr(0, 80));
    SamplingOptions so;
    so.temperature = w["temperature"].get<double>();
    so.top_k = w["top_k"].get<std::int64_t>();
    so.top_p = w["top_p"].get<double>();
    so.min_p = w["min_p"].get<double>();
    const Candidates kept = sampling_candidates(logits, so);
    const auto theirs = w["probs"].get<std::vector<double>>();
    std::vector<double> ours(theirs.size(), 0.0);
    for (std::int64_t i = 0; i < kept.ids.size(0); ++i)
      ours.at(kept.ids[i].item<std::int64_t>()) = kept.probs[i].item<float>();
    for (std::size_t t = 0; t < theirs.size(); ++t) {
      EXPECT_EQ(ours[t] > 0, theirs[t] > 0) << "token " << t << " kept by one side only";
      EXPECT_NEAR(ours[t], theirs[t], 1e-6) << "token " << t;
    }
  }
  // min-p of 1 keeps the most likely token alone: greedy.
  o.top_k = 0;
  o.min_p = 1.0;
  auto p1 = generate(m->model, prompt, o);
  ASSERT_TRUE(p1.is_ok());
  agree(p1->ids, ids_of(ref["base"]), ref["base_margins"].get<std::vector<double>>());

  SamplingOptions outside = greedy();
  outside.logit_bias = {{static_cast<std::int32_t>(m->model->arch().vocab), 1.0}};
  auto refused = generate(m->model, prompt, outside);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("outside the model's vocabulary"), std::string::npos)
      << refused.status().message();

  for (auto [field, value] : {std::pair<const char*, double>{"temperature", -1},
                              {"top-p", 0},
                              {"top-p", 1.5},
                              {"min-p", -0.1},
                              {"min-p", 1.5},
                              {"logit bias", 101},
                              {"repetition penalty", 0},
                              {"presence penalty", 2.5},
                              {"frequency penalty", -3}}) {
    SamplingOptions bad = greedy();
    const std::string f = field;
    if (f == "temperature") bad.temperature = value;
    if (f == "top-p") bad.top_p = value;
    if (f == "min-p") bad.min_p = value;
    if (f == "logit bias") bad.logit_bias = {{5, value}};
    if (f == "repetition penalty") bad.repetition_penalty = value;
    if (f == "presence penalty") bad.presence_penalty = value;
    if (f == "frequency penalty") bad.frequency_penalty = value;
    const Status s = check_sampling(bad);
    EXPECT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find(field), std::string::npos) << s.message();
  }
}

TEST(GenerationTest, ChatPromptAndTextEqualTransformersThroughTheCommands) {
  TempDir dir;
  ASSERT_TRUE(generate_reference(dir, "chat " + dir.path().string()));
  const Json ref = Json::parse(read_text(dir.file("reference.json")));
  const std::string bin = std::string(TAILOR_BINARY_DIR) + "/bin/";
  const std::string model = dir.file("model"), conversation = dir.file("conversation.json");
  std::string out;
  ASSERT_EQ(shell(bin + "tailor-runner generate " + model + " --messages " + conversation +
                      " --max-tokens 64 --output json",
                  out, dir),
            0)
      << read_text(dir.file("stderr.txt"));
  const Json j = Json::parse(out);
  EXPECT_EQ(j["prompt_ids"], ref["prompt"]);
  const auto theirs = ids_of(ref["ids"]);
  const std::size_t steps = agree(ids_of(j["ids"]), theirs, ref["margins"].get<std::vector<double>>());
  if (steps == theirs.size()) {
    EXPECT_EQ(j["text"], ref["text"]);
  }
  // The template ends an assistant turn with <|im_end|>: a stop id.
  const auto stops = ids_of(j["stop_ids"]);
  EXPECT_NE(std::find(stops.begin(), stops.end(), ref["im_end"].get<std::int32_t>()), stops.end());
  EXPECT_EQ(j["finish_reason"], j["ids"].size() == 64 ? "length" : "stop");

  // Streamed text is the same text; `tailor generate` runs the same.
  ASSERT_EQ(shell(bin + "tailor generate " + model + " --messages " + conversation + " --max-tokens 64", out, dir), 0)
      << read_text(dir.file("stderr.txt"));
  EXPECT_EQ(out, j["text"].get<std::string>() + "\n");
  EXPECT_NE(read_text(dir.file("stderr.txt")).find("tokens/s"), std::string::npos);

  // Bad command lines and bad input: exit 2 and 1, saying what.
  EXPECT_EQ(shell(bin + "tailor generate " + model + " --max-tokens 4", out, dir), 2);
  EXPECT_NE(read_text(dir.file("stderr.txt")).find("--prompt"), std::string::npos);
  EXPECT_EQ(shell(bin + "tailor generate " + model + " --prompt hi --temperature -1", out, dir), 1);
  EXPECT_NE(read_text(dir.file("stderr.txt")).find("temperature"), std::string::npos);
  std::ofstream(dir.file("bad.json")) << R"([{"role": "narrator", "content": "x"}])";
  EXPECT_EQ(shell(bin + "tailor generate " + model + " --messages " + dir.file("bad.json"), out, dir), 1);
  EXPECT_NE(read_text(dir.file("stderr.txt")).find("messages[0].role"), std::string::npos);
  // Logit biases and min-p from the command line.
  const std::string first = std::to_string(j["ids"][0].get<std::int32_t>());
  ASSERT_EQ(shell(bin + "tailor generate " + model + " --messages " + conversation +
                      " --max-tokens 4 --min-p 0.5 --logit-bias " + first + "=-100 --logit-bias 3=0.5 --output json",
                  out, dir),
            0)
      << read_text(dir.file("stderr.txt"));
  EXPECT_NE(Json::parse(out)["ids"][0], j["ids"][0]);
  for (const auto& [flags, code, says] :
       std::vector<std::tuple<std::string, int, std::string>>{{"--logit-bias 5", 2, "ID=BIAS"},
                                                              {"--logit-bias 5=x", 2, "expected a number"},
                                                              {"--logit-bias 5=1 --logit-bias 5=2", 2, "given twice"},
                                                              {"--logit-bias 5=150", 1, "[-100, 100]"},
                                                              {"--logit-bias 99999=1", 1, "outside the model's"},
                                                              {"--min-p 2", 1, "min-p"}}) {
    EXPECT_EQ(shell(bin + "tailor generate " + model + " --prompt hi " + flags, out, dir), code) << flags;
    EXPECT_NE(read_text(dir.file("stderr.txt")).find(says), std::string::npos)
        << flags << ": " << read_text(dir.file("stderr.txt"));
  }
  std::filesystem::create_directories(dir.file("empty"));
  EXPECT_EQ(shell(bin + "tailor generate " + dir.file("empty") + " --prompt hi", out, dir), 1);
  EXPECT_NE(read_text(dir.file("stderr.txt")).find("not a model folder"), std::string::npos);
}

// training.eval_prompts: answers at each evaluation, in events.jsonl; the
// last ones are what `tailor-runner generate` gives on the exported model,
// for plain text and for a chat job's user turn through its template.
TEST(GenerationTest, EvalPromptsAreAnsweredAtEachEvaluationAsTheExportedModelAnswers) {
  TempDir dir;
  const std::string bin = std::string(TAILOR_BINARY_DIR) + "/bin/";
  const std::string examples = std::string(TAILOR_SOURCE_DIR) + "/configs/examples/";
  struct Case {
    const char* spec;
    const char* prompt_flag;  // how `tailor-runner generate` is given the same prompt
  };
  for (const auto& [spec, flag] : {Case{"tiny-cpu.yaml", "--prompt"}, Case{"chat-cpu.yaml", "--messages"}}) {
    SCOPED_TRACE(spec);
    const std::string out = dir.file(std::string(spec) + ".run");
    std::string text;
    ASSERT_EQ(shell(bin + "tailor run " + examples + spec + " --out " + out +
                        " --set training.max_steps=4 --set training.eval_every=2"
                        " --set 'training.eval_prompts=[\"The cat\", \"Once upon a time\"]'"
                        " --set training.eval_max_tokens=12",
                    text, dir),
              0)
        << read_text(dir.file("stderr.txt"));
    std::vector<Json> generations;
    std::istringstream events(read_text(out + "/events.jsonl"));
    for (std::string line; std::getline(events, line);) {
      const Json e = Json::parse(line);
      if (e["event"] == "generation") generations.push_back(e);
    }
    ASSERT_EQ(generations.size(), 2u) << read_text(out + "/events.jsonl");
    EXPECT_EQ(generations[0]["step"], 2);
    EXPECT_EQ(generations[1]["step"], 4);
    const Json& last = generations[1]["answers"];
    ASSERT_EQ(last.size(), 2u);
    for (std::size_t i = 0; i < 2; ++i) {
      const std::string prompt = last[i]["prompt"];
      EXPECT_EQ(prompt, i == 0 ? "The cat" : "Once upon a time");
      EXPECT_LE(last[i]["tokens"].get<int>(), 12);
      std::string given = "\"" + prompt + "\"";
      if (std::string(flag) == "--messages") {
        std::ofstream(dir.file("turn.json")) << Json::array({{{"role", "user"}, {"content", prompt}}}).dump();
        given = dir.file("turn.json");
      }
      ASSERT_EQ(shell(bin + "tailor-runner generate " + out + " " + flag + " " + given +
                          " --max-tokens 12 --output json",
                      text, dir),
                0)
          << read_text(dir.file("stderr.txt"));
      const Json answer = Json::parse(text);
      EXPECT_EQ(answer["text"], last[i]["text"]) << prompt;
      EXPECT_EQ(answer["completion_tokens"], last[i]["tokens"]) << prompt;
      EXPECT_EQ(answer["finish_reason"] == "stop", last[i]["stopped"].get<bool>()) << prompt;
    }
  }
}

}  // namespace
}  // namespace tailor::runner
