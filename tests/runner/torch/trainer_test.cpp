// The training loop on a tiny model and corpus, in process: each test is a
// real run writing real files.
#include "runner/torch/trainer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <cstdlib>
#include <fstream>

#include "dsl/spec_loader.h"
#include "runner/data/dataset.h"
#include "runner/data/tokenizer.h"
#include "runner/torch/checkpoint.h"
#include "runner/torch/cuda_kernels.h"
#include "runner/torch/hf_checkpoint.h"
#include "runner/torch/model.h"
#include "runner/torch/tracking_allocator.h"
#include "tests/testing/temp_dir.h"

namespace tailor::runner {
namespace {

namespace fs = std::filesystem;
using tailor::testing::TempDir;

std::string corpus() {
  std::string text;
  const char* words[] = {"the tailor mends a coat", "a weaver folds the sails", "the miller counts apples",
                         "my neighbour paints the gate"};
  for (int i = 0; i < 60; ++i) text += std::string(words[i % 4]) + " by the river.\n\n";
  return text;
}

// A job over a 2-layer byte-level Llama, with --set style overrides.
RunConfig job(const TempDir& dir, std::vector<std::string> overrides, dsl::Precision precision, std::int64_t micro,
              std::int64_t accum, const std::string& data = "data: {train: data.txt, seq_len: 32}") {
  dir.write("data.txt", corpus());
  const std::string spec = std::string(R"(apiVersion: tailor/v1
kind: TrainingJob
name: unit
model:
  arch: {family: llama, layers: 2, hidden: 64, intermediate: 128, heads: 4, kv_heads: 2, vocab: 260, max_seq_len: 64}
)") + data + R"(
training: {global_batch_size: 8, max_steps: 12, lr: 3e-3, warmup_steps: 2, seed: 7}
)";
  dsl::LoadOptions opts;
  opts.overrides = std::move(overrides);
  const auto loaded = dsl::load_job_spec(dir.write("job.yaml", spec), opts);
  EXPECT_TRUE(loaded.ok()) << loaded.diagnostics.to_string();
  RunConfig cfg;
  cfg.spec = *loaded.spec;
  cfg.strategy.precision = precision;
  cfg.strategy.micro_batch_size = micro;
  cfg.strategy.grad_accumulation = accum;
  cfg.on_cpu = true;
  return cfg;
}

RunnerExit train_in(const RunConfig& cfg, const std::string& out, std::int64_t memory_limit = 0, bool resume = false,
             const std::string& device = "auto") {
  TrainOptions o;
  o.config = cfg;
  o.out_dir = out;
  o.memory_limit = memory_limit;
  o.resume = resume;
  o.device = device;
  o.quiet = true;
  return train(o);
}

std::vector<nlohmann::json> lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

std::vector<double> losses(const std::string& out) {
  std::vector<double> v;
  for (const auto& j : lines(out + "/metrics.jsonl")) v.push_back(j["loss"].get<double>());
  return v;
}

TEST(TrainerTest, LossFallsAndEveryArtifactIsWritten) {
  TempDir dir;
  const std::string out = dir.file("out");
  ASSERT_EQ(train_in(job(dir, {}, dsl::Precision::kBf16, 4, 2), out), RunnerExit::kOk);
  const auto l = losses(out);
  ASSERT_EQ(l.size(), 12u);
  EXPECT_LT(l.back(), l.front() * 0.7) << l.front() << " -> " << l.back();
  EXPECT_TRUE(fs::exists(out + "/model/config.json"));
  EXPECT_FALSE(fs::exists(out + "/model.pt"));  // no raw copy beside the Hugging Face folder
  EXPECT_FALSE(fs::exists(out + "/adapter"));
  const auto events = lines(out + "/events.jsonl");
  EXPECT_EQ(events.front()["event"], "start");
  EXPECT_EQ(events.back()["event"], "done");
  const auto m = lines(out + "/metrics.jsonl").front()["memory"];
  // bf16 weights, fp32 master copy, two fp32 moments.
  EXPECT_EQ(m["master_weights"].get<std::int64_t>(), 2 * m["weights"].get<std::int64_t>());
  EXPECT_EQ(m["optimizer_states"].get<std::int64_t>(), 4 * m["weights"].get<std::int64_t>());
  EXPECT_GT(m["activations"].get<std::int64_t>(), 0);
  EXPECT_GE(m["peak_bytes"].get<std::int64_t>(), m["allocated_bytes"].get<std::int64_t>());
  // A CPU has no datasheet peak in the catalog: no MFU, rather than one
  // against a guess.
  EXPECT_FALSE(lines(out + "/metrics.jsonl").front().contains("mfu"));
  EXPECT_FALSE(events.front().contains("peak_tflops"));
}

// Lion (strategy.optimizer: lion) trains with one fp32 momentum per
// parameter: its states are as large as the fp32 weights, half AdamW's.
TEST(TrainerTest, LionTrainsWithOneStateAsLargeAsTheWeights) {
  TempDir dir;
  const std::string out = dir.file("out");
  RunConfig cfg = job(dir, {"training.lr=1e-3"}, dsl::Precision::kFp32, 4, 2);
  cfg.strategy.optimizer = dsl::Optimizer::kLion;
  ASSERT_EQ(train_in(cfg, out), RunnerExit::kOk);
  const auto l = losses(out);
  ASSERT_EQ(l.size(), 12u);
  EXPECT_LT(l.back(), l.front() * 0.9) << l.front() << " -> " << l.back();
  const auto m = lines(out + "/metrics.jsonl").front()["memory"];
  EXPECT_EQ(m["optimizer_states"].get<std::int64_t>(), m["weights"].get<std::int64_t>());
  EXPECT_EQ(m["master_weights"].get<std::int64_t>(), 0);
}

// Prompt/completion pairs: the prompt is masked, so the eval loss counts
// completions only.
std::string pairs(int n, int offset) {
  const char* prompts[] = {"who mends the coat?", "who folds the sails?", "who counts apples?", "who paints the gate?"};
  const char* answers[] = {"the tailor by the river", "a weaver at dawn", "the miller, slowly", "my neighbour"};
  std::string out;
  for (int i = 0; i < n; ++i) {
    const int k = (i + offset) % 4;
    out += std::string(R"({"prompt": ")") + prompts[k] + R"(", "completion": " )" + answers[(k + i / 4) % 4] + "\"}\n";
  }
  return out;
}

RunConfig eval_job(const TempDir& dir, std::vector<std::string> overrides, bool with_eval) {
  dir.write("train.jsonl", pairs(40, 0));
  dir.write("eval.jsonl", pairs(10, 1));  // 10 documents: batches of 4, 4 and 2
  overrides.insert(overrides.end(), {"data.train=" + dir.file("train.jsonl"), "data.prompt_field=prompt",
                                     "data.completion_field=completion", "data.packing=false"});
  if (with_eval) overrides.push_back("data.eval=" + dir.file("eval.jsonl"));
  return job(dir, overrides, dsl::Precision::kFp32, 4, 2);
}

// The masked mean loss over eval.jsonl of the exported model, one document
// at a time, with log_softmax (not the runner's batcher or cross entropy);
// `masked` false counts the prompts' tokens too.
double reference_eval_loss(const RunConfig& cfg, const std::string& model_dir, bool masked) {
  CausalLM model(cfg.spec.model.arch, 0);
  EXPECT_TRUE(load_hf_weights(model, model_dir).is_ok());
  model->eval();
  torch::NoGradGuard no_grad;
  auto tok = data::make_tokenizer(cfg.spec.model);
  EXPECT_TRUE(tok.is_ok());
  auto docs = data::load_examples(cfg.spec.data.eval, cfg.spec.data, **tok);
  EXPECT_TRUE(docs.is_ok());
  double sum = 0;
  std::int64_t count = 0;
  for (const auto& d : *docs) {
    const auto n = static_cast<std::int64_t>(std::min<std::size_t>(d.tokens.size(), cfg.spec.data.seq_len + 1)) - 1;
    std::vector<std::int64_t> ids(d.tokens.begin(), d.tokens.begin() + n);
    ModelInput in;
    in.input_ids = torch::tensor(ids).unsqueeze(0);
    in.positions = torch::arange(n).unsqueeze(0);
    const auto logp = torch::log_softmax(model->logits(model->hidden_states(in), true).to(torch::kFloat64), -1)[0];
    for (std::int64_t t = 0; t < n; ++t) {
      if (masked && !d.trained[static_cast<std::size_t>(t + 1)]) continue;
      sum -= logp[t][d.tokens[static_cast<std::size_t>(t + 1)]].item<double>();
      ++count;
    }
  }
  return sum / static_cast<double>(count);
}

TEST(TrainerTest, EvalLossIsTheMaskedMeanOverTheEvalSetEveryNStepsAndAfterTheLast) {
  TempDir dir;
  const std::string out = dir.file("out");
  const RunConfig cfg = eval_job(dir, {"training.eval_every=4"}, true);
  ASSERT_EQ(train_in(cfg, out), RunnerExit::kOk);
  const auto metrics = lines(out + "/metrics.jsonl");
  ASSERT_EQ(metrics.size(), 12u);
  std::vector<std::int64_t> evaluated;
  for (const auto& m : metrics) {
    if (!m.contains("eval_loss")) continue;
    evaluated.push_back(m["step"].get<std::int64_t>());
    // Both as the metrics line rounds them (6 significant digits).
    const double perplexity = m["eval_perplexity"].get<double>();
    EXPECT_NEAR(perplexity, std::exp(m["eval_loss"].get<double>()), 1e-5 * perplexity);
    EXPECT_GT(m["eval_tokens"].get<std::int64_t>(), 0);
  }
  // The last step is a multiple of 4: evaluated once, not twice.
  EXPECT_EQ(evaluated, (std::vector<std::int64_t>{4, 8, 12}));
  std::vector<std::int64_t> events;
  for (const auto& e : lines(out + "/events.jsonl")) {
    if (e["event"] == "eval") events.push_back(e["step"].get<std::int64_t>());
  }
  EXPECT_EQ(events, evaluated);
  // Training lowers the eval loss too (the eval pairs are the training ones, reshuffled).
  EXPECT_LT(metrics[11]["eval_loss"].get<double>(), metrics[3]["eval_loss"].get<double>());
  const double masked = reference_eval_loss(cfg, out + "/model", true);
  const double unmasked = reference_eval_loss(cfg, out + "/model", false);
  EXPECT_NEAR(metrics[11]["eval_loss"].get<double>(), masked, 1e-4 * masked);
  EXPECT_GT(std::abs(masked - unmasked), 0.05) << "the prompts must weigh in the unmasked loss";
}

TEST(TrainerTest, EvaluationLeavesTrainingUnchangedAndWithoutEvalEveryRunsAtTheEnd) {
  TempDir dir;
  const std::string every = dir.file("every"), end = dir.file("end"), none = dir.file("none");
  ASSERT_EQ(train_in(eval_job(dir, {"training.eval_every=3"}, true), every), RunnerExit::kOk);
  ASSERT_EQ(train_in(eval_job(dir, {}, true), end), RunnerExit::kOk);
  ASSERT_EQ(train_in(eval_job(dir, {}, false), none), RunnerExit::kOk);
  EXPECT_EQ(losses(every), losses(none));
  EXPECT_EQ(losses(end), losses(none));
  auto evaluated = [&](const std::string& out) {
    std::vector<std::int64_t> steps;
    for (const auto& m : lines(out + "/metrics.jsonl")) {
      if (m.contains("eval_loss")) steps.push_back(m["step"].get<std::int64_t>());
    }
    return steps;
  };
  EXPECT_EQ(evaluated(every), (std::vector<std::int64_t>{3, 6, 9, 12}));
  EXPECT_EQ(evaluated(end), (std::vector<std::int64_t>{12}));
  EXPECT_TRUE(evaluated(none).empty());
  // The same weights at the end: the same eval loss.
  EXPECT_EQ(lines(every + "/metrics.jsonl")[11]["eval_loss"], lines(end + "/metrics.jsonl")[11]["eval_loss"]);
}

TEST(TrainerTest, OutOfMemoryIsItsOwnExitCodeAndReportsTheAllocation) {
  TempDir dir;
  const std::string out = dir.file("out");
  EXPECT_EQ(train_in(job(dir, {}, dsl::Precision::kFp32, 8, 1), out, 1 << 20), RunnerExit::kOutOfMemory);
  const auto events = lines(out + "/events.jsonl");
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["event"], "oom");
  EXPECT_GT(events.back()["requested_bytes"].get<std::int64_t>(), 0);
  EXPECT_EQ(events.back()["budget_bytes"].get<std::int64_t>(), 1 << 20);
  EXPECT_FALSE(fs::exists(out + "/model"));
  EXPECT_EQ(TrackingAllocator::install().budget(), 0);  // released for what follows
}

TEST(TrainerTest, ResumeReproducesTheUninterruptedRunExactly) {
  TempDir dir;
  const RunConfig cfg = job(dir, {"checkpoint.every_steps=5", "checkpoint.keep=5"}, dsl::Precision::kFp32, 4, 2);
  const std::string full = dir.file("full"), resumed = dir.file("resumed");
  ASSERT_EQ(train_in(cfg, full), RunnerExit::kOk);
  // A run that stopped after step 5: its folder holds only that checkpoint.
  fs::create_directories(resumed + "/checkpoints");
  fs::copy(full + "/checkpoints/step-000005", resumed + "/checkpoints/step-000005", fs::copy_options::recursive);
  ASSERT_EQ(train_in(cfg, resumed, 0, /*resume=*/true), RunnerExit::kOk);
  const auto a = losses(full), b = losses(resumed);
  ASSERT_EQ(b.size(), 7u);  // steps 6..12
  for (std::size_t i = 0; i < b.size(); ++i) EXPECT_EQ(a[i + 5], b[i]) << "step " << i + 6;
  EXPECT_EQ(lines(resumed + "/events.jsonl")[0]["event"], "resume");
}

std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Several datasets mixed (data.train a list, interleaved by weight): 50
// steps, a resume from their checkpoint and 50 more train exactly as 100
// steps in one go: the mix is rebuilt the same from its seed and the data
// position goes on where it stopped.
TEST(TrainerTest, ResumeOverMixedDatasetsReproducesTheUninterruptedRunBitForBit) {
  TempDir dir;
  std::string records;
  for (int i = 0; i < 40; ++i) records += "{\"text\": \"record " + std::to_string(i) + " of the second set\"}\n";
  dir.write("second.jsonl", records);
  const RunConfig cfg = job(dir, {"training.max_steps=100", "checkpoint.every_steps=50", "checkpoint.keep=2"},
                            dsl::Precision::kFp32, 4, 2,
                            "data:\n  train: [data.txt, {path: second.jsonl, weight: 3}]\n  mix: interleave\n"
                            "  mix_seed: 5\n  seq_len: 32");
  ASSERT_EQ(cfg.spec.data.sources.size(), 2u);
  const std::string full = dir.file("full"), resumed = dir.file("resumed");
  ASSERT_EQ(train_in(cfg, full), RunnerExit::kOk);
  const auto start = lines(full + "/events.jsonl")[0];
  EXPECT_EQ(start["data_mix"], "interleave");
  EXPECT_NE(start["data_mix_taken"].get<std::string>().find("second.jsonl: 40 examples -> 180 (75.0%)"),
            std::string::npos)
      << start["data_mix_taken"];
  fs::create_directories(resumed + "/checkpoints");
  fs::copy(full + "/checkpoints/step-000050", resumed + "/checkpoints/step-000050", fs::copy_options::recursive);
  ASSERT_EQ(train_in(cfg, resumed, 0, /*resume=*/true), RunnerExit::kOk);
  const auto a = losses(full), b = losses(resumed);
  ASSERT_EQ(a.size(), 100u);
  ASSERT_EQ(b.size(), 50u);
  for (std::size_t i = 0; i < b.size(); ++i) EXPECT_EQ(a[i + 50], b[i]) << "step " << i + 51;
  EXPECT_EQ(file_text(full + "/model/model.safetensors"), file_text(resumed + "/model/model.safetensors"));
  // The checkpoint says where the data stands; the resume repeats it.
  const auto state = nlohmann::json::parse(file_text(full + "/checkpoints/step-000050/state.json"));
  ASSERT_TRUE(state.contains("data")) << state.dump();
  const std::int64_t dataset = state["data"]["dataset"].get<std::int64_t>();
  EXPECT_TRUE(dataset == 0 || dataset == 1);
  EXPECT_GE(state["data"]["example"].get<std::int64_t>(), 0);
  EXPECT_LT(state["data"]["example"].get<std::int64_t>(), dataset == 0 ? 60 : 40);
  const auto resume = lines(resumed + "/events.jsonl")[0];
  EXPECT_EQ(resume["data_dataset"], dataset);
  EXPECT_EQ(resume["data_example"], state["data"]["example"]);
  // Other weights make another mix: the position would read other
  // examples, so the resume is refused rather than silently wrong.
  const RunConfig reweighted = job(dir, {"training.max_steps=100", "checkpoint.every_steps=50"}, dsl::Precision::kFp32,
                                   4, 2,
                                   "data:\n  train: [data.txt, {path: second.jsonl, weight: 2}]\n  mix: interleave\n"
                                   "  mix_seed: 5\n  seq_len: 32");
  const std::string other = dir.file("other");
  fs::create_directories(other + "/checkpoints");
  fs::copy(full + "/checkpoints/step-000050", other + "/checkpoints/step-000050", fs::copy_options::recursive);
  EXPECT_EQ(train_in(reweighted, other, 0, /*resume=*/true), RunnerExit::kBadInput);
  EXPECT_NE(file_text(other + "/events.jsonl").find("written over other data"), std::string::npos);
}

// Under LoRA a checkpoint holds what trains (the adapters, their optimizer
// states, the data position) and the base's fingerprint, never the frozen
// base: resuming reproduces the uninterrupted run, over the same base only.
// The job's output is the adapter; output.merge adds the merged model.
TEST(TrainerTest, LoraCheckpointsHoldOnlyTheAdaptersAndResumeOverTheSameBase) {
  TempDir dir;
  RunConfig cfg = job(dir, {"checkpoint.every_steps=5", "checkpoint.keep=5"}, dsl::Precision::kFp32, 4, 2);
  cfg.strategy.adapter = dsl::Adapter::kLora;
  cfg.strategy.lora_rank = 4;
  const std::string full = dir.file("full");
  ASSERT_EQ(train_in(cfg, full), RunnerExit::kOk);
  const std::string step5 = full + "/checkpoints/step-000005";
  auto checkpoint = load_checkpoint(step5);
  ASSERT_TRUE(checkpoint.is_ok()) << checkpoint.status().to_string();
  EXPECT_EQ(nlohmann::json::parse(file_text(step5 + "/state.json"))["params"], "trainable");
  EXPECT_FALSE(checkpoint->first.base_fingerprint.empty());
  std::int64_t held = 0;
  for (const torch::Tensor& t : checkpoint->second.params) {
    // Every tensor is an adapter matrix: A is (r, in), B is (out, r).
    EXPECT_TRUE(t.dim() == 2 && (t.size(0) == 4 || t.size(1) == 4)) << t.sizes();
    held += t.numel();
  }
  EXPECT_LT(held * 10, cfg.spec.model.arch.parameter_count());
  EXPECT_TRUE(fs::exists(full + "/adapter/adapter_model.safetensors"));
  EXPECT_FALSE(fs::exists(full + "/model"));  // output.merge defaults to false for adapters

  const std::string resumed = dir.file("resumed");
  fs::create_directories(resumed + "/checkpoints");
  fs::copy(step5, resumed + "/checkpoints/step-000005", fs::copy_options::recursive);
  ASSERT_EQ(train_in(cfg, resumed, 0, /*resume=*/true), RunnerExit::kOk);
  const auto a = losses(full), b = losses(resumed);
  ASSERT_EQ(b.size(), 7u);
  for (std::size_t i = 0; i < b.size(); ++i) EXPECT_EQ(a[i + 5], b[i]) << "step " << i + 6;
  EXPECT_EQ(file_text(resumed + "/adapter/adapter_model.safetensors"),
            file_text(full + "/adapter/adapter_model.safetensors"));

  // Another base (a random one from another seed): refused, named.
  RunConfig other = cfg;
  other.spec.training.seed = 8;
  const std::string elsewhere = dir.file("elsewhere");
  fs::create_directories(elsewhere + "/checkpoints");
  fs::copy(step5, elsewhere + "/checkpoints/step-000005", fs::copy_options::recursive);
  ASSERT_EQ(train_in(other, elsewhere, 0, /*resume=*/true), RunnerExit::kBadInput);
  const std::string why = lines(elsewhere + "/events.jsonl").back()["message"].get<std::string>();
  EXPECT_NE(why.find("was trained over other base weights (lm_head differs)"), std::string::npos) << why;

  // output.merge: true writes the merged model beside the adapter.
  RunConfig merged = cfg;
  merged.spec.output.merge = true;
  const std::string with_model = dir.file("merged");
  ASSERT_EQ(train_in(merged, with_model), RunnerExit::kOk);
  EXPECT_TRUE(fs::exists(with_model + "/model/config.json"));
  EXPECT_EQ(file_text(with_model + "/adapter/adapter_model.safetensors"),
            file_text(full + "/adapter/adapter_model.safetensors"));
}

TEST(TrainerTest, AccumulationEqualsOneBatchKTimesLarger) {
  TempDir dir;
  const std::string one = dir.file("one"), four = dir.file("four");
  ASSERT_EQ(train_in(job(dir, {"data.packing=false"}, dsl::Precision::kFp32, 8, 1), one), RunnerExit::kOk);
  ASSERT_EQ(train_in(job(dir, {"data.packing=false"}, dsl::Precision::kFp32, 2, 4), four), RunnerExit::kOk);
  const auto a = losses(one), b = losses(four);
  ASSERT_EQ(a.size(), b.size());
  // Dynamic padding differs per micro-batch; the token-normalised loss and
  // the update do not.
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4 * std::max(1.0, a[i])) << "step " << i + 1;
}

// Prompt/completion data is packed whole: the start event counts what
// became of the examples; a job whose every example is dropped is bad input.
TEST(TrainerTest, PromptCompletionJobsTrainOnWholeExamples) {
  TempDir dir;
  std::string pairs;
  for (int i = 0; i < 40; ++i) {  // 20 tokens, or 66 (truncated to 33, completion kept)
    pairs += "{\"prompt\": \"Q" + std::to_string(10 + i) + ": tool?\", \"completion\": \"" +
             (i % 5 == 0 ? "a needle and thread, then a hot iron to press the seam" : "a needle") + "\"}\n";
  }
  for (int i = 0; i < 2; ++i) {  // a prompt that fills the row: nothing to train on
    pairs += "{\"prompt\": \"" + std::string(40, 'q') + "\", \"completion\": \"yes\"}\n";
  }
  dir.write("pairs.jsonl", pairs);
  RunConfig cfg = job(dir,
                      {"data.train=" + dir.file("pairs.jsonl"), "data.prompt_field=prompt", "data.completion_field=completion",
                       "training.max_steps=3"},
                      dsl::Precision::kFp32, 4, 1);
  const std::string out = dir.file("out");
  ASSERT_EQ(train_in(cfg, out), RunnerExit::kOk);
  const auto start = lines(out + "/events.jsonl").front();
  EXPECT_EQ(start["packing"], "whole-examples");
  EXPECT_EQ(start["on_long_example"], "truncate");
  EXPECT_EQ(start["examples"], 40);
  EXPECT_EQ(start["truncated"], 8);
  EXPECT_EQ(start["dropped"], 2);
  EXPECT_GT(start["packing_efficiency"].get<double>(), 0.5);
  EXPECT_LE(start["packing_efficiency"].get<double>(), 1.0);
  const auto l = losses(out);
  ASSERT_EQ(l.size(), 3u);
  for (double v : l) EXPECT_TRUE(std::isfinite(v));

  cfg.spec.data.on_long_example = dsl::LongExample::kDrop;
  cfg.spec.data.seq_len = 8;
  EXPECT_EQ(train_in(cfg, dir.file("dropped")), RunnerExit::kBadInput);
  const std::string message = lines(dir.file("dropped") + "/events.jsonl").back()["message"].get<std::string>();
  EXPECT_NE(message.find("pairs.jsonl: every example was dropped at seq_len 8"), std::string::npos) << message;
}

// Conversations are rendered with the chat template and only the
// assistant's turns are trained (train_on: all trains more, so the first
// loss differs); the exported model carries the template.
TEST(TrainerTest, ChatJobsTrainTheAssistantTurnsAndExportTheTemplate) {
  TempDir dir;
  std::string chats;
  for (int i = 0; i < 30; ++i) {
    chats += R"({"messages": [{"role": "user", "content": "Q)" + std::to_string(i) +
             R"(: which tool?"}, {"role": "assistant", "content": ")" + (i % 2 ? "a needle" : "thread") + "\"}]}\n";
  }
  dir.write("chats.jsonl", chats);
  const std::string tmpl = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>\n{% endfor %}";
  dir.write("chat.jinja", tmpl);
  auto config = [&](const std::string& train_on, const std::string& on_bad_record = "error") {
    return job(dir,
               {"data.train=" + dir.file("chats.jsonl"), "data.chat=messages", "data.chat_template=" + dir.file("chat.jinja"),
                "data.train_on=" + train_on, "data.on_bad_record=" + on_bad_record, "data.seq_len=64",
                "training.max_steps=3"},
               dsl::Precision::kFp32, 4, 1);
  };
  const std::string out = dir.file("assistant");
  ASSERT_EQ(train_in(config("assistant"), out), RunnerExit::kOk);
  const auto start = lines(out + "/events.jsonl").front();
  EXPECT_EQ(start["packing"], "whole-examples");
  EXPECT_EQ(start["examples"], 30);
  EXPECT_EQ(start["truncated"], 0);
  ASSERT_EQ(train_in(config("all"), dir.file("all")), RunnerExit::kOk);
  const auto a = losses(out), b = losses(dir.file("all"));
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_GT(std::abs(a[0] - b[0]), 1e-3) << a[0] << " " << b[0];
  std::ifstream exported(out + "/model/chat_template.jinja");
  std::stringstream text;
  text << exported.rdbuf();
  EXPECT_EQ(text.str(), tmpl);
  std::ifstream config_file(out + "/model/tokenizer_config.json");
  const auto tokenizer_config = nlohmann::json::parse(config_file);
  EXPECT_EQ(tokenizer_config["chat_template"], tmpl);
  // Bad records skipped with data.on_bad_record: skip, counted in the start event.
  dir.write("chats.jsonl", chats + "{broken\n" + R"({"messages": [{"role": "user", "content": "no reply"}]})" + "\n");
  const RunConfig skipping = config("assistant", "skip");
  ASSERT_EQ(train_in(skipping, dir.file("skipping")), RunnerExit::kOk);
  const auto skip_start = lines(dir.file("skipping") + "/events.jsonl").front();
  EXPECT_EQ(skip_start["examples"], 30);
  EXPECT_EQ(skip_start["skipped_records"], 2);
  EXPECT_NE(skip_start["first_skipped"].get<std::string>().find("chats.jsonl:31:"), std::string::npos) << skip_start;
  // transformers renders with the exported template what training rendered.
  const std::string cmd = std::string(TAILOR_SOURCE_DIR) + "/.venv/bin/python -c \"import sys; "
                          "from transformers import AutoTokenizer; t = AutoTokenizer.from_pretrained(sys.argv[1]); "
                          "m = [{'role': 'user', 'content': 'Q0: which tool?'}, {'role': 'assistant', 'content': 'thread'}]; "
                          "sys.exit(0 if t.apply_chat_template(m, tokenize=False) == "
                          "'<|user|>Q0: which tool?<|end|>\\n<|assistant|>thread<|end|>\\n' else 1)\" " +
                          out + "/model";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

TEST(TrainerTest, HalfPrecisionsTrackFp32) {
  TempDir dir;
  const std::string f32 = dir.file("fp32"), b16 = dir.file("bf16"), pure = dir.file("pure"), f16 = dir.file("fp16");
  ASSERT_EQ(train_in(job(dir, {}, dsl::Precision::kFp32, 8, 1), f32), RunnerExit::kOk);
  ASSERT_EQ(train_in(job(dir, {}, dsl::Precision::kBf16, 8, 1), b16), RunnerExit::kOk);
  ASSERT_EQ(train_in(job(dir, {}, dsl::Precision::kPureBf16, 8, 1), pure), RunnerExit::kOk);
  // fp16 with dynamic loss scaling, on LibTorch 2.x's fp16 CPU kernels.
  ASSERT_EQ(train_in(job(dir, {}, dsl::Precision::kFp16, 8, 1), f16), RunnerExit::kOk);
  const auto a = losses(f32), b = losses(b16), c = losses(pure), h = losses(f16);
  ASSERT_EQ(h.size(), a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], b[i], 0.05 * a[i]) << "bf16 step " << i + 1;
    EXPECT_NEAR(a[i], c[i], 0.10 * a[i]) << "pure-bf16 step " << i + 1;
    EXPECT_NEAR(a[i], h[i], 0.02 * a[i]) << "fp16 step " << i + 1;
  }
  const auto pm = lines(pure + "/metrics.jsonl").front()["memory"];
  EXPECT_EQ(pm["master_weights"].get<std::int64_t>(), 0);
  EXPECT_EQ(pm["optimizer_states"].get<std::int64_t>(), 2 * pm["weights"].get<std::int64_t>());
}

TEST(TrainerTest, CheckpointsAreCompleteAndPrunedToKeep) {
  TempDir dir;
  const std::string out = dir.file("out");
  ASSERT_EQ(train_in(job(dir, {"checkpoint.every_steps=2", "checkpoint.keep=2"}, dsl::Precision::kBf16, 8, 1), out), RunnerExit::kOk);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(out + "/checkpoints")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"step-000010", "step-000012"}));
  for (const auto& n : names) EXPECT_TRUE(fs::exists(out + "/checkpoints/" + n + "/state.json"));
}

TEST(TrainerTest, ANewRunRefusesAFolderWithAnEarlierRunsCheckpoints) {
  TempDir dir;
  const RunConfig cfg = job(dir, {"checkpoint.every_steps=5"}, dsl::Precision::kBf16, 8, 1);
  const std::string out = dir.file("out");
  ASSERT_EQ(train_in(cfg, out), RunnerExit::kOk);
  const auto before = losses(out);
  EXPECT_EQ(train_in(cfg, out), RunnerExit::kBadInput);
  EXPECT_EQ(losses(out), before);  // nothing of the earlier run was touched
  EXPECT_TRUE(fs::exists(out + "/checkpoints/step-000012/state.json"));
}

// The device: a GPU plan trains on CUDA where LibTorch has it; where it has
// none the run is bad input saying why (it trained on the CPU before, with
// only an event saying so), unless the spec or the command line says cpu:
// then it trains there without the GPU's budget. Asking for CUDA that is not
// there is bad input too.
TEST(TrainerTest, GpuPlansWithoutCudaAreBadInputUnlessTheyAskForTheCpu) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  TempDir dir;
  RunConfig cfg = job(dir, {}, dsl::Precision::kBf16, 4, 2);
  cfg.on_cpu = false;
  cfg.budget_bytes = 1 << 20;  // a GPU's budget: enforced on a GPU, not on the CPU
  ASSERT_EQ(train_in(cfg, dir.file("auto"), /*memory_limit=*/-1), RunnerExit::kBadInput);
  const auto refused = lines(dir.file("auto") + "/events.jsonl").back();
  EXPECT_NE(refused["message"].get<std::string>().find("the plan is for GPUs but"), std::string::npos) << refused;
  EXPECT_NE(refused["message"].get<std::string>().find("resources.device: cpu"), std::string::npos) << refused;
  EXPECT_EQ(refused["exit_code"], 2);

  RunConfig on_cpu = cfg;
  on_cpu.spec.resources.device = dsl::TrainDevice::kCpu;
  ASSERT_EQ(train_in(on_cpu, dir.file("spec-cpu"), /*memory_limit=*/-1), RunnerExit::kOk);
  const auto start = lines(dir.file("spec-cpu") + "/events.jsonl").front();
  EXPECT_EQ(start["device"], "cpu");
  EXPECT_NE(start["device_reason"].get<std::string>().find("resources.device: cpu"), std::string::npos) << start;
  EXPECT_EQ(start["memory_limit_bytes"].get<std::int64_t>(), 0);
  ASSERT_EQ(train_in(cfg, dir.file("flag-cpu"), /*memory_limit=*/-1, false, "cpu"), RunnerExit::kOk);
  EXPECT_EQ(lines(dir.file("flag-cpu") + "/events.jsonl").front()["device"], "cpu");

  EXPECT_EQ(train_in(cfg, dir.file("cuda"), 0, false, "cuda"), RunnerExit::kBadInput);
  const auto last = lines(dir.file("cuda") + "/events.jsonl").back();
  EXPECT_NE(last["message"].get<std::string>().find("no CUDA"), std::string::npos);
  EXPECT_EQ(last["exit_code"], 2);
}

// Where LibTorch has CUDA the same job trains there, under the GPU's budget.
TEST(TrainerTest, GpuPlansTrainOnCudaWhereLibTorchHasIt) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  TempDir dir;
  RunConfig cfg = job(dir, {}, dsl::Precision::kBf16, 4, 2);
  cfg.on_cpu = false;
  cfg.budget_bytes = 1 << 20;
  ASSERT_EQ(train_in(cfg, dir.file("auto"), /*memory_limit=*/-1), RunnerExit::kOutOfMemory);
  const auto start = lines(dir.file("auto") + "/events.jsonl").front();
  EXPECT_EQ(start["device"], "cuda:0");
  EXPECT_EQ(start["memory_limit_bytes"].get<std::int64_t>(), 1 << 20);
  ASSERT_EQ(train_in(cfg, dir.file("cuda"), 0, false, "cuda"), RunnerExit::kOk);
  const auto l = losses(dir.file("cuda"));
  EXPECT_LT(l.back(), l.front() * 0.7) << l.front() << " -> " << l.back();
  EXPECT_GT(lines(dir.file("cuda") + "/metrics.jsonl").front()["memory"]["activations"].get<std::int64_t>(), 0);
  // A GPU the catalog knows: model FLOPs utilisation against its bf16 peak,
  // a fraction (a tiny model uses little of it).
  const auto started = lines(dir.file("cuda") + "/events.jsonl").front();
  if (started.contains("gpu_model")) {
    EXPECT_GT(started["peak_tflops"].get<double>(), 0);
    for (const auto& line : lines(dir.file("cuda") + "/metrics.jsonl")) {
      EXPECT_GT(line["mfu"].get<double>(), 0);
      EXPECT_LT(line["mfu"].get<double>(), 1);
    }
  }
}

// The project's CUDA kernels in a whole run (RMSNorm, RoPE, SwiGLU,
// cross-entropy, AdamW on a Llama in bf16): the same job with every kernel
// and with none follows the same losses within bf16's rounding, and the
// start event names the kernels in use.
TEST(TrainerTest, CudaKernelsTrainAsAtenOpsDo) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  TempDir dir;
  RunConfig cfg = job(dir, {}, dsl::Precision::kBf16, 4, 2);
  cfg.on_cpu = false;
  const KernelSet before = set_cuda_kernels(KernelSet());
  auto run = [&](const char* kernels, const std::string& out) {
    ::setenv(kCudaKernelsEnv, kernels, 1);
    const RunnerExit e = train_in(cfg, out, 0, false, "cuda");
    ::unsetenv(kCudaKernelsEnv);
    return e;
  };
  ASSERT_EQ(run("none", dir.file("aten")), RunnerExit::kOk);
  ASSERT_EQ(run("all", dir.file("fused")), RunnerExit::kOk);
  set_cuda_kernels(before);
  EXPECT_EQ(lines(dir.file("aten") + "/events.jsonl").front()["cuda_kernels"], "none");
  EXPECT_EQ(lines(dir.file("fused") + "/events.jsonl").front()["cuda_kernels"], describe_kernels(KernelSet().set()));
  const auto aten = losses(dir.file("aten")), fused = losses(dir.file("fused"));
  ASSERT_EQ(aten.size(), fused.size());
  // Step 1's loss comes before any update: forward rounding alone. Later
  // steps drift apart as bf16 rounding compounds; a wrong kernel moves them
  // far more than that.
  EXPECT_NEAR(fused[0], aten[0], 0.01 * std::abs(aten[0]));
  for (std::size_t i = 0; i < aten.size(); ++i) {
    EXPECT_NEAR(fused[i], aten[i], 0.05 * std::abs(aten[i]) + 1e-3) << "step " << i + 1;
  }
  EXPECT_LT(fused.back(), fused.front() * 0.7);
}

TEST(TrainerTest, BadInputsExitTwoWithAClearError) {
  TempDir dir;
  RunConfig cfg = job(dir, {}, dsl::Precision::kFp32, 8, 1);
  dir.write("empty.txt", "\n\n");
  RunConfig empty = cfg;
  empty.spec.data.train = dir.file("empty.txt");
  EXPECT_EQ(train_in(empty, dir.file("e")), RunnerExit::kBadInput);
  EXPECT_NE(lines(dir.file("e") + "/events.jsonl").back()["message"].get<std::string>().find("no documents"),
            std::string::npos);
  EXPECT_EQ(train_in(cfg, "/proc/tailor-cannot-write-here"), RunnerExit::kBadInput);
  // A damaged checkpoint, and none before it: not bad input (a retry
  // starts over), a failure naming it, the folder set aside.
  dir.write("c/checkpoints/step-000003/state.json", "{not json");
  EXPECT_EQ(train_in(cfg, dir.file("c"), 0, /*resume=*/true), RunnerExit::kFailure);
  const std::string message = lines(dir.file("c") + "/events.jsonl").back()["message"].get<std::string>();
  EXPECT_NE(message.find("corrupt state.json"), std::string::npos) << message;
  EXPECT_NE(message.find("every checkpoint"), std::string::npos) << message;
  EXPECT_TRUE(std::filesystem::exists(dir.file("c/checkpoints/damaged-step-000003/state.json")));
  // A preset without weights is bad input unless the spec says init: random.
  RunConfig preset = cfg;
  preset.spec.model.preset = "tiny-llama";
  preset.spec.model.init = dsl::ModelInit::kPretrained;
  EXPECT_EQ(train_in(preset, dir.file("p")), RunnerExit::kBadInput);
  EXPECT_NE(lines(dir.file("p") + "/events.jsonl").back()["message"].get<std::string>().find("has no weights here"),
            std::string::npos);
  // LoRA on a module the model does not have is bad input, named.
  RunConfig lora = cfg;
  lora.strategy.adapter = dsl::Adapter::kLora;
  lora.strategy.lora_rank = 4;
  lora.spec.strategy.lora.targets = {"qkv_proj"};
  EXPECT_EQ(train_in(lora, dir.file("l")), RunnerExit::kBadInput);
  EXPECT_NE(lines(dir.file("l") + "/events.jsonl").back()["message"].get<std::string>().find("qkv_proj"),
            std::string::npos);
  // A plan for two ranks trained as one process without RANK/WORLD_SIZE
  // (tailor-runner's main would have launched them).
  RunConfig ranks = cfg;
  ranks.strategy.num_gpus = 2;
  EXPECT_EQ(train_in(ranks, dir.file("r")), RunnerExit::kBadInput);
  EXPECT_NE(lines(dir.file("r") + "/events.jsonl").back()["message"].get<std::string>().find("WORLD_SIZE is 1"),
            std::string::npos);
  // A sequence longer than the model's context.
  RunConfig longer = cfg;
  longer.spec.data.seq_len = longer.spec.model.arch.max_seq_len + 1;
  EXPECT_EQ(train_in(longer, dir.file("s")), RunnerExit::kBadInput);
  EXPECT_NE(lines(dir.file("s") + "/events.jsonl").back()["message"].get<std::string>().find("max_seq_len"),
            std::string::npos);
}

}  // namespace
}  // namespace tailor::runner
