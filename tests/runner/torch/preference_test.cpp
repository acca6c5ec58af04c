// Preference training (training.method dpo, orpo, simpo), each test a real
// run: against TRL's DPOTrainer, ORPOTrainer and CPOTrainer on the same tiny
// model and pairs (dpo_reference.py in .venv), the reference switched off
// under LoRA, and the planner's memory estimate for each reference
// placement (and none) against what the run measured.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dsl/spec_loader.h"
#include "runner/data/batcher.h"
#include "runner/data/dataset.h"
#include "runner/data/tokenizer.h"
#include "runner/torch/inference_model.h"
#include "runner/torch/run.h"
#include "runner/torch/trainer.h"
#include "strategies/candidate.h"
#include "strategies/memory_model.h"
#include "tests/runner/torch/estimate_and_train.h"
#include "tests/testing/python_scripts.h"
#include "tests/testing/temp_dir.h"

namespace tailor::runner {
namespace {

using tailor::testing::TempDir;
using nlohmann::json;

std::vector<json> lines(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

std::string reference_script(const char* name = "dpo_reference.py") {
  return std::string(TAILOR_SOURCE_DIR) + "/tests/runner/torch/" + name;
}

// Runs dpo_reference.py (or `script`) with TRL imported once for the
// binary; its output goes to the test log on failure.
bool run_reference(const TempDir& dir, const std::string& args, const char* script = "dpo_reference.py") {
  static const std::vector<std::string> modules = {"torch", "transformers", "peft", "trl"};
  const ::testing::AssertionResult ok =
      tailor::testing::PythonScripts::shared(modules).run(reference_script(script), args, dir.file("reference.log"));
  if (!ok) ADD_FAILURE() << ok.message();
  return static_cast<bool>(ok);
}

RunConfig load_job(const TempDir& dir, const std::string& yaml, std::vector<std::string> overrides) {
  dsl::LoadOptions opts;
  opts.overrides = std::move(overrides);
  const auto loaded = dsl::load_job_spec(dir.write("job.yaml", yaml), opts);
  EXPECT_TRUE(loaded.ok()) << loaded.diagnostics.to_string();
  RunConfig cfg;
  if (!loaded.ok()) return cfg;
  cfg.spec = *loaded.spec;
  cfg.on_cpu = true;
  return cfg;
}

// A run on the CPU without a memory limit, quiet; `cache_dir` holds
// precomputed references' files (none: the run's default).
RunnerExit train_in(const RunConfig& cfg, const std::string& out, const std::string& cache_dir = "") {
  TrainOptions o;
  o.config = cfg;
  o.out_dir = out;
  o.memory_limit = 0;
  o.quiet = true;
  o.device = "cpu";
  if (!cache_dir.empty()) o.cache_dir = cache_dir;
  return train(o);
}

// A reward job's run of `steps` steps in `precision`, micro-batch 8, that
// trains to a finite loss (what the shorter cases check).
void expect_short_reward_run(RunConfig cfg, dsl::Precision precision, const std::string& out, std::size_t steps) {
  cfg.strategy.precision = precision;
  cfg.strategy.micro_batch_size = 8;
  cfg.strategy.grad_accumulation = 1;
  cfg.strategy.pairs = true;
  ASSERT_EQ(train_in(cfg, out), RunnerExit::kOk);
  const std::vector<json> got = lines(out + "/metrics.jsonl");
  ASSERT_EQ(got.size(), steps);
  EXPECT_TRUE(std::isfinite(got.back()["loss"].get<double>()));
}

// |ours - theirs| within `rel` of theirs, or of `floor` where theirs is
// near zero (rewards start at exactly 0).
// Returns the deviation in units of that scale (for the log).
double expect_close(double ours, double theirs, double rel, double floor, const std::string& what) {
  const double scale = std::max(std::abs(theirs), floor);
  EXPECT_LE(std::abs(ours - theirs), rel * scale) << what << ": tailor " << ours << ", trl " << theirs;
  return std::abs(ours - theirs) / scale;
}

// A pair step's loss, rewards, log-probabilities and accuracy against
// TRL's (the loss at `loss_floor`); the largest deviation, as expect_close.
double expect_pair_step(const json& ours, const json& theirs, double loss_floor, const std::string& at) {
  double worst = expect_close(ours["loss"], theirs["loss"], 1e-4, loss_floor, at + " loss");
  for (const char* key : {"rewards/chosen", "rewards/rejected", "rewards/margins"}) {
    worst = std::max(worst, expect_close(ours[key], theirs[key], 1e-4, 1e-2, at + " " + key));
  }
  for (const char* key : {"logps/chosen", "logps/rejected"}) {
    worst = std::max(worst, expect_close(ours[key], theirs[key], 1e-4, 1.0, at + " " + key));
  }
  EXPECT_NEAR(ours["rewards/accuracies"].get<double>(), theirs["rewards/accuracies"].get<double>(), 1e-9) << at;
  return worst;
}

// The job the TRL comparisons train: the folder's model, the 8 pairs, a
// full fine-tune in fp32 with AdamW at a constant lr, as the reference
// scripts configure TRL.
std::string trl_job(const std::string& model, const std::string& method) {
  return R"(apiVersion: tailor/v1
kind: TrainingJob
name: )" + method + R"(-trl
model: {path: )" + model + R"(}
data: {train: pairs.jsonl, seq_len: 128}
training: {method: )" + method + R"(, global_batch_size: 8, max_steps: 20, lr: 1e-3, scheduler: constant,
           warmup_steps: 0, weight_decay: 0, grad_clip: 1.0, seed: 42}
strategy: {precision: fp32, adapter: none, optimizer: adamw}
)";
}

// The same tiny Llama (transformers' save_pretrained), BPE tokenizer and 8
// pairs; full fine-tuning in fp32 with AdamW at a constant lr, every step the
// whole data, so the data order cannot differ; TRL makes its frozen copy of
// the model, Tailor its separate reference.
// ORPO and SimPO likewise against TRL's ORPOTrainer and CPOTrainer (SimPO:
// loss_type simpo, cpo_alpha 0, with and without label smoothing; and
// CPO-SimPO, cpo_alpha 1; and AlphaPO, alpha 0.25), without a reference.
TEST(PreferenceTest, DpoOrpoAndSimpoEqualTrlsTrainersOverTwentySteps) {
  TempDir dir;
  ASSERT_TRUE(run_reference(dir, "make " + dir.path().string()));
  const std::string yaml = trl_job("base", "dpo");
  struct Case {
    const char* loss;  // a dpo loss_type, or the method orpo or simpo
    std::int64_t micro, accum;
    const char* label_smoothing = nullptr;  // robust, exo_pair and simpo read it
    // The TRL run compared with, when not the same micro-batches: ORPO's
    // NLL is a per-token mean over TRL's micro-batch, over Tailor's whole
    // step, so Tailor's 4 x 2 equals TRL's 8 x 1.
    std::int64_t trl_micro = 0, trl_accum = 0;
    bool reference_free() const {
      return std::string(loss) == "orpo" || std::string(loss) == "simpo" || std::string(loss) == "cpo_simpo" ||
             std::string(loss) == "alphapo";
    }
    std::string trl_name() const {
      return std::string(loss) + "_" + std::to_string(trl_micro ? trl_micro : micro) + "x" +
             std::to_string(trl_accum ? trl_accum : accum);
    }
  };
  // Accumulation once (its loss is the mean of the micro-batches' means).
  const Case cases[] = {
      {"sigmoid", 8, 1},
      {"ipo", 4, 2},
      {"hinge", 8, 1},
      {"robust", 8, 1, "0.1"},
      {"exo_pair", 8, 1, "0.001"},
      {"nca_pair", 8, 1},
      {"bco_pair", 8, 1},
      {"sppo_hard", 8, 1},
      {"apo_zero", 8, 1},
      {"apo_down", 4, 2},
      {"simpo", 4, 2},
      {"simpo", 8, 1, "0.1"},
      {"cpo_simpo", 8, 1},
      {"alphapo", 8, 1},
      {"orpo", 8, 1},
      {"orpo", 4, 2, nullptr, 8, 1},
      // TRL's sigmoid_norm and DiscoPOP (discopop_tau 0.05), and the
      // f-divergences of f-DPO, each through a loss that reads them.
      {"sigmoid_norm", 8, 1},
      {"discopop", 8, 1},
      {"sigmoid+forward_kl", 8, 1},
      {"ipo+js_divergence", 4, 2},
      {"discopop+alpha_divergence", 8, 1},
      {"robust+js_divergence", 8, 1, "0.1"},
  };
  std::string args = "run " + dir.path().string() + " chat";
  for (const Case& c : cases) {
    if (c.trl_micro) continue;
    args += " " + std::string(c.loss) + ":" + std::to_string(c.micro) + ":" + std::to_string(c.accum);
    if (c.label_smoothing) args += std::string(":") + c.label_smoothing;
  }
  ASSERT_TRUE(run_reference(dir, args));
  // Conversational pairs: the folder's chat template renders the prompt
  // (with the generation prompt) and each conversation; the rows are the
  // ids DPOTrainer makes of them.
  {
    const RunConfig chat = load_job(dir, yaml, {"data.train=" + dir.file("chat_pairs.jsonl"), "data.chat=messages"});
    auto tok = data::make_tokenizer(chat.spec.model);
    ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
    auto setup = data::load_chat_setup(chat.spec.data, chat.spec.model.path);
    ASSERT_TRUE(setup.is_ok()) << setup.status().to_string();
    const auto rows = data::load_examples(chat.spec.data.train, chat.spec.data, **tok, &*setup);
    ASSERT_TRUE(rows.is_ok()) << rows.status().to_string();
    std::ifstream in(dir.file("chat_tokens.json"));
    const json trl = json::parse(in)["tokens"];
    ASSERT_EQ(rows->size(), 2 * trl.size());
    for (std::size_t p = 0; p < trl.size(); ++p) {
      const auto prompt = trl[p]["prompt_ids"].get<std::vector<std::int32_t>>();
      for (const auto& [which, row] : {std::pair{"chosen_ids", 2 * p}, std::pair{"rejected_ids", 2 * p + 1}}) {
        std::vector<std::int32_t> ids = prompt;
        const auto completion = trl[p][which].get<std::vector<std::int32_t>>();
        ids.insert(ids.end(), completion.begin(), completion.end());
        EXPECT_EQ((*rows)[row].tokens, ids) << "conversational pair " << p << " " << which;
        std::vector<std::uint8_t> trained(prompt.size(), 0);
        trained.resize(ids.size(), 1);
        EXPECT_EQ((*rows)[row].trained, trained) << "conversational pair " << p << " " << which;
      }
    }
  }
  for (const Case& c : cases) {
    const std::string name = std::string(c.loss) + "_" + std::to_string(c.micro) + "x" + std::to_string(c.accum);
    SCOPED_TRACE(name + " against TRL's " + c.trl_name());
    std::ifstream in(dir.file(c.trl_name() + ".json"));
    const json trl = json::parse(in);
    std::vector<std::string> overrides;
    if (std::string(c.loss) == "orpo") {
      overrides = {"training.method=orpo", "training.lambda=0.1"};
    } else if (std::string(c.loss) == "simpo") {
      overrides = {"training.method=simpo", "training.beta=2.0", "training.gamma=1.0"};
    } else if (std::string(c.loss) == "cpo_simpo") {
      // CPO's NLL beside SimPO: a per-token mean over TRL's micro-batch and
      // over Tailor's step, the same without accumulation.
      overrides = {"training.method=simpo", "training.beta=2.0", "training.gamma=1.0", "training.cpo_alpha=1.0"};
    } else if (std::string(c.loss) == "alphapo") {
      overrides = {"training.method=simpo", "training.beta=2.0", "training.gamma=1.0", "training.alpha=0.25"};
    } else {
      // LOSS or LOSS+F_DIVERGENCE (dpo_reference.py's name).
      const std::string loss = c.loss;
      const std::size_t plus = loss.find('+');
      overrides = {"training.loss_type=" + loss.substr(0, plus)};
      if (plus != std::string::npos) overrides.push_back("training.f_divergence_type=" + loss.substr(plus + 1));
    }
    if (c.label_smoothing) overrides.push_back(std::string("training.label_smoothing=") + c.label_smoothing);
    RunConfig cfg = load_job(dir, yaml, overrides);
    // The rows are TRL's: prompt ids (its BOS first) and completion ids (EOS last).
    auto tok = data::make_tokenizer(cfg.spec.model);
    ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
    const auto rows = data::load_examples(cfg.spec.data.train, cfg.spec.data, **tok);
    ASSERT_TRUE(rows.is_ok()) << rows.status().to_string();
    ASSERT_EQ(rows->size(), 2 * trl["tokens"].size());
    for (std::size_t p = 0; p < trl["tokens"].size(); ++p) {
      const json& t = trl["tokens"][p];
      for (const auto& [which, row] : {std::pair{"chosen_ids", 2 * p}, std::pair{"rejected_ids", 2 * p + 1}}) {
        std::vector<std::int32_t> ids = t["prompt_ids"].get<std::vector<std::int32_t>>();
        for (std::int32_t id : t[which].get<std::vector<std::int32_t>>()) ids.push_back(id);
        EXPECT_EQ((*rows)[row].tokens, ids) << "pair " << p << " " << which;
      }
    }
    cfg.strategy.precision = dsl::Precision::kFp32;
    cfg.strategy.micro_batch_size = c.micro;
    cfg.strategy.grad_accumulation = c.accum;
    cfg.strategy.pairs = true;
    cfg.strategy.reference = c.reference_free() ? dsl::Reference::kNone : dsl::Reference::kSeparate;
    const std::string out = dir.file(name);
    ASSERT_EQ(train_in(cfg, out), RunnerExit::kOk);
    const std::vector<json> ours = lines(out + "/metrics.jsonl");
    const json& theirs = trl["steps"];
    ASSERT_EQ(ours.size(), 20u);
    ASSERT_EQ(theirs.size(), 20u);
    double worst = 0;
    // A loss that falls by orders of magnitude (sppo_hard: 50 to 0.09) keeps
    // the rounding of its early, large steps: its floor is a hundredth of
    // the first step's loss. sppo_hard's is a sum of two squares, each
    // (log-ratio - 1/(2 beta))^2 = 25 at the start, that cancel towards 0:
    // its rounding is its terms', and an fp32 kernel of another CPU (an
    // Intel Xeon against the AMD EPYC the floor was set on) moves it 7e-5,
    // 3e-6 of a term, while its rewards and log-probabilities stay within
    // 1e-4 of TRL's: its floor is a fiftieth.
    const double first = std::abs(theirs[0]["loss"].get<double>());
    const double loss_floor = std::max(1e-2, (std::string(c.loss) == "sppo_hard" ? 2e-2 : 1e-2) * first);
    for (std::size_t k = 0; k < 20; ++k) {
      const std::string at = name + " step " + std::to_string(k + 1);
      worst = std::max(worst, expect_pair_step(ours[k], theirs[k], loss_floor, at));
      if (std::string(c.loss) == "cpo_simpo") {
        worst = std::max(worst, expect_close(ours[k]["nll_loss"], theirs[k]["nll_loss"], 1e-4, 1e-2, at + " nll_loss"));
      }
      if (std::string(c.loss) == "orpo") {
        for (const char* key : {"nll_loss", "log_odds_ratio", "log_odds_chosen"}) {
          worst = std::max(worst, expect_close(ours[k][key], theirs[k][key], 1e-4, 1e-2, at + " " + key));
        }
      }
    }
    // Learning happened, the same way.
    EXPECT_LT(ours.back()["loss"].get<double>(), ours.front()["loss"].get<double>());
    std::printf("%s: 20 steps, largest deviation from TRL %.2e of the value (loss %.6f -> %.6f)\n", name.c_str(), worst,
                ours.front()["loss"].get<double>(), ours.back()["loss"].get<double>());
  }
}

// The documents (2p and 2p + 1: pair p's chosen and rejected rows) of each
// row of `b`, matched by their tokens.
std::vector<std::size_t> documents_of(const data::Batch& b, const std::vector<data::Example>& docs) {
  std::vector<std::size_t> out;
  for (std::int64_t r = 0; r < b.rows; ++r) {
    const std::int64_t len = b.row_length(r);
    const auto from = b.inputs.begin() + r * b.seq_len;
    std::vector<std::int32_t> seq(from, from + len);
    seq.push_back(b.targets[static_cast<std::size_t>(r * b.seq_len + len - 1)]);
    const auto it = std::find_if(docs.begin(), docs.end(), [&](const data::Example& e) { return e.tokens == seq; });
    EXPECT_NE(it, docs.end()) << "row " << r << " is no document";
    out.push_back(it == docs.end() ? 0 : static_cast<std::size_t>(it - docs.begin()));
  }
  return out;
}

// A KTO job trained in fp32 as the TRL comparisons configure TRL (the
// reference a frozen copy), at micro x accum; its metrics.jsonl lines
// (none, and a test failure, when the run fails).
std::vector<json> train_kto(RunConfig cfg, const std::string& loss, std::int64_t micro, std::int64_t accum,
                            bool unpaired, const std::string& out) {
  cfg.strategy.precision = dsl::Precision::kFp32;
  cfg.strategy.micro_batch_size = micro;
  cfg.strategy.grad_accumulation = accum;
  cfg.strategy.pairs = true;
  cfg.strategy.unpaired = unpaired;
  cfg.strategy.reference = dsl::Reference::kSeparate;
  cfg.strategy.kl_rows = loss == "kto";
  EXPECT_EQ(train_in(cfg, out), RunnerExit::kOk);
  return lines(out + "/metrics.jsonl");
}

// A KTO step's kl against TRL's where the loss reads one (kto; a
// difference of summed log-probabilities, so at their scale), noting the
// largest; none under apo_zero_unpaired. The deviation, as expect_close.
double expect_kl(const json& ours, const json& theirs, const std::string& loss, const std::string& at,
                 double& largest_kl) {
  if (loss != "kto") {
    EXPECT_FALSE(ours.contains("kl")) << at;
    return 0.0;
  }
  largest_kl = std::max(largest_kl, ours["kl"].get<double>());
  return expect_close(ours["kl"], theirs["kl"], 1e-4, 1.0, at + " kl");
}

// KTO on the same model and pairs, each pair's chosen completion a
// desirable example and its rejected one an undesirable example, against
// TRL's KTOTrainer fed the same rows in Tailor's order (the batcher's,
// drawn here as the run draws it): a micro-batch's KL rows pair each prompt
// with the previous row's completion, so here the order matters. kto's KL
// estimate over 16 rows (below zero at every step here, so clamped to 0:
// the loss is then apo_zero_unpaired's) and over 4 (above zero from step 6),
// and apo_zero_unpaired (none), with the reference a frozen copy.
TEST(PreferenceTest, KtoEqualsTrlsKtoTrainerOverTwentySteps) {
  TempDir dir;
  ASSERT_TRUE(run_reference(dir, "make " + dir.path().string()));
  double largest_kl = 0;
  struct Case {
    const char* loss;
    std::int64_t micro, accum;
  };
  for (const Case& c : {Case{"kto", 8, 1}, Case{"kto", 2, 4}, Case{"apo_zero_unpaired", 4, 2}}) {
    const std::string name =
        std::string("kto_") + c.loss + "_" + std::to_string(c.micro) + "x" + std::to_string(c.accum);
    SCOPED_TRACE(name);
    RunConfig cfg = load_job(dir, trl_job("base", "kto"), {std::string("training.loss_type=") + c.loss});
    auto tok = data::make_tokenizer(cfg.spec.model);
    ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
    const auto docs = data::load_examples(cfg.spec.data.train, cfg.spec.data, **tok);
    ASSERT_TRUE(docs.is_ok()) << docs.status().to_string();
    auto batcher = data::make_batcher(data::TokenStore::from_examples(*docs), cfg.spec.data, c.micro,
                                      static_cast<std::uint64_t>(cfg.spec.training.seed), (*tok)->pad_id());
    ASSERT_TRUE(batcher.is_ok()) << batcher.status().to_string();
    json rows = json::array();
    for (std::int64_t k = 0; k < 20 * c.accum; ++k) {
      for (const std::size_t d : documents_of(batcher->next(), *docs))
        rows.push_back({d / 2, d % 2 == 0});
    }
    const std::string order =
        dir.write(name + "_order.json",
                  json{{"loss_type", c.loss}, {"micro", c.micro}, {"accum", c.accum}, {"rows", rows}}.dump());
    ASSERT_TRUE(run_reference(dir, "kto " + dir.path().string() + " " + order + " " + dir.file(name + ".json")));
    std::ifstream in(dir.file(name + ".json"));
    const json theirs = json::parse(in)["steps"];

    const std::vector<json> ours = train_kto(cfg, c.loss, c.micro, c.accum, /*unpaired=*/false, dir.file(name));
    ASSERT_EQ(ours.size(), 20u);
    ASSERT_EQ(theirs.size(), 20u);
    double worst = 0;
    for (std::size_t k = 0; k < 20; ++k) {
      const std::string at = name + " step " + std::to_string(k + 1);
      worst = std::max(worst, expect_close(ours[k]["loss"], theirs[k]["loss"], 1e-4, 1e-2, at + " loss"));
      for (const char* key : {"rewards/chosen", "rewards/rejected", "rewards/margins"}) {
        worst = std::max(worst, expect_close(ours[k][key], theirs[k][key], 1e-4, 1e-2, at + " " + key));
      }
      for (const char* key : {"logps/chosen", "logps/rejected"}) {
        worst = std::max(worst, expect_close(ours[k][key], theirs[k][key], 1e-4, 1.0, at + " " + key));
      }
      worst = std::max(worst, expect_kl(ours[k], theirs[k], c.loss, at, largest_kl));
    }
    EXPECT_LT(ours.back()["loss"].get<double>(), ours.front()["loss"].get<double>());
    std::printf("%s: 20 steps, largest deviation from TRL %.2e of the value (loss %.6f -> %.6f)\n", name.c_str(), worst,
                ours.front()["loss"].get<double>(), ours.back()["loss"].get<double>());
  }
  // The estimate was compared where it moves the loss.
  EXPECT_GT(largest_kl, 0.1);
}

// KTO on unpaired examples (data.label_field): dpo_reference.py's 12
// labelled completions, 8 desirable and 4 undesirable, so micro-batches mix
// the kinds unevenly (some have none of one). Each against TRL's KTOTrainer
// on the same records in the order Tailor's batcher draws them: kto with a
// micro-batch of 6 and its KL estimate, apo_zero_unpaired at 4, and kto at
// 2 x 3 with the desirable completions weighed 0.5. TRL's rewards and logps
// are the means of each kind over a micro-batch, averaged over the step's
// micro-batches; Tailor's over the step's rows of that kind (what any plan
// of the same global batch reports alike), so they are compared without
// accumulation and the loss, kl and gradient norm always. Then the
// conversational records' tokens against KTOTrainer's.
TEST(PreferenceTest, KtoOnLabelledCompletionsEqualsTrlsKtoTrainer) {
  TempDir dir;
  ASSERT_TRUE(run_reference(dir, "make " + dir.path().string()));
  std::vector<json> records;
  {
    std::ifstream in(dir.file("feedback.jsonl"));
    for (std::string line; std::getline(in, line);)
      records.push_back(json::parse(line));
  }
  ASSERT_EQ(records.size(), 12u);
  struct Case {
    const char* loss;
    std::int64_t micro, accum;
    double desirable_weight;
  };
  double largest_kl = 0;
  bool a_step_without_undesirable = false;
  for (const Case& c : {Case{"kto", 6, 1, 1.0}, Case{"apo_zero_unpaired", 4, 1, 1.0}, Case{"kto", 2, 3, 0.5}}) {
    const std::string name =
        std::string("labelled_") + c.loss + "_" + std::to_string(c.micro) + "x" + std::to_string(c.accum);
    SCOPED_TRACE(name);
    char weight[16];
    std::snprintf(weight, sizeof weight, "%g", c.desirable_weight);
    RunConfig cfg = load_job(dir, trl_job("base", "kto"),
                             {std::string("training.loss_type=") + c.loss, "data.train=" + dir.file("feedback.jsonl"),
                              "data.label_field=label", std::string("training.desirable_weight=") + weight,
                              "training.global_batch_size=" + std::to_string(c.micro * c.accum)});
    ASSERT_TRUE(dsl::is_labelled(cfg.spec.data));
    auto tok = data::make_tokenizer(cfg.spec.model);
    ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
    const auto docs = data::load_examples(cfg.spec.data.train, cfg.spec.data, **tok);
    ASSERT_TRUE(docs.is_ok()) << docs.status().to_string();
    ASSERT_EQ(docs->size(), records.size());  // one row a record
    auto batcher = data::make_batcher(data::TokenStore::from_examples(*docs), cfg.spec.data, c.micro,
                                      static_cast<std::uint64_t>(cfg.spec.training.seed), (*tok)->pad_id());
    ASSERT_TRUE(batcher.is_ok()) << batcher.status().to_string();
    json rows = json::array();
    for (std::int64_t k = 0; k < 20 * c.accum; ++k) {
      for (const std::size_t d : documents_of(batcher->next(), *docs))
        rows.push_back(records[d]);
    }
    const std::string order = dir.write(name + "_order.json", json{{"loss_type", c.loss},
                                                                   {"micro", c.micro},
                                                                   {"accum", c.accum},
                                                                   {"desirable_weight", c.desirable_weight},
                                                                   {"rows", rows}}
                                                                  .dump());
    ASSERT_TRUE(run_reference(dir, "kto " + dir.path().string() + " " + order + " " + dir.file(name + ".json")));
    std::ifstream in(dir.file(name + ".json"));
    const json theirs = json::parse(in)["steps"];

    // What the planner decides of this spec: one row an example.
    strategies::Hardware hw;
    hw.host_memory = Bytes::gib(8);
    hw.cpu = strategies::cpu_device(hw.host_memory);
    const strategies::Candidate planned = strategies::evaluate(cfg.spec, hw, {}, {});
    EXPECT_TRUE(planned.strategy.pairs && planned.strategy.unpaired);
    EXPECT_EQ(planned.strategy.rows_per_sequence(), 1);
    const std::vector<json> ours = train_kto(cfg, c.loss, c.micro, c.accum, /*unpaired=*/true, dir.file(name));
    ASSERT_EQ(ours.size(), 20u);
    ASSERT_EQ(theirs.size(), 20u);
    double worst = 0;
    for (std::size_t k = 0; k < 20; ++k) {
      const std::string at = name + " step " + std::to_string(k + 1);
      worst = std::max(worst, expect_close(ours[k]["loss"], theirs[k]["loss"], 1e-4, 1e-2, at + " loss"));
      worst =
          std::max(worst, expect_close(ours[k]["grad_norm"], theirs[k]["grad_norm"], 1e-4, 1e-3, at + " grad_norm"));
      EXPECT_FALSE(ours[k].contains("rewards/accuracies")) << at;
      if (c.accum == 1) {
        // A kind the step lacks has no mean, in either.
        for (const char* key :
             {"rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen", "logps/rejected"}) {
          ASSERT_EQ(ours[k].contains(key), theirs[k].contains(key)) << at << " " << key;
          if (!theirs[k].contains(key)) continue;
          const double floor = std::string(key).starts_with("logps") ? 1.0 : 1e-2;
          worst = std::max(worst, expect_close(ours[k][key], theirs[k][key], 1e-4, floor, at + " " + key));
        }
        a_step_without_undesirable = a_step_without_undesirable || !theirs[k].contains("rewards/rejected");
      }
      worst = std::max(worst, expect_kl(ours[k], theirs[k], c.loss, at, largest_kl));
    }
    EXPECT_LT(ours.back()["loss"].get<double>(), ours.front()["loss"].get<double>());
    std::printf("%s: 20 steps, largest deviation from TRL %.2e of the value (loss %.6f -> %.6f)\n", name.c_str(), worst,
                ours.front()["loss"].get<double>(), ours.back()["loss"].get<double>());
  }
  EXPECT_GT(largest_kl, 0.1);               // the estimate moved the loss somewhere
  EXPECT_TRUE(a_step_without_undesirable);  // and a step without one kind was compared

  // Conversations: each record's row is the ids KTOTrainer makes of it,
  // trained from where its prompt (with the generation prompt) ends.
  ASSERT_TRUE(run_reference(dir, "kto_chat_tokens " + dir.path().string()));
  const RunConfig chat =
      load_job(dir, trl_job("base", "kto"),
               {"data.train=" + dir.file("chat_feedback.jsonl"), "data.chat=messages", "data.label_field=label"});
  auto tok = data::make_tokenizer(chat.spec.model);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  auto setup = data::load_chat_setup(chat.spec.data, chat.spec.model.path);
  ASSERT_TRUE(setup.is_ok()) << setup.status().to_string();
  const auto loaded = data::tokenize_file(chat.spec.data.train, chat.spec.data, **tok, &*setup);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  std::ifstream in(dir.file("kto_chat_tokens.json"));
  const json trl = json::parse(in)["tokens"];
  const data::TokenStore& store = *loaded;
  ASSERT_EQ(store.documents(), trl.size());
  for (std::size_t d = 0; d < trl.size(); ++d) {
    std::vector<std::int32_t> ids = trl[d]["prompt_ids"].get<std::vector<std::int32_t>>();
    const std::size_t prompt = ids.size();
    const auto completion = trl[d]["completion_ids"].get<std::vector<std::int32_t>>();
    ids.insert(ids.end(), completion.begin(), completion.end());
    const auto tokens = store.tokens(d);
    EXPECT_EQ(std::vector<std::int32_t>(tokens.begin(), tokens.end()), ids) << "record " << d;
    std::vector<std::uint8_t> trained(prompt, 0);
    trained.resize(ids.size(), 1);
    const auto flags = store.trained(d);
    EXPECT_EQ(std::vector<std::uint8_t>(flags.begin(), flags.end()), trained) << "record " << d;
    EXPECT_EQ(store.value(d), trl[d]["label"].get<bool>() ? 1.0f : 0.0f) << "record " << d;
  }
}

std::string lora_job() {
  return R"(apiVersion: tailor/v1
kind: TrainingJob
name: dpo-lora
model:
  arch: {family: llama, layers: 2, hidden: 64, intermediate: 128, heads: 4, kv_heads: 2, vocab: 260, max_seq_len: 64}
data: {train: pairs.jsonl, seq_len: 64}
training: {method: dpo, beta: 0.5, global_batch_size: 4, max_steps: 12, lr: 1e-2, scheduler: constant, seed: 7}
strategy: {adapter: lora, lora: {r: 4, alpha: 8, dropout: 0}}
)";
}

// Short pairs, or (`fill`) pairs whose rows are all cut at seq_len, as the
// planner's estimate assumes of unpacked rows.
void write_pairs(const TempDir& dir, bool fill = false) {
  std::string pairs;
  const char* good[] = {"a warm coat", "a sharp needle", "blue thread", "a wooden spool"};
  const std::string more = fill ? ", then a warm coat and a sharp needle and blue thread on a wooden spool" : "";
  for (int i = 0; i < 8; ++i) {
    pairs += R"({"prompt": "Q)" + std::to_string(i) + R"(: what mends?\n", "chosen": ")" + good[i % 4] + more +
             R"(", "rejected": "nothing at all)" + (fill ? ", nothing at all, nothing at all, nothing at all, nothing" : "") +
             "\"}\n";
  }
  dir.write("pairs.jsonl", pairs);
}

// lora_job() with the pairs as data.eval every 6 steps, in fp32, 2 pairs x
// 2, LoRA r4, the reference the adapters switched off.
RunConfig lora_pairs_job(const TempDir& dir, std::vector<std::string> overrides) {
  overrides.push_back("data.eval=" + dir.file("pairs.jsonl"));
  overrides.push_back("training.eval_every=6");
  RunConfig cfg = load_job(dir, lora_job(), std::move(overrides));
  cfg.strategy.precision = dsl::Precision::kFp32;
  cfg.strategy.micro_batch_size = 2;
  cfg.strategy.grad_accumulation = 2;
  cfg.strategy.adapter = dsl::Adapter::kLora;
  cfg.strategy.lora_rank = 4;
  cfg.strategy.pairs = true;
  cfg.strategy.reference = dsl::Reference::kAdapterOff;
  return cfg;
}

// LoRA's reference is the base with the adapters off: at step 1 the adapters
// are zero, so the model is its own reference, every reward is 0 and the
// sigmoid loss is exactly log 2; training then separates the pairs.
TEST(PreferenceTest, UnderLoraTheReferenceIsTheBaseWithTheAdaptersOff) {
  TempDir dir;
  write_pairs(dir);
  RunConfig cfg = lora_pairs_job(dir, {});
  const std::string out = dir.file("out");
  ASSERT_EQ(train_in(cfg, out), RunnerExit::kOk);
  const std::vector<json> steps = lines(out + "/metrics.jsonl");
  ASSERT_EQ(steps.size(), 12u);
  EXPECT_NEAR(steps[0]["loss"].get<double>(), std::log(2.0), 1e-6);
  EXPECT_EQ(steps[0]["rewards/chosen"].get<double>(), 0.0);
  EXPECT_EQ(steps[0]["rewards/margins"].get<double>(), 0.0);
  EXPECT_LT(steps.back()["loss"].get<double>(), 0.5 * std::log(2.0));
  EXPECT_EQ(steps.back()["rewards/accuracies"].get<double>(), 1.0);
  EXPECT_GT(steps.back()["rewards/margins"].get<double>(), 0.0);
  // The evaluation scores the pairs the same way, without a perplexity.
  ASSERT_TRUE(steps.back().contains("eval_loss"));
  EXPECT_FALSE(steps.back().contains("eval_perplexity"));
  EXPECT_EQ(steps.back()["eval_rewards/accuracies"].get<double>(), 1.0);
  EXPECT_EQ(steps.back()["eval_tokens"].get<std::int64_t>(), 8);  // pairs
  // The adapters are the job's output, as for supervised training.
  EXPECT_TRUE(std::ifstream(out + "/adapter/adapter_model.safetensors").good());
}

// DPO from an adapter (model.adapter, as after a supervised LoRA run): the
// reference is the model the job starts from, the base with that adapter
// frozen beside the trained copy (strategy.reference separate, the
// planner's choice), as TRL's DPOTrainer copies a PeftModel's adapter into
// a frozen "ref" adapter: 20 steps equal TRL's. The copy is the adapter's
// size, estimated and measured; adapter_off would score against the base
// alone (its first rewards are not zero).
TEST(PreferenceTest, FromAnAdapterTheReferenceIsThatAdapterFrozenAsTrlCopiesIt) {
  TempDir dir;
  ASSERT_TRUE(run_reference(dir, "make " + dir.path().string()));
  ASSERT_TRUE(run_reference(dir, "peft " + dir.path().string() + " " + dir.file("peft_ref.json")));
  std::ifstream in(dir.file("peft_ref.json"));
  const json theirs = json::parse(in)["steps"];
  const std::vector<std::string> from_adapter = {"model.adapter=" + dir.file("start_adapter"), "strategy.adapter=lora",
                                                 "strategy.lora.dropout=0"};
  RunConfig cfg = load_job(dir, trl_job("base", "dpo"), from_adapter);
  strategies::Strategy s;
  s.precision = dsl::Precision::kFp32;
  s.micro_batch_size = 8;
  s.adapter = dsl::Adapter::kLora;
  s.lora_rank = 4;
  EXPECT_EQ(strategies::reference_for(cfg.spec, s), dsl::Reference::kSeparate);
  cfg.strategy.precision = dsl::Precision::kFp32;
  cfg.strategy.micro_batch_size = 8;
  cfg.strategy.grad_accumulation = 1;
  cfg.strategy.adapter = dsl::Adapter::kLora;
  cfg.strategy.lora_rank = 4;
  cfg.strategy.pairs = true;
  cfg.strategy.reference = dsl::Reference::kSeparate;
  ASSERT_EQ(train_in(cfg, dir.file("separate")), RunnerExit::kOk);
  const std::vector<json> ours = lines(dir.file("separate") + "/metrics.jsonl");
  ASSERT_EQ(ours.size(), 20u);
  ASSERT_EQ(theirs.size(), 20u);
  EXPECT_EQ(ours[0]["rewards/chosen"].get<double>(), 0.0);  // the policy is its reference
  double worst = 0;
  for (std::size_t k = 0; k < 20; ++k) {
    const std::string at = "step " + std::to_string(k + 1);
    worst = std::max(worst, expect_close(ours[k]["loss"], theirs[k]["loss"], 1e-4, 1e-2, at + " loss"));
    for (const char* key : {"rewards/chosen", "rewards/rejected", "rewards/margins"}) {
      worst = std::max(worst, expect_close(ours[k][key], theirs[k][key], 1e-4, 1e-2, at + " " + key));
    }
    for (const char* key : {"logps/chosen", "logps/rejected"}) {
      worst = std::max(worst, expect_close(ours[k][key], theirs[k][key], 1e-4, 1.0, at + " " + key));
    }
  }
  EXPECT_LT(ours.back()["loss"].get<double>(), ours.front()["loss"].get<double>());
  std::printf("dpo from an adapter: 20 steps, largest deviation from TRL with a 'ref' adapter %.2e of the value\n",
              worst);
  // The frozen copy is A and B of every adapted linear in fp32: what the
  // measured weights hold beside adapter_off's, and what the estimate adds.
  const RunConfig two = load_job(dir, trl_job("base", "dpo"), [&] {
    std::vector<std::string> o = from_adapter;
    o.push_back("training.max_steps=1");
    return o;
  }());
  const auto r = testing::estimate_and_train(two.spec, s, dir.file("estimate"));
  ASSERT_TRUE(r);
  const std::int64_t copy =
      strategies::lora_parameter_count(two.spec.model.arch, 4, two.spec.strategy.lora.targets) * 4;
  EXPECT_EQ(r->estimate.weights.count(), r->measured["weights"].get<std::int64_t>());
  // adapter_off: the base alone, which the starting adapter moves away from.
  RunConfig off = cfg;
  off.spec.training.max_steps = 1;
  off.strategy.reference = dsl::Reference::kAdapterOff;
  ASSERT_EQ(train_in(off, dir.file("adapter_off")), RunnerExit::kOk);
  const std::vector<json> base = lines(dir.file("adapter_off") + "/metrics.jsonl");
  ASSERT_EQ(base.size(), 1u);
  EXPECT_EQ(r->measured["weights"].get<std::int64_t>() - base[0]["memory"]["weights"].get<std::int64_t>(), copy);
  // precomputed scores the pairs with the starting adapters too, before
  // training (its cache named by them): the same 20 steps as the copy's.
  TrainOptions o;
  o.config = cfg;
  o.config.strategy.reference = dsl::Reference::kPrecomputed;
  o.out_dir = dir.file("precomputed");
  o.memory_limit = 0;
  o.quiet = true;
  o.device = "cpu";
  o.cache_dir = dir.file("cache");
  ASSERT_EQ(train(o), RunnerExit::kOk);
  const std::vector<json> ahead = lines(o.out_dir + "/metrics.jsonl");
  ASSERT_EQ(ahead.size(), ours.size());
  for (std::size_t k = 0; k < ours.size(); ++k) {
    for (const char* key : {"loss", "rewards/chosen", "rewards/margins"}) {
      EXPECT_NEAR(ahead[k][key].get<double>(), ours[k][key].get<double>(),
                  1e-5 * std::max(1.0, std::abs(ours[k][key].get<double>())))
          << "precomputed " << key << " at step " << k + 1;
    }
  }
  EXPECT_GT(std::abs(base[0]["rewards/chosen"].get<double>()), 1e-3);
}

// KTO under LoRA: the reference (and the KL rows' reference) is the base
// with the adapters off, so the first step's rewards are 0 and its loss
// 1 - sigmoid(0) = 0.5 for every row; the rewards then part, the KL
// estimate is reported each step, and the evaluation scores the pairs the
// same way.
TEST(PreferenceTest, KtoUnderLoraScoresAgainstTheBaseAndEvaluates) {
  TempDir dir;
  write_pairs(dir);
  RunConfig cfg = lora_pairs_job(dir, {"training.method=kto"});
  cfg.strategy.kl_rows = true;
  const std::string out = dir.file("out");
  ASSERT_EQ(train_in(cfg, out), RunnerExit::kOk);
  const std::vector<json> steps = lines(out + "/metrics.jsonl");
  ASSERT_EQ(steps.size(), 12u);
  EXPECT_NEAR(steps[0]["loss"].get<double>(), 0.5, 1e-6);
  EXPECT_EQ(steps[0]["rewards/chosen"].get<double>(), 0.0);
  EXPECT_EQ(steps[0]["kl"].get<double>(), 0.0);
  EXPECT_LT(steps.back()["loss"].get<double>(), 0.5);
  EXPECT_GT(steps.back()["rewards/margins"].get<double>(), 0.0);
  EXPECT_GE(steps.back()["kl"].get<double>(), 0.0);
  ASSERT_TRUE(steps.back().contains("eval_loss"));
  EXPECT_LT(steps.back()["eval_loss"].get<double>(), 0.5);
  EXPECT_TRUE(steps.back().contains("eval_kl"));
  EXPECT_TRUE(std::ifstream(out + "/adapter/adapter_model.safetensors").good());
  // A plan with a precomputed reference is refused by name, before any step.
  cfg.strategy.reference = dsl::Reference::kPrecomputed;
  EXPECT_EQ(train_in(cfg, dir.file("precomputed")), RunnerExit::kBadInput);
}

std::vector<json> events_of(const std::string& out, const std::string& kind) {
  std::vector<json> found;
  for (const json& e : lines(out + "/events.jsonl")) {
    if (e["event"] == kind) found.push_back(e);
  }
  return found;
}

// DPOTrainer's options beside its losses, each against DPOTrainer with the
// same settings over 20 steps: a list of losses with weights (MPO's sigmoid
// + bco_pair + sft at 0.8, 0.2, 1.0; RPO's sigmoid + sft), LD-DPO's
// ld_alpha (with accumulation, under IPO's per-token means, and from a
// precomputed reference, whose cache keeps another ld_alpha apart), and
// WPO's weights (alone, and with two weighted losses and ld_alpha at 4 x 2).
// sft's mean is over TRL's micro-batch and over Tailor's step: the same
// without accumulation, so its cases run 8 x 1.
TEST(PreferenceTest, DpoLossListsLdDpoAndWpoEqualTrlsDpoTrainer) {
  TempDir dir;
  ASSERT_TRUE(run_reference(dir, "make " + dir.path().string()));
  struct Case {
    const char* name;
    std::vector<std::string> losses;
    std::vector<double> weights;
    std::optional<double> ld_alpha;
    bool wpo = false;
    std::int64_t micro = 8, accum = 1;
    const char* trl = nullptr;  // the TRL run compared with, when another case's
    dsl::Reference reference = dsl::Reference::kSeparate;
  };
  const std::vector<Case> cases = {
      {"mpo", {"sigmoid", "bco_pair", "sft"}, {0.8, 0.2, 1.0}, std::nullopt},
      {"rpo", {"sigmoid", "sft"}, {}, std::nullopt},
      {"ld", {"sigmoid"}, {}, 0.3, false, 4, 2},
      {"ld_ipo", {"ipo"}, {}, 0.5},
      {"ld_precomputed", {"sigmoid"}, {}, 0.3, false, 4, 2, "ld", dsl::Reference::kPrecomputed},
      {"wpo", {"sigmoid"}, {}, std::nullopt, true},
      {"wpo_ld_pair", {"sigmoid", "bco_pair"}, {1.0, 0.5}, 0.2, true, 4, 2},
  };
  json trl_cases = json::array();
  for (const Case& c : cases) {
    if (c.trl) continue;
    json j = {{"name", c.name}, {"loss_type", c.losses}, {"micro", c.micro}, {"accum", c.accum}};
    if (!c.weights.empty()) j["loss_weights"] = c.weights;
    if (c.ld_alpha) j["ld_alpha"] = *c.ld_alpha;
    if (c.wpo) j["use_weighting"] = true;
    trl_cases.push_back(j);
  }
  ASSERT_TRUE(run_reference(dir, "options " + dir.path().string() + " " + dir.write("cases.json", trl_cases.dump())));
  const auto overrides_of = [](const Case& c) {
    std::string losses, weights;
    for (const std::string& l : c.losses)
      losses += (losses.empty() ? "" : ",") + l;
    for (double w : c.weights)
      weights += (weights.empty() ? "" : ",") + std::to_string(w);
    std::vector<std::string> out = {"training.loss_type=[" + losses + "]"};
    if (!weights.empty()) out.push_back("training.loss_weights=[" + weights + "]");
    if (c.ld_alpha) out.push_back("training.ld_alpha=" + std::to_string(*c.ld_alpha));
    if (c.wpo) out.push_back("training.use_weighting=true");
    return out;
  };
  const auto train_case = [&](const Case& c, std::vector<std::string> overrides, const std::string& out) {
    RunConfig cfg = load_job(dir, trl_job("base", "dpo"), std::move(overrides));
    cfg.strategy.precision = dsl::Precision::kFp32;
    cfg.strategy.micro_batch_size = c.micro;
    cfg.strategy.grad_accumulation = c.accum;
    cfg.strategy.pairs = true;
    cfg.strategy.reference = c.reference;
    EXPECT_EQ(train_in(cfg, out, dir.file("cache")), RunnerExit::kOk) << out;
    return lines(out + "/metrics.jsonl");
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.name) + " against TRL's " + (c.trl ? c.trl : c.name));
    std::ifstream in(dir.file(std::string(c.trl ? c.trl : c.name) + ".json"));
    const json theirs = json::parse(in)["steps"];
    const std::vector<json> ours = train_case(c, overrides_of(c), dir.file(c.name));
    ASSERT_EQ(ours.size(), 20u);
    ASSERT_EQ(theirs.size(), 20u);
    double worst = 0, grad_norm_worst = 0;
    const double loss_floor = std::max(1e-2, 1e-2 * std::abs(theirs[0]["loss"].get<double>()));
    for (std::size_t k = 0; k < 20; ++k) {
      const std::string at = std::string(c.name) + " step " + std::to_string(k + 1);
      worst = std::max(worst, expect_pair_step(ours[k], theirs[k], loss_floor, at));
      // The gradient's norm drifts more than the values late in training
      // (its signs alternate from step to step: rounding, not a bias):
      // plain sigmoid at 8 x 1 reaches 6.7e-5 of it by step 17, WPO 3.7e-4
      // (its weights are exp of a difference of two log-probabilities).
      grad_norm_worst = std::max(
          grad_norm_worst, expect_close(ours[k]["grad_norm"], theirs[k]["grad_norm"], 1e-3, 1e-2, at + " grad_norm"));
    }
    EXPECT_LT(ours.back()["loss"].get<double>(), ours.front()["loss"].get<double>());
    std::printf("%s: 20 steps, largest deviation from TRL %.2e of the value, grad_norm %.2e (loss %.6f -> %.6f)\n",
                c.name, worst, grad_norm_worst, ours.front()["loss"].get<double>(), ours.back()["loss"].get<double>());
  }
  // The precomputed reference's cache names ld_alpha: another one scores
  // every pair anew instead of reading the other's table.
  Case other = cases[4];
  other.ld_alpha = 0.6;
  const std::vector<json> again = train_case(other, overrides_of(other), dir.file("ld_other"));
  ASSERT_EQ(again.size(), 20u);
  const auto scored = [&](const char* name) {
    const std::vector<json> found = events_of(dir.file(name), "reference");
    return found.empty() ? json::object() : found[0];
  };
  EXPECT_EQ(scored("ld_precomputed")["computed"], 8);
  EXPECT_EQ(scored("ld_other")["computed"], 8);
  EXPECT_EQ(scored("ld_other")["cached"], 0);
  EXPECT_NE(scored("ld_other")["cache_file"], scored("ld_precomputed")["cache_file"]);
}

// strategy.reference precomputed: the pairs scored by the starting model
// before the first update, so training and evaluation see what the frozen
// copy (full fine-tuning) or the adapters switched off (LoRA) give them;
// the scores kept in the cache folder, so that the same job again runs no
// reference forward, a damaged file is reported and scored anew, and
// other weights get a file of their own. A run that reads part of the
// data scores only what it reads.
TEST(PreferenceTest, APrecomputedReferenceScoresAsTheOthersOnceAndFromTheCache) {
  TempDir dir;
  write_pairs(dir);
  const std::string cache = dir.file("cache");
  auto run = [&](const std::string& name, dsl::Reference reference, bool lora, std::vector<std::string> sets = {}) {
    sets.insert(sets.begin(), {"data.eval=" + dir.file("pairs.jsonl"), "training.eval_every=3", "training.max_steps=6",
                               std::string("strategy.adapter=") + (lora ? "lora" : "none")});
    RunConfig cfg = load_job(dir, lora_job(), sets);
    cfg.strategy.precision = dsl::Precision::kFp32;
    cfg.strategy.micro_batch_size = 2;
    cfg.strategy.grad_accumulation = 2;
    cfg.strategy.adapter = lora ? dsl::Adapter::kLora : dsl::Adapter::kNone;
    cfg.strategy.lora_rank = lora ? 4 : 0;
    cfg.strategy.pairs = true;
    cfg.strategy.reference = reference;
    TrainOptions o;
    o.config = cfg;
    o.out_dir = dir.file(name);
    o.memory_limit = 0;
    o.quiet = true;
    o.device = "cpu";
    o.cache_dir = cache;
    EXPECT_EQ(train(o), RunnerExit::kOk) << name;
    return lines(o.out_dir + "/metrics.jsonl");
  };
  // The same training, up to the rounding of other batch shapes.
  auto expect_same = [](const std::vector<json>& a, const std::vector<json>& b, double tolerance) {
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t k = 0; k < a.size(); ++k) {
      for (const auto& [key, value] : a[k].items()) {
        if (key.find("loss") == std::string::npos && key.find("rewards/") == std::string::npos &&
            key.find("logps/") == std::string::npos) {
          continue;
        }
        ASSERT_TRUE(b[k].contains(key)) << key;
        EXPECT_NEAR(b[k][key].get<double>(), value.get<double>(), tolerance * std::max(1.0, std::abs(value.get<double>())))
            << key << " at step " << k + 1;
      }
    }
  };
  const auto copy = run("separate", dsl::Reference::kSeparate, false);
  const auto first = run("precomputed", dsl::Reference::kPrecomputed, false);
  ASSERT_EQ(first.size(), 6u);
  ASSERT_TRUE(first.back().contains("eval_rewards/margins"));
  expect_same(copy, first, 1e-5);
  EXPECT_LT(first.back()["loss"].get<double>(), first.front()["loss"].get<double>());
  auto reference_event = [&](const std::string& name) {
    const auto found = events_of(dir.file(name), "reference");
    EXPECT_EQ(found.size(), 1u) << name;
    return found.empty() ? json::object() : found[0];
  };
  // The 8 pairs (data.eval is the same file: the same pairs), scored once.
  json e = reference_event("precomputed");
  EXPECT_EQ(e["pairs"], 8);
  EXPECT_EQ(e["computed"], 8);
  EXPECT_EQ(e["cached"], 0);
  EXPECT_EQ(e["written"], true);
  const std::string file = e["cache_file"];
  EXPECT_EQ(std::filesystem::path(file).parent_path(), std::filesystem::path(cache));
  ASSERT_TRUE(std::filesystem::exists(file));
  // Again: every pair from the cache, no forward, the same run exactly.
  const auto again = run("again", dsl::Reference::kPrecomputed, false);
  e = reference_event("again");
  EXPECT_EQ(e["computed"], 0);
  EXPECT_EQ(e["cached"], 8);
  EXPECT_EQ(e["batches"], 0);
  EXPECT_EQ(e["written"], false);
  expect_same(first, again, 0.0);
  // A damaged file: reported, ignored, scored again, rewritten.
  std::filesystem::resize_file(file, std::filesystem::file_size(file) - 5);
  const auto repaired = run("repaired", dsl::Reference::kPrecomputed, false);
  e = reference_event("repaired");
  EXPECT_EQ(e["computed"], 8);
  EXPECT_NE(e.value("problem", "").find("truncated"), std::string::npos) << e.dump();
  EXPECT_EQ(e["written"], true);
  expect_same(first, repaired, 0.0);
  // Other starting weights (another seed): another reference, another file.
  run("other-seed", dsl::Reference::kPrecomputed, false, {"training.seed=8"});
  e = reference_event("other-seed");
  EXPECT_EQ(e["computed"], 8);
  EXPECT_NE(e["cache_file"], file);
  // Under LoRA: the base with the adapters off, as adapter_off scores it.
  const auto off = run("adapter-off", dsl::Reference::kAdapterOff, true);
  const auto ahead = run("lora-precomputed", dsl::Reference::kPrecomputed, true);
  expect_same(off, ahead, 1e-5);
  EXPECT_NEAR(ahead.front()["loss"].get<double>(), std::log(2.0), 1e-6);
  // One step of 4 pairs, no evaluation: those pairs and the probe's
  // longest 2, not the whole file.
  const auto part = run("part", dsl::Reference::kPrecomputed, false,
                        {"training.max_steps=1", "data.eval=null", "training.seed=9"});
  ASSERT_EQ(part.size(), 1u);
  e = reference_event("part");
  EXPECT_GE(e["pairs"].get<int>(), 4);
  EXPECT_LE(e["pairs"].get<int>(), 6);
  EXPECT_EQ(e["computed"], e["pairs"]);
}

// A reward run's 20 steps against TRL's RewardTrainer's log: loss, gradient
// norm, margin, mean reward and accuracy, and with one micro-batch a step
// (`extremes`) the lowest and highest reward. Returns the largest
// deviation in units of each value's scale.
double expect_trl_reward_steps(const std::vector<json>& ours, const json& theirs, const std::string& name,
                               bool extremes) {
  EXPECT_EQ(ours.size(), 20u);
  EXPECT_EQ(theirs.size(), 20u);
  if (ours.size() != 20 || theirs.size() != 20) return 0;
  double worst = 0;
  // The loss falls 4- to 40-fold and keeps the rounding of its early steps
  // (4 x 2: 3e-6 at 0.03): its floor is a tenth of the first.
  const double loss_floor = 0.1 * theirs[0]["loss"].get<double>();
  for (std::size_t k = 0; k < 20; ++k) {
    const std::string at = name + " step " + std::to_string(k + 1);
    worst = std::max(worst, expect_close(ours[k]["loss"], theirs[k]["loss"], 1e-4, loss_floor, at + " loss"));
    // The gradient's norm sums every parameter's: looser (2.4e-4 seen).
    expect_close(ours[k]["grad_norm"], theirs[k]["grad_norm"], 1e-3, 1e-2, at + " grad_norm");
    // TRL's min_reward and max_reward average each micro-batch's extreme;
    // Tailor's are the step's: the same with one micro-batch. Rewards are
    // scores of order 1 that pass through 0: their floor is 1.
    std::vector<const char*> keys = {"margin", "mean_reward"};
    if (extremes) keys.insert(keys.end(), {"min_reward", "max_reward"});
    for (const char* key : keys) {
      worst = std::max(worst, expect_close(ours[k][key], theirs[k][key], 1e-4, 1.0, at + " " + key));
    }
    EXPECT_NEAR(ours[k]["accuracy"].get<double>(), theirs[k]["accuracy"].get<double>(), 1e-9) << at;
  }
  EXPECT_LT(ours.back()["loss"].get<double>(), 0.5 * ours.front()["loss"].get<double>()) << name;
  return worst;
}

// reward_reference.py score's output (8 pairs' scores) checked against a
// run's last evaluation: the lowest, highest and mean score, the mean margin
// and the accuracy. Returns the largest deviation (in units of the score).
double expect_eval_scores(const json& scored, const json& last, const std::string& what) {
  const auto chosen = scored["chosen"].get<std::vector<double>>(),
             rejected = scored["rejected"].get<std::vector<double>>();
  EXPECT_EQ(chosen.size(), 8u);
  EXPECT_EQ(rejected.size(), chosen.size());
  if (chosen.size() != 8 || rejected.size() != 8 || !last.contains("eval_min_reward")) {
    ADD_FAILURE() << what << ": " << last.dump();
    return 0;
  }
  double lowest = 1e300, highest = -1e300, sum = 0, margin = 0, accurate = 0;
  for (std::size_t p = 0; p < 8; ++p) {
    for (double r : {chosen[p], rejected[p]}) {
      lowest = std::min(lowest, r);
      highest = std::max(highest, r);
      sum += r;
    }
    margin += chosen[p] - rejected[p];
    accurate += chosen[p] > rejected[p] ? 1 : 0;
  }
  double worst = expect_close(last["eval_min_reward"], lowest, 1e-4, 1.0, what + "'s lowest score");
  worst = std::max(worst, expect_close(last["eval_max_reward"], highest, 1e-4, 1.0, what + "'s highest score"));
  worst = std::max(worst, expect_close(last["eval_mean_reward"], sum / 16, 1e-4, 1.0, what + "'s mean score"));
  worst = std::max(worst, expect_close(last["eval_margin"], margin / 8, 1e-4, 1.0, what + "'s mean margin"));
  EXPECT_EQ(last["eval_accuracy"].get<double>(), accurate / 8) << what;
  return worst;
}

// A reward model (training.method reward) against TRL's RewardTrainer on
// the same tiny Llama as a sequence classifier (transformers' score head
// under seed 0, saved by save_pretrained), the same 8 pairs and
// hyperparameters, 20 steps, one micro-batch of 8 and 4 x 2; then the folder
// Tailor writes loads in AutoModelForSequenceClassification and scores the
// pairs as Tailor's last evaluation did. A job may start from the causal
// model's folder too (its head dropped, the score initialised).
TEST(PreferenceTest, ARewardModelEqualsTrlsRewardTrainerAndLoadsInTransformers) {
  TempDir dir;
  ASSERT_TRUE(run_reference(dir, "make " + dir.path().string(), "reward_reference.py"));
  ASSERT_TRUE(run_reference(dir, "run " + dir.path().string() + " 8:1 4:2 4:2:0.01 4:2:margin", "reward_reference.py"));
  const std::string yaml = trl_job("reward_base", "reward");
  struct Case {
    int micro, accum;
    const char* center;   // training.center_rewards, TRL's center_rewards_coefficient
    bool margin = false;  // margin_pairs.jsonl with data.margin_field, TRL's "margin" column
  };
  // (TRL's suggested weight, 0.01. At 0.05 Tailor and TRL part by 3e-6
  // after the first step, 8 x 1 and 4 x 2 alike, and by 6e-4 at step 8
  // (TRL's own 8 x 1 and 4 x 2 by 6e-5): probably Adam's first steps, which
  // move a weight by about lr whatever its gradient's size, on weights whose
  // two terms' gradients cancel to rounding; not investigated further.)
  for (const Case& c : {Case{8, 1, nullptr}, Case{4, 2, nullptr}, Case{4, 2, "0.01"}, Case{4, 2, nullptr, true}}) {
    const int micro = c.micro, accum = c.accum;
    const std::string name = "reward_" + std::to_string(micro) + "x" + std::to_string(accum) +
                             (c.center ? std::string("_c") + c.center : "") + (c.margin ? "_margin" : "");
    SCOPED_TRACE(name);
    std::ifstream in(dir.file(name + ".json"));
    const json trl = json::parse(in);
    // The last evaluation (after step 20) scores the pairs with the final weights.
    const std::string pairs = dir.file(c.margin ? "margin_pairs.jsonl" : "pairs.jsonl");
    std::vector<std::string> sets = {"data.eval=" + pairs, "training.eval_every=20"};
    if (c.center) sets.push_back(std::string("training.center_rewards=") + c.center);
    if (c.margin) sets.insert(sets.end(), {"data.train=" + pairs, "data.margin_field=margin"});
    RunConfig cfg = load_job(dir, yaml, sets);
    // The rows are TRL's: BOS, prompt, completion, EOS.
    auto tok = data::make_tokenizer(cfg.spec.model);
    ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
    const auto rows = data::load_examples(cfg.spec.data.train, cfg.spec.data, **tok);
    ASSERT_TRUE(rows.is_ok()) << rows.status().to_string();
    ASSERT_EQ(rows->size(), 2 * trl["tokens"].size());
    for (std::size_t p = 0; p < trl["tokens"].size(); ++p) {
      EXPECT_EQ((*rows)[2 * p].tokens, trl["tokens"][p]["chosen_ids"].get<std::vector<std::int32_t>>()) << p;
      EXPECT_EQ((*rows)[2 * p + 1].tokens, trl["tokens"][p]["rejected_ids"].get<std::vector<std::int32_t>>()) << p;
    }
    cfg.strategy.precision = dsl::Precision::kFp32;
    cfg.strategy.micro_batch_size = micro;
    cfg.strategy.grad_accumulation = accum;
    cfg.strategy.pairs = true;
    const std::string out = dir.file(name);
    ASSERT_EQ(train_in(cfg, out), RunnerExit::kOk);
    const std::vector<json> ours = lines(out + "/metrics.jsonl");
    ASSERT_EQ(ours.size(), 20u);
    const double worst = expect_trl_reward_steps(ours, trl["steps"], name, accum == 1);
    std::printf("%s: 20 steps, largest deviation from TRL %.2e of the value (loss %.6f -> %.6f)\n", name.c_str(),
                worst, ours.front()["loss"].get<double>(), ours.back()["loss"].get<double>());
    if (c.center) {
      // The same first step as without centring (the same weights and
      // pairs), plus the positive centring term.
      std::ifstream plain_in(dir.file("reward_4x2/metrics.jsonl"));
      std::string first_plain;
      std::getline(plain_in, first_plain);
      EXPECT_GT(ours.front()["loss"].get<double>(), json::parse(first_plain)["loss"].get<double>());
      EXPECT_EQ(ours.front()["mean_reward"].get<double>(), json::parse(first_plain)["mean_reward"].get<double>());
    }
    if (c.margin) {
      // The same first scores as without margins, another loss: the
      // margins reached it (TRL's log above agrees on every step's).
      std::ifstream plain_in(dir.file("reward_4x2/metrics.jsonl"));
      std::string first_plain;
      std::getline(plain_in, first_plain);
      EXPECT_EQ(ours.front()["mean_reward"].get<double>(), json::parse(first_plain)["mean_reward"].get<double>());
      EXPECT_GT(std::abs(ours.front()["loss"].get<double>() - json::parse(first_plain)["loss"].get<double>()), 0.1);
    }
    if (accum != 1) continue;
    // The exported folder, scored by transformers, as Tailor's last evaluation.
    ASSERT_TRUE(run_reference(dir, "score " + out + "/model " + dir.file("pairs.jsonl") + " " + dir.file("scores.json"),
                              "reward_reference.py"));
    std::ifstream scores_in(dir.file("scores.json"));
    expect_eval_scores(json::parse(scores_in), ours.back(), "exported model");
    // Generation and export read causal language models: refused by name.
    ModelSources sources;
    sources.base = out + "/model";
    const auto opened = open_inference_model(sources, torch::kCPU, "auto");
    ASSERT_FALSE(opened.is_ok());
    EXPECT_NE(opened.status().message().find("sequence classifier"), std::string::npos) << opened.status().to_string();
  }
  // From the causal language model's folder: its head is dropped, the
  // score starts from Tailor's initialisation, and training runs.
  expect_short_reward_run(load_job(dir, yaml, {"model.path=" + dir.file("base"), "training.max_steps=2"}),
                          dsl::Precision::kFp32, dir.file("from_causal"), 2);
}

// A reward model beside LoRA adapters: the body frozen, the score trained
// whole. Started from the adapter PEFT initialised (model.adapter), it
// trains as TRL's RewardTrainer trains that adapter (PeftModel) over 20
// steps. Its adapter is PEFT's SEQ_CLS task (the score saved whole), which
// PeftModel loads over AutoModelForSequenceClassification; the merged
// model loads in transformers; both score the pairs as Tailor's last
// evaluation did. Under bf16 the score trains in fp32 beside the bf16 body.
TEST(PreferenceTest, ARewardModelBesideAdaptersEqualsTrlWithPeftAndLoadsInPeft) {
  TempDir dir;
  ASSERT_TRUE(run_reference(dir, "make " + dir.path().string(), "reward_reference.py"));
  ASSERT_TRUE(run_reference(dir, "run_lora " + dir.path().string() + " 8:1 4:2", "reward_reference.py"));
  const std::string yaml = trl_job("reward_base", "reward");
  std::string out;
  for (const auto& [micro, accum] : {std::pair{8, 1}, {4, 2}}) {
    const std::string name = "reward_lora_" + std::to_string(micro) + "x" + std::to_string(accum);
    SCOPED_TRACE(name);
    std::vector<std::string> sets = {"model.adapter=" + dir.file("lora_init"), "strategy.adapter=lora",
                                     "strategy.lora.dropout=0"};
    if (accum == 1) {
      sets.insert(sets.end(), {"output.merge=true", "data.eval=" + dir.file("pairs.jsonl"), "training.eval_every=20"});
    }
    RunConfig cfg = load_job(dir, yaml, sets);
    EXPECT_EQ(cfg.spec.strategy.lora.r, 8);  // the adapter's
    EXPECT_EQ(cfg.spec.strategy.lora.alpha, 16);
    cfg.strategy.precision = dsl::Precision::kFp32;
    cfg.strategy.adapter = dsl::Adapter::kLora;
    cfg.strategy.lora_rank = 8;
    cfg.strategy.micro_batch_size = micro;
    cfg.strategy.grad_accumulation = accum;
    cfg.strategy.pairs = true;
    const std::string run_dir = dir.file(name);
    ASSERT_EQ(train_in(cfg, run_dir), RunnerExit::kOk);
    const std::vector<json> ours = lines(run_dir + "/metrics.jsonl");
    std::ifstream in(dir.file(name + ".json"));
    const double worst = expect_trl_reward_steps(ours, json::parse(in)["steps"], name, accum == 1);
    std::printf("%s: 20 steps, largest deviation from TRL with PEFT %.2e of the value (loss %.6f -> %.6f)\n",
                name.c_str(), worst, ours.front()["loss"].get<double>(), ours.back()["loss"].get<double>());
    if (accum == 1) out = run_dir;
  }
  const std::vector<json> steps = lines(out + "/metrics.jsonl");
  const json& last = steps.back();
  ASSERT_TRUE(last.contains("eval_mean_reward")) << last.dump();

  for (const auto& [what, args] :
       {std::pair<std::string, std::string>{"the PEFT adapter", dir.file("reward_base") + " " +
                                                                    dir.file("pairs.jsonl") + " " +
                                                                    dir.file("peft.json") + " " + out + "/adapter"},
        {"the merged model", out + "/model " + dir.file("pairs.jsonl") + " " + dir.file("merged.json")}}) {
    SCOPED_TRACE(what);
    const std::string file = what == "the merged model" ? dir.file("merged.json") : dir.file("peft.json");
    ASSERT_TRUE(run_reference(dir, "score " + args, "reward_reference.py"));
    std::ifstream in(file);
    const json hf = json::parse(in);
    if (what != "the merged model") {
      EXPECT_EQ(hf["task_type"], "SEQ_CLS");
      EXPECT_EQ(hf["modules_to_save"], json::array({"score"}));
    }
    const double worst = expect_eval_scores(hf, last, what);
    std::printf("%s scores as Tailor's last evaluation within %.2e (loss %.4f -> %.4f)\n", what.c_str(), worst,
                steps.front()["loss"].get<double>(), last["loss"].get<double>());
  }
  // Generation and export read causal language models: the adapter is
  // refused by name, alone or over a causal language model's folder.
  const auto alone = resolve_model_sources(out + "/adapter", "");
  ASSERT_FALSE(alone.is_ok());
  EXPECT_NE(alone.status().message().find("\"SEQ_CLS\" is a sequence classifier's adapter"), std::string::npos)
      << alone.status().to_string();
  const auto over_causal = resolve_model_sources(dir.file("base"), out + "/adapter");
  ASSERT_FALSE(over_causal.is_ok());
  EXPECT_NE(over_causal.status().message().find("SEQ_CLS"), std::string::npos) << over_causal.status().to_string();

  // bf16: the body in bf16, the adapters and the score in fp32.
  RunConfig bf16 = load_job(dir, yaml, {"strategy.adapter=lora", "training.max_steps=2"});
  bf16.strategy.adapter = dsl::Adapter::kLora;
  bf16.strategy.lora_rank = 16;
  expect_short_reward_run(bf16, dsl::Precision::kBf16, dir.file("bf16"), 2);
  const json adapter_config = json::parse(std::ifstream(dir.file("bf16") + "/adapter/adapter_config.json"));
  EXPECT_EQ(adapter_config["task_type"], "SEQ_CLS");
}

// A reward model's rows: each row's inputs then its last target, one
// column wider, padded; the score read at the last token that is not the
// pad, as transformers pools: the EOS where the tokenizer has a pad token
// of its own, the token before it where the pad is the EOS (TRL's fallback).
TEST(PreferenceTest, ARewardModelReadsEachRowWhereTransformersPools) {
  data::Batch b;
  b.rows = 2;
  b.seq_len = 4;
  const std::int32_t eos = 9, pad = 7;
  // Row 0: BOS 5 6, then EOS as its last target; row 1 fills the row.
  b.inputs = {1, 5, 6, pad, 1, 2, 3, 4};
  b.targets = {-100, 6, eos, -100, -100, 3, 4, eos};
  b.positions = {0, 1, 2, 0, 0, 1, 2, 3};
  b.segment_ids = {0, 0, 0, -1, 0, 0, 0, 0};
  const ScoredRows own = scored_rows(b, torch::kCPU, pad);
  EXPECT_EQ(own.input.input_ids.sizes(), (std::vector<std::int64_t>{2, 5}));
  const auto ids = own.input.input_ids.contiguous();
  EXPECT_EQ(std::vector<std::int64_t>(ids.data_ptr<std::int64_t>(), ids.data_ptr<std::int64_t>() + 10),
            (std::vector<std::int64_t>{1, 5, 6, eos, pad, 1, 2, 3, 4, eos}));
  const auto pos = own.input.positions.contiguous();
  EXPECT_EQ(std::vector<std::int64_t>(pos.data_ptr<std::int64_t>(), pos.data_ptr<std::int64_t>() + 10),
            (std::vector<std::int64_t>{0, 1, 2, 3, 0, 0, 1, 2, 3, 4}));
  EXPECT_EQ(own.last, (std::vector<std::int64_t>{3, 4}));
  // The EOS as padding: the rows pad with it and the score skips it.
  b.inputs[3] = eos;
  EXPECT_EQ(scored_rows(b, torch::kCPU, eos).last, (std::vector<std::int64_t>{2, 3}));
}

// The planner's estimate for each placement against the run's measured
// memory: the components it doubles (activations, logits) and the copy;
// and ORPO's, without a reference but with its prompts through the head
// once more, SimPO's, the reward model's and KTO's.
TEST(PreferenceTest, TheEstimateHoldsForEachReferencePlacementAndWithout) {
  TempDir dir;
  write_pairs(dir, /*fill=*/true);
  // The same completions unpaired, each pair's two as one desirable and one
  // undesirable record.
  std::string feedback;
  for (const json& pair : lines(dir.file("pairs.jsonl"))) {
    feedback += json{{"prompt", pair["prompt"]}, {"completion", pair["chosen"]}, {"label", true}}.dump() + "\n";
    feedback += json{{"prompt", pair["prompt"]}, {"completion", pair["rejected"]}, {"label", false}}.dump() + "\n";
  }
  dir.write("feedback.jsonl", feedback);
  struct Case {
    const char* name;
    dsl::Reference placement;
    bool lora;
    std::vector<std::string> overrides;
  };
  const Case cases[] = {
      {"adapter_off", dsl::Reference::kAdapterOff, true, {}},
      {"separate", dsl::Reference::kSeparate, false, {"strategy.reference=separate"}},
      {"precomputed", dsl::Reference::kPrecomputed, false, {"strategy.reference=precomputed"}},
      {"orpo", dsl::Reference::kNone, false, {"training.method=orpo"}},
      {"simpo-lora", dsl::Reference::kNone, true, {"training.method=simpo"}},
      {"reward", dsl::Reference::kNone, false, {"training.method=reward"}},
      {"reward-lora", dsl::Reference::kNone, true, {"training.method=reward"}},
      // KTO's KL rows forwarded before the trained forward, without gradients.
      {"kto-separate", dsl::Reference::kSeparate, false, {"training.method=kto", "strategy.reference=separate"}},
      {"kto-adapter_off", dsl::Reference::kAdapterOff, true, {"training.method=kto"}},
      // Labelled completions: a micro-batch of 4 is 4 rows, not 8.
      {"kto-labelled",
       dsl::Reference::kAdapterOff,
       true,
       {"training.method=kto", "data.label_field=label", "data.train=" + dir.file("feedback.jsonl")}},
      // WPO's pass of the head without gradients (with LD-DPO's split rows),
      // and MPO's three losses with sft's NLL.
      {"wpo", dsl::Reference::kAdapterOff, true, {"training.use_weighting=true", "training.ld_alpha=0.3"}},
      {"mpo",
       dsl::Reference::kAdapterOff,
       true,
       {"training.loss_type=[sigmoid,bco_pair,sft]", "training.loss_weights=[0.8,0.2,1.0]"}},
  };
  std::map<dsl::Reference, double> placed_weights;  // measured
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<std::string> overrides = {"training.max_steps=2", std::string("strategy.adapter=") + (c.lora ? "lora" : "none")};
    overrides.insert(overrides.end(), c.overrides.begin(), c.overrides.end());
    std::string job = lora_job();
    if (c.placement == dsl::Reference::kNone) job.replace(job.find("beta: 0.5, "), 11, "");
    const RunConfig cfg = load_job(dir, job, overrides);
    strategies::Strategy s;
    s.precision = dsl::Precision::kFp32;
    s.micro_batch_size = 4;
    s.grad_accumulation = 1;
    s.adapter = c.lora ? dsl::Adapter::kLora : dsl::Adapter::kNone;
    s.lora_rank = c.lora ? 4 : 0;
    s.reference = c.placement;
    const auto r = testing::estimate_and_train(cfg.spec, s, dir.file(c.name));
    ASSERT_TRUE(r);
    const double measured = r->measured["peak_bytes"].get<double>();
    const double estimated = static_cast<double>(r->estimate.total().count());
    std::printf("%s: estimated %.0f B, measured peak %.0f B (%.3f)\n", c.name, estimated, measured,
                estimated / measured);
    for (const auto& m : strategies::kMemoryComponents) {
      std::printf("  %-18s estimated %10lld measured %10lld\n", m.key, static_cast<long long>((r->estimate.*m.member).count()),
                  static_cast<long long>(r->measured.value(m.key, 0)));
    }
    EXPECT_NEAR(estimated / measured, 1.0, 0.05) << "estimate " << estimated << " measured " << measured;
    const double weights = r->measured["weights"].get<double>();
    EXPECT_NEAR(static_cast<double>(r->estimate.weights.count()) / weights, 1.0, 0.02);
    if (cfg.spec.training.method == dsl::TrainingMethod::kDpo) placed_weights[c.placement] = weights;
  }
  // The copy is every weight once more; the precomputed reference has none.
  EXPECT_NEAR(placed_weights[dsl::Reference::kSeparate] / placed_weights[dsl::Reference::kPrecomputed], 2.0, 0.01);
}

}  // namespace
}  // namespace tailor::runner
