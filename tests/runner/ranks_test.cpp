// Multi-rank jobs end to end on this machine's CPU: `tailor plan` for
// several ranks, tailor-runner launching and supervising them, and what they
// train compared with one rank on the same global batch; faults (a killed
// rank, SIGTERM, a rank that never joins), resuming on another rank count,
// and the optimizer and parameters offloaded to the host ledger.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runner/dist/launcher.h"
#include "runner/io/safetensors.h"
#include "tests/testing/golden_cases.h"
#include "tests/testing/temp_dir.h"

namespace tailor::runner {
namespace {

using io::DType;
using io::SafetensorsFile;
using io::TensorView;
using nlohmann::json;
using testing::read_file;
using testing::TempDir;
const std::string kBin = std::string(TAILOR_BINARY_DIR) + "/bin/";
// Busy-waiting OpenMP threads stall ranks that share 2 cores with ctest's
// other work (docs/libtorch.md).
const bool kPassiveOmp = ::setenv("OMP_WAIT_POLICY", "PASSIVE", 0) == 0;

struct JobShape {
  int ranks = 1;
  int zero = 0;
  bool lora = false;
  bool qlora = false;
  bool whole = false;  // strategy.lora.modules_to_save: the embedding and head trained whole
  const char* optimizer = "adamw";
  int steps = 4;
  int checkpoint_every = 0;
  int recompute_every = 0;  // gradient checkpointing
  const char* offload = "none";
  const char* host_memory = "4GiB";
  std::string eval = "";  // data.eval; empty: none
  int eval_every = 0;
  bool merge = true;      // output.merge: the tests compare the merged model too
  // The model: by default the 2-layer Llama of the CPU examples (0.4M
  // parameters), whose steps cost a seventh of tiny-llama-byte's (3M); the
  // tests of memory against the plan and of budgets keep tiny-llama-byte,
  // the size at which the planner's terms were measured (at 0.4M a rank's
  // measured peak is 0.5-1.3 MB, more than 5%, off the plan's estimate).
  bool calibrated = false;
};

std::string spec_text(const JobShape& j) {
  std::ostringstream s;
  s << "apiVersion: tailor/v1\nkind: TrainingJob\nname: ranks-test\n"
    << (j.calibrated
            ? "model: {preset: tiny-llama-byte, init: random}\n"
            : "model: {arch: {family: llama, layers: 2, hidden: 128, intermediate: 344, heads: 4, kv_heads: 2, "
              "vocab: 260, max_seq_len: 256}}\n")
    << "data: {train: " << TAILOR_SOURCE_DIR
    << "/configs/data/tiny-corpus.txt, format: text, seq_len: 64, packing: true"
    << (j.eval.empty() ? "" : ", eval: " + j.eval) << "}\n"
    << "training: {global_batch_size: 16, micro_batch_size: 2, max_steps: " << j.steps
    << ", eval_every: " << j.eval_every
    << ", lr: 2e-3, scheduler: constant, warmup_steps: 0, weight_decay: 0.01, seed: 7}\n"
    << "strategy: {precision: fp32, gradient_checkpointing: " << j.recompute_every << ", optimizer: " << j.optimizer
    << ", zero_stage: " << j.zero << ", offload: " << j.offload << ", adapter: "
    << (j.lora || j.qlora ? std::string(j.qlora ? "qlora" : "lora") + ", lora: {r: 4, alpha: 8, dropout: 0" +
                                (j.whole ? ", modules_to_save: [embed_tokens, lm_head]" : "") + "}"
                          : "none")
    << "}\n"
    << "resources: {gpus: 0, host_memory: " << j.host_memory << ", ranks: " << j.ranks << "}\n"
    << "checkpoint: {every_steps: " << j.checkpoint_every << ", keep: 2}\n"
    << "output: {merge: " << (j.merge ? "true" : "false") << "}\n";
  return s.str();
}

int shell(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}

// `tailor plan --output json` of the shape, as a file.
std::string plan_file(const TempDir& t, const std::string& name, const JobShape& j) {
  const std::string spec = t.write(name + ".yaml", spec_text(j));
  const std::string plan = t.file(name + ".plan.json");
  EXPECT_EQ(shell(kBin + "tailor plan " + spec + " --output json > " + plan + " 2> " + plan + ".err"), 0)
      << spec_text(j);
  return plan;
}

int run_runner(const std::string& plan, const std::string& out, const std::string& extra = "") {
  return shell(kBin + "tailor-runner --plan " + plan + " --out " + out + " --quiet " + extra + " 2> " + out + ".log");
}

std::vector<json> json_lines(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    json j = json::parse(line, nullptr, false);
    if (!j.is_discarded()) out.push_back(j);
  }
  return out;
}

std::map<std::string, std::vector<float>> fp32_tensors(const std::string& path) {
  std::map<std::string, std::vector<float>> out;
  auto f = SafetensorsFile::open(path);
  EXPECT_TRUE(f.is_ok()) << f.status().message();
  if (!f.is_ok()) return out;
  for (const TensorView& t : f->tensors()) {
    if (t.dtype != DType::kF32) continue;
    std::vector<float> v(t.data.size() / 4);
    std::memcpy(v.data(), t.data.data(), t.data.size());
    out[t.name] = std::move(v);
  }
  return out;
}

double max_abs_difference(const std::map<std::string, std::vector<float>>& a,
                          const std::map<std::string, std::vector<float>>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (const auto& [name, va] : a) {
    auto it = b.find(name);
    if (it == b.end() || it->second.size() != va.size()) return INFINITY;
    for (std::size_t i = 0; i < va.size(); ++i) worst = std::max(worst, std::abs(double(va[i]) - it->second[i]));
  }
  return worst;
}

// fp32: the ranks sum gradients in another order than one rank does, and
// AdamW's normalisation magnifies the last-bit difference for weights whose
// gradients are near zero. How much depends on the CPU's kernels (their
// vector width sets the summation order): the largest difference after 4
// steps stayed below 1e-5 on an AVX2 EPYC and was 1.01e-5 to 1.02e-5 on an
// AVX-512/AMX Xeon. A sharding fault moves weights by whole learning-rate
// steps (2e-3), a hundred times the bound.
// 8-bit states: the ranks' gradient sums differ from one rank's in the last
// bits, which can round a moment to the neighbouring code; each such code
// moves a weight by a fraction of one learning-rate step (2e-3).
constexpr double kWeightTolerance = 2e-5, kWeightToleranceEightBit = 1e-3;

// Losses of two runs step by step: equal to fp32 rounding of a different
// summation order (ranks sum partial gradients, one rank accumulates).
void expect_same_losses(const std::string& a, const std::string& b) {
  const auto la = json_lines(a), lb = json_lines(b);
  ASSERT_EQ(la.size(), lb.size());
  ASSERT_FALSE(la.empty());
  for (std::size_t i = 0; i < la.size(); ++i) {
    const double x = la[i]["loss"], y = lb[i]["loss"];
    EXPECT_NEAR(x, y, 1e-5 * std::abs(x)) << "step " << la[i]["step"];
  }
}

// Every rank's measured peak within 5% of the plan's per-rank estimate.
void expect_ranks_as_planned(const std::string& plan, const std::string& out, int ranks) {
  const double planned = json::parse(std::ifstream(plan))["memory"]["per_gpu"]["total"].get<double>();
  const json last = json_lines(out + "/metrics.jsonl").back();
  ASSERT_EQ(last["ranks"].size(), static_cast<std::size_t>(ranks));
  for (const json& r : last["ranks"]) {
    EXPECT_NEAR(r["peak_bytes"].get<double>(), planned, 0.05 * planned) << "rank " << r["rank"];
  }
}

// Runs `shape` into t/`name` and expects the losses and final weights of the
// one-rank run in `base`. Returns the plan file.
std::string expect_trains_like(const TempDir& t, const std::string& base, const std::string& name,
                               const JobShape& shape) {
  const std::string plan = plan_file(t, name, shape);
  const std::string out = t.file(name);
  EXPECT_EQ(run_runner(plan, out), 0) << out;
  expect_same_losses(base + "/metrics.jsonl", out + "/metrics.jsonl");
  EXPECT_LT(max_abs_difference(fp32_tensors(base + "/model/model.safetensors"),
                               fp32_tensors(out + "/model/model.safetensors")),
            kWeightTolerance);
  return plan;
}

// Waits for `pred` (polling files a child writes), up to `limit`.
template <typename Pred>
bool wait_for(Pred pred, std::chrono::seconds limit = std::chrono::seconds(120)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

pid_t start_runner(const std::string& plan, const std::string& out) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const std::string log = out + ".log";
    std::freopen(log.c_str(), "w", stderr);
    const std::string exe = kBin + "tailor-runner";
    ::execl(exe.c_str(), exe.c_str(), "--plan", plan.c_str(), "--out", out.c_str(), "--quiet", nullptr);
    _exit(127);
  }
  return pid;
}

int wait_exit(pid_t pid) {
  int st = 0;
  ::waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

TEST(RanksTest, APlanForTwoRanksOnTheCpuGivesEachHalfTheMemory) {
  TempDir t;
  const json one = json::parse(std::ifstream(plan_file(t, "one", {})));
  const json two = json::parse(std::ifstream(plan_file(t, "two", {.ranks = 2, .zero = 1})));
  EXPECT_EQ(two["strategy"]["num_gpus"], 2);
  EXPECT_EQ(two["strategy"]["zero_stage"], 1);
  EXPECT_NEAR(two["memory"]["budget_per_gpu"].get<double>(), one["memory"]["budget_per_gpu"].get<double>() / 2, 1);
}

TEST(RanksTest, TwoAndFourRanksTrainLikeOneRankAtEveryStage) {
  TempDir t;
  const std::string base = t.file("one");
  ASSERT_EQ(run_runner(plan_file(t, "one", {.calibrated = true}), base), 0);
  for (const JobShape& shape :
       {JobShape{.ranks = 2, .zero = 0, .calibrated = true}, JobShape{.ranks = 2, .zero = 1, .calibrated = true},
        JobShape{.ranks = 2, .zero = 2, .calibrated = true}, JobShape{.ranks = 2, .zero = 3, .calibrated = true},
        JobShape{.ranks = 4, .zero = 2, .calibrated = true}, JobShape{.ranks = 4, .zero = 3, .calibrated = true}}) {
    SCOPED_TRACE("ranks " + std::to_string(shape.ranks) + ", ZeRO-" + std::to_string(shape.zero));
    const std::string name = "r" + std::to_string(shape.ranks) + "z" + std::to_string(shape.zero);
    const std::string plan = expect_trains_like(t, base, name, shape);
    const std::string out = t.file(name);
    // Each rank's memory as planned for one rank of them.
    expect_ranks_as_planned(plan, out, shape.ranks);
    double states = 0, gradients = 0, weights = 0;
    const json last = json_lines(out + "/metrics.jsonl").back();
    for (const json& r : last["ranks"]) {
      states += r["optimizer_states_bytes"].get<double>();
      gradients += r["gradients_bytes"].get<double>();
      weights += r["weights_bytes"].get<double>();
    }
    // ZeRO-1 shares the states out, ZeRO-2 the gradients too, ZeRO-3 the
    // weights too; stage 0 keeps a copy of each on every rank.
    const json one_rank = json_lines(base + "/metrics.jsonl").back()["memory"];
    EXPECT_DOUBLE_EQ(states, one_rank["optimizer_states"].get<double>() * (shape.zero >= 1 ? 1 : shape.ranks));
    EXPECT_DOUBLE_EQ(gradients, one_rank["gradients"].get<double>() * (shape.zero >= 2 ? 1 : shape.ranks));
    EXPECT_DOUBLE_EQ(weights, one_rank["weights"].get<double>() * (shape.zero >= 3 ? 1 : shape.ranks));
  }
}

// One rank's run of `one`, then two ranks of the same job at each stage in
// `stages`: the same losses and final weights (`weights`, under the output
// folder).


void expect_two_ranks_like_one(JobShape one, const std::vector<int>& stages, const std::string& weights,
                               double tolerance = kWeightTolerance) {
  TempDir t;
  const std::string base = t.file("one");
  ASSERT_EQ(run_runner(plan_file(t, "one", one), base), 0);
  for (int zero : stages) {
    SCOPED_TRACE("ZeRO-" + std::to_string(zero));
    JobShape two = one;
    two.ranks = 2;
    two.zero = zero;
    const std::string name = "two-z" + std::to_string(zero);
    const std::string out = t.file(name);
    const std::string plan = plan_file(t, name, two);
    ASSERT_EQ(run_runner(plan, out), 0);
    expect_same_losses(base + "/metrics.jsonl", out + "/metrics.jsonl");
    if (one.recompute_every == 0 || (!one.lora && !one.qlora)) expect_ranks_as_planned(plan, out, 2);
    EXPECT_LT(max_abs_difference(fp32_tensors(base + "/" + weights), fp32_tensors(out + "/" + weights)), tolerance);
  }
}

// Evaluation shares the eval batches out (ZeRO-3: a rank out of batches
// still joins every gather) and sums the losses: the eval loss of one rank.
TEST(RanksTest, TwoRanksEvaluateLikeOneAtEveryStage) {
  TempDir t;
  // One 300-byte document: 5 packed rows, so 3 batches of 2, 2 and 1 rows,
  // two for rank 0 and one for rank 1.
  std::string text;
  while (text.size() < 300) text += "the tailor mends a coat by the river. ";
  text.resize(300);
  JobShape one{.steps = 4, .eval = t.write("eval.txt", text + "\n"), .eval_every = 2};
  const std::string base = t.file("one");
  ASSERT_EQ(run_runner(plan_file(t, "one", one), base), 0);
  auto evals = [](const std::string& out) {
    std::map<std::int64_t, double> by_step;
    for (const json& m : json_lines(out + "/metrics.jsonl")) {
      if (m.contains("eval_loss")) by_step[m["step"].get<std::int64_t>()] = m["eval_loss"].get<double>();
    }
    return by_step;
  };
  const auto expected = evals(base);
  ASSERT_EQ(expected.size(), 2u);
  // Each of the 300 bytes and the EOS predicted once.
  EXPECT_EQ(json_lines(base + "/metrics.jsonl")[1]["eval_tokens"].get<std::int64_t>(), 300 + 1);
  for (int zero : {0, 3}) {
    SCOPED_TRACE("ZeRO-" + std::to_string(zero));
    JobShape two = one;
    two.ranks = 2;
    two.zero = zero;
    const std::string name = "two-z" + std::to_string(zero);
    ASSERT_EQ(run_runner(plan_file(t, name, two), t.file(name)), 0);
    const auto got = evals(t.file(name));
    ASSERT_EQ(got.size(), expected.size());
    for (const auto& [step, loss] : expected) EXPECT_NEAR(got.at(step), loss, 1e-5 * loss) << "step " << step;
    EXPECT_EQ(json_lines(t.file(name) + "/metrics.jsonl")[3]["eval_tokens"],
              json_lines(base + "/metrics.jsonl")[3]["eval_tokens"]);
  }
}

// DPO (configs/examples/dpo-cpu.yaml: LoRA, the reference the adapters
// switched off): two ranks train and evaluate like one, at stage 0 and at
// ZeRO-3, whose reference forwards are collective too; 36 eval pairs in an
// odd number of batches, so at ZeRO-3 one rank runs its forwards on nothing.
// ORPO too at ZeRO-3: its NLL is a mean over the whole step's chosen
// tokens, whichever rank holds them. Reward models and KTO too.
TEST(RanksTest, DpoOrpoAndRewardModelsTrainAndEvaluateLikeOneRank) {
  TempDir t;
  std::ifstream pairs(std::string(TAILOR_SOURCE_DIR) + "/configs/data/preferences.jsonl");
  std::string eval, line;
  for (int i = 0; i < 36 && std::getline(pairs, line); ++i) eval += line + "\n";
  const std::string eval_file = t.write("eval.jsonl", eval);
  auto run = [&](const std::string& name, int ranks, int zero, const std::string& sets = "",
                 const std::string& eval_path = "") {
    const std::string plan = t.file(name + ".plan.json");
    EXPECT_EQ(shell(kBin + "tailor plan " + TAILOR_SOURCE_DIR + "/configs/examples/dpo-cpu.yaml --output json" + sets +
                    " --set training.max_steps=3 --set training.micro_batch_size=2 --set data.eval=" +
                    (eval_path.empty() ? eval_file : eval_path) + " --set resources.ranks=" + std::to_string(ranks) +
                    " --set strategy.zero_stage=" + std::to_string(zero) + " > " + plan + " 2> " + plan + ".err"),
              0);
    EXPECT_EQ(run_runner(plan, t.file(name), "--cache-dir " + t.file("cache")), 0) << name;
    return json_lines(t.file(name) + "/metrics.jsonl");
  };
  // Two ranks' runs against one rank's: each step's `step_keys`, and the
  // last step's evaluation `eval_keys`, within 1e-5 of the value.
  auto like_one_rank = [](const std::vector<json>& one, const std::vector<json>& two,
                          std::initializer_list<const char*> step_keys, std::initializer_list<const char*> eval_keys,
                          const std::string& what) {
    ASSERT_EQ(one.size(), 3u) << what;
    ASSERT_EQ(two.size(), one.size()) << what;
    for (std::size_t k = 0; k < one.size(); ++k) {
      for (const char* key : step_keys) {
        const double a = one[k][key], b = two[k][key];
        EXPECT_NEAR(b, a, 1e-5 * std::max(1.0, std::abs(a))) << what << " " << key << " at step " << k + 1;
      }
    }
    for (const char* key : eval_keys) {
      const double a = one[2][key], b = two[2][key];
      EXPECT_NEAR(b, a, 1e-5 * std::max(1.0, std::abs(a))) << what << " " << key;
    }
  };
  const auto one = run("one", 1, 0);
  ASSERT_EQ(one.size(), 3u);
  EXPECT_NEAR(one[0]["loss"].get<double>(), std::log(2.0), 1e-6);
  ASSERT_TRUE(one[2].contains("eval_rewards/accuracies"));
  EXPECT_EQ(one[2]["eval_tokens"], 36);  // pairs
  for (int zero : {0, 3}) {
    SCOPED_TRACE("ZeRO-" + std::to_string(zero));
    const auto two = run("two-z" + std::to_string(zero), 2, zero);
    ASSERT_EQ(two.size(), one.size());
    for (std::size_t k = 0; k < one.size(); ++k) {
      for (const char* key : {"loss", "rewards/chosen", "rewards/rejected", "logps/chosen"}) {
        const double a = one[k][key], b = two[k][key];
        EXPECT_NEAR(b, a, 1e-5 * std::max(1.0, std::abs(a))) << key << " at step " << k + 1;
      }
    }
    for (const char* key : {"eval_loss", "eval_rewards/accuracies", "eval_rewards/margins"}) {
      const double a = one[2][key], b = two[2][key];
      EXPECT_NEAR(b, a, 1e-5 * std::max(1.0, std::abs(a))) << key;
    }
    EXPECT_EQ(two[2]["eval_tokens"], 36);
  }
  const std::string orpo = " --set training.method=orpo --set training.beta=null --set training.loss_type=null";
  like_one_rank(run("orpo-one", 1, 0, orpo), run("orpo-two-z3", 2, 3, orpo),
                {"loss", "nll_loss", "log_odds_ratio", "rewards/chosen", "logps/rejected"},
                {"eval_loss", "eval_nll_loss", "eval_rewards/margins"}, "orpo");
  // Two weighted dpo losses with WPO's weights and LD-DPO's split rows at
  // ZeRO-3: the weights' pass of the head while the head is gathered, and
  // each row split where its pair's shorter completion ends.
  const std::string options =
      " --set training.loss_type=[sigmoid,bco_pair] --set training.loss_weights=[1,0.5]"
      " --set training.use_weighting=true --set training.ld_alpha=0.4";
  like_one_rank(run("options-one", 1, 0, options), run("options-two-z3", 2, 3, options),
                {"loss", "rewards/chosen", "rewards/margins", "logps/chosen"}, {"eval_loss", "eval_rewards/margins"},
                "dpo with a weighted list, WPO and LD-DPO");
  // A reward model: its score head sharded with the last unit, the
  // extremes of the scores taken over the ranks.
  // (fp32 pinned: a CPU with bf16 in hardware would plan bf16 weights,
  // whose rounding the ranks' other order of sums would show.)
  const std::string reward = " --set training.method=reward --set training.beta=null --set training.loss_type=null"
                             " --set strategy.adapter=none --set strategy.lora=null --set strategy.precision=fp32";
  like_one_rank(run("reward-one", 1, 0, reward), run("reward-two-z3", 2, 3, reward),
                {"loss", "accuracy", "margin", "min_reward", "mean_reward", "max_reward"},
                {"eval_loss", "eval_accuracy", "eval_margin", "eval_min_reward", "eval_max_reward"}, "reward");
  // Beside LoRA: the score trained whole with the adapters, sharded with
  // the last unit at ZeRO-3.
  const std::string reward_lora =
      " --set training.method=reward --set training.beta=null --set "
      "training.loss_type=null --set strategy.adapter=lora --set strategy.precision=fp32";
  const auto reward_lora_one = run("reward-lora-one", 1, 0, reward_lora);
  like_one_rank(reward_lora_one, run("reward-lora-two-z3", 2, 3, reward_lora), {"loss", "margin", "mean_reward"}, {},
                "reward beside LoRA");
  ASSERT_EQ(reward_lora_one.size(), 3u);
  EXPECT_LT(reward_lora_one[2]["loss"].get<double>(), reward_lora_one[0]["loss"].get<double>());
  // KTO beside LoRA at ZeRO-3: the KL rows' forwards (the trained model's,
  // then the reference's with the adapters off) are collective too, and the
  // KL estimate is each micro-batch's, so that two ranks train as one rank
  // with accumulation does.
  const std::string kto = " --set training.method=kto --set training.loss_type=kto";
  const auto kto_one = run("kto-one", 1, 0, kto);
  like_one_rank(kto_one, run("kto-two-z3", 2, 3, kto), {"loss", "kl", "rewards/chosen", "logps/rejected"},
                {"eval_loss", "eval_kl", "eval_rewards/margins"}, "kto");
  ASSERT_EQ(kto_one.size(), 3u);
  EXPECT_NEAR(kto_one[0]["loss"].get<double>(), 0.5, 1e-6);
  // KTO on labelled completions (configs/data/feedback.jsonl, two desirable
  // to one undesirable): each kind's count summed over the ranks, so the
  // means are the step's; 37 eval completions, an odd number of batches.
  {
    std::ifstream feedback(std::string(TAILOR_SOURCE_DIR) + "/configs/data/feedback.jsonl");
    std::string labelled;
    for (int i = 0; i < 37 && std::getline(feedback, line); ++i)
      labelled += line + "\n";
    const std::string labelled_eval = t.write("labelled_eval.jsonl", labelled);
    const std::string unpaired =
        kto + " --set data.label_field=label --set data.train=" + TAILOR_SOURCE_DIR + "/configs/data/feedback.jsonl";
    const auto unpaired_one = run("kto-labelled-one", 1, 0, unpaired, labelled_eval);
    like_one_rank(unpaired_one, run("kto-labelled-two-z3", 2, 3, unpaired, labelled_eval),
                  {"loss", "kl", "rewards/chosen", "rewards/rejected", "logps/chosen"},
                  {"eval_loss", "eval_kl", "eval_rewards/margins"}, "kto on labelled completions");
    ASSERT_EQ(unpaired_one.size(), 3u);
    EXPECT_EQ(unpaired_one[2]["eval_tokens"], 37);  // completions, one row each
    EXPECT_FALSE(unpaired_one[2].contains("eval_rewards/accuracies"));
  }
  // From the adapter the first run wrote (model.adapter): the reference is
  // that adapter frozen (separate, the plan's choice), kept whole on every
  // rank at ZeRO-3 while the trained copy is sharded.
  const std::string from = " --set model.adapter=" + t.file("one") + "/adapter";
  const auto from_one = run("from-one", 1, 0, from);
  {
    std::ifstream plan_in(t.file("from-one.plan.json"));
    EXPECT_EQ(json::parse(plan_in)["strategy"]["reference"], "separate");
  }
  like_one_rank(from_one, run("from-two-z3", 2, 3, from), {"loss", "rewards/chosen", "logps/rejected"},
                {"eval_loss", "eval_rewards/margins"}, "dpo from an adapter");
  ASSERT_EQ(from_one.size(), 3u);
  EXPECT_EQ(from_one[0]["rewards/chosen"].get<double>(), 0.0);  // the policy is its reference
  // A full fine-tune's reference precomputed (the plan's choice): two ranks
  // at ZeRO-3 (where a frozen copy cannot go) score their shares of the
  // pairs with the whole model before it is sharded, and train like one.
  const std::string full = " --set strategy.adapter=none --set strategy.lora=null --set strategy.precision=fp32";
  const std::string plan = t.file("full.plan.json");
  ASSERT_EQ(shell(kBin + "tailor plan " + TAILOR_SOURCE_DIR + "/configs/examples/dpo-cpu.yaml --output json" + full +
                  " > " + plan),
            0);
  std::ifstream plan_in(plan);
  EXPECT_EQ(json::parse(plan_in)["strategy"]["reference"], "precomputed");
  const auto full_one = run("full-one", 1, 0, full);
  const auto full_two = run("full-two-z3", 2, 3, full);
  ASSERT_EQ(full_one.size(), 3u);
  ASSERT_EQ(full_two.size(), 3u);
  for (std::size_t k = 0; k < full_one.size(); ++k) {
    for (const char* key : {"loss", "rewards/chosen", "rewards/margins", "logps/rejected"}) {
      const double a = full_one[k][key], b = full_two[k][key];
      EXPECT_NEAR(b, a, 1e-5 * std::max(1.0, std::abs(a))) << "precomputed " << key << " at step " << k + 1;
    }
  }
  for (const char* key : {"eval_loss", "eval_rewards/accuracies", "eval_rewards/margins"}) {
    const double a = full_one[2][key], b = full_two[2][key];
    EXPECT_NEAR(b, a, 1e-5 * std::max(1.0, std::abs(a))) << "precomputed " << key;
  }
  // The frozen copy pinned: at ZeRO-3 a part of it on each rank, gathered
  // for its forwards (and, at an evaluation whose batches run out on one
  // rank, for the forwards that rank runs on nothing).
  const std::string copy = full + " --set strategy.reference=separate";
  const auto copy_one = run("copy-one", 1, 0, copy);
  const auto copy_two = run("copy-two-z3", 2, 3, copy);
  like_one_rank(copy_one, copy_two, {"loss", "rewards/chosen", "rewards/margins", "logps/rejected"},
                {"eval_loss", "eval_rewards/accuracies", "eval_rewards/margins"}, "separate at ZeRO-3");
  {
    std::ifstream copy_plan(t.file("copy-two-z3.plan.json"));
    const json strategy = json::parse(copy_plan)["strategy"];
    EXPECT_EQ(strategy["reference"], "separate");
    EXPECT_EQ(strategy["zero_stage"], 3);
  }
  // Each rank holds half of the weights and half of the copy.
  ASSERT_EQ(copy_two.size(), 3u);
  const double whole = copy_one[2]["memory"]["weights"], part = copy_two[2]["memory"]["weights"];
  EXPECT_NEAR(part / whole, 0.5, 0.01);
  // Under parameter offload the parts of both live in host memory, none on
  // the device, and the training is the same.
  const auto copy_offload = run("copy-two-z3-offload", 2, 3, copy + " --set strategy.offload=optimizer_and_params");
  like_one_rank(copy_one, copy_offload, {"loss", "rewards/chosen", "rewards/margins"}, {"eval_loss"},
                "separate at ZeRO-3, offloaded");
  ASSERT_EQ(copy_offload.size(), 3u);
  EXPECT_EQ(copy_offload[2]["memory"]["weights"].get<double>(), 0.0);
  // The host ledger reports the copy's parts: the same split of the same
  // tensors in the same dtype as the model's.
  EXPECT_EQ(copy_offload[2]["host"]["reference_bytes"], copy_offload[2]["host"]["parameters_bytes"]);
}

TEST(RanksTest, LoraAdaptersTrainLikeOneRankAtEveryStage) {
  expect_two_ranks_like_one({.lora = true}, {0, 1, 2, 3}, "adapter/adapter_model.safetensors");
}

// The embedding and head trained whole beside the adapters
// (modules_to_save): replicated under ZeRO-1/2, a part on each rank under
// ZeRO-3 (gathered onto rank 0 for the adapter folder), on the host beside
// the optimizer or with the parameters offloaded; each as one rank trains
// them, in the memory the plan gives each rank.
TEST(RanksTest, ModulesToSaveTrainLikeOneRankAtEveryStageAndOffloaded) {
  const JobShape one{.lora = true, .whole = true, .merge = false};
  expect_two_ranks_like_one(one, {1, 3}, "adapter/adapter_model.safetensors");
  TempDir t;
  const std::string base = t.file("one");
  ASSERT_EQ(run_runner(plan_file(t, "one", one), base), 0);
  for (const auto& [zero, offload] : {std::pair<int, const char*>{2, "optimizer"}, {3, "optimizer_and_params"}}) {
    SCOPED_TRACE(std::string("ZeRO-") + std::to_string(zero) + ", offload " + offload);
    JobShape two = one;
    two.ranks = 2;
    two.zero = zero;
    two.offload = offload;
    const std::string name = std::string("two-") + offload;
    const std::string out = t.file(name);
    const std::string plan = plan_file(t, name, two);
    ASSERT_EQ(run_runner(plan, out), 0);
    expect_same_losses(base + "/metrics.jsonl", out + "/metrics.jsonl");
    expect_ranks_as_planned(plan, out, 2);
    EXPECT_LT(max_abs_difference(fp32_tensors(base + "/adapter/adapter_model.safetensors"),
                                 fp32_tensors(out + "/adapter/adapter_model.safetensors")),
              kWeightTolerance);
  }
}

// ZeRO-3 cuts the NF4 storage (codes and both levels of scales) like any
// other tensor.
TEST(RanksTest, QloraTrainsLikeOneRankWithItsQuantisedBaseSharded) {
  expect_two_ranks_like_one({.qlora = true}, {2, 3}, "adapter/adapter_model.safetensors");
}

// ZeRO-3 splits 8-bit states at block boundaries, so that every block is
// the one a single rank quantises.
TEST(RanksTest, EightBitAdamwTrainsLikeOneRankUnderZeroThree) {
  expect_two_ranks_like_one({.optimizer = "adamw_8bit"}, {1, 3}, "model/model.safetensors", kWeightToleranceEightBit);
}

// Lion's update is a sign: where the interpolated momentum is within a
// rounding of zero, two ranks' sums (added in another order) may take the
// other sign and move that weight by 2 lr. Anything else (a shard updated
// twice or not at all) would move many weights: at most one in 10,000 may
// differ.
TEST(RanksTest, LionTrainsLikeOneRankUnderZeroOneAndThree) {
  TempDir t;
  const JobShape one{.optimizer = "lion"};
  const std::string base = t.file("one");
  ASSERT_EQ(run_runner(plan_file(t, "one", one), base), 0);
  const auto expected = fp32_tensors(base + "/model/model.safetensors");
  for (int zero : {1, 3}) {
    SCOPED_TRACE("ZeRO-" + std::to_string(zero));
    JobShape two = one;
    two.ranks = 2;
    two.zero = zero;
    const std::string out = t.file("two-z" + std::to_string(zero));
    ASSERT_EQ(run_runner(plan_file(t, "two-z" + std::to_string(zero), two), out), 0);
    expect_same_losses(base + "/metrics.jsonl", out + "/metrics.jsonl");
    const auto got = fp32_tensors(out + "/model/model.safetensors");
    ASSERT_EQ(got.size(), expected.size());
    std::size_t differing = 0, total = 0;
    for (const auto& [name, want] : expected) {
      const std::vector<float>& have = got.at(name);
      ASSERT_EQ(have.size(), want.size()) << name;
      for (std::size_t i = 0; i < want.size(); ++i) differing += std::abs(double(have[i]) - want[i]) > kWeightTolerance;
      total += want.size();
    }
    EXPECT_LE(differing * 10000, total) << differing << " of " << total << " weights differ";
  }
}

// Recomputed layers run a backward inside backward: the hooks that sum
// (stage 0, overlapped) or send (ZeRO-2) gradients fire from there too.
TEST(RanksTest, RecomputedLayersTrainLikeOneRank) {
  expect_two_ranks_like_one({.recompute_every = 1, .calibrated = true}, {0, 2, 3}, "model/model.safetensors");
}

TEST(RanksTest, AZeroOneCheckpointResumesOnAnotherRankCount) {
  TempDir t;
  const std::string base = t.file("one");
  ASSERT_EQ(run_runner(plan_file(t, "one", {.steps = 4}), base), 0);
  // Two ranks to step 2, then one rank from that checkpoint to step 4.
  const std::string out = t.file("resumed");
  ASSERT_EQ(run_runner(plan_file(t, "two", {.ranks = 2, .zero = 1, .steps = 2}), out), 0);
  ASSERT_EQ(run_runner(plan_file(t, "one-more", {.steps = 4}), out, "--resume"), 0);
  const auto events = json_lines(out + "/events.jsonl");
  bool resumed = false;
  for (const json& e : events) resumed = resumed || (e["event"] == "resume" && e["step"] == 2);
  EXPECT_TRUE(resumed);
  expect_same_losses(base + "/metrics.jsonl", out + "/metrics.jsonl");
  EXPECT_LT(max_abs_difference(fp32_tensors(base + "/model/model.safetensors"),
                               fp32_tensors(out + "/model/model.safetensors")),
            kWeightTolerance);
}

// ZeRO-3's checkpoint holds whole tensors and whole states: it resumes on
// one rank, and one rank's on four ZeRO-3 ranks (each taking its parts).
TEST(RanksTest, AZeroThreeCheckpointResumesOnAnotherRankCountAndTheReverse) {
  for (const char* optimizer : {"adamw", "adamw_8bit"}) {
    SCOPED_TRACE(optimizer);
    TempDir t;
    const std::string base = t.file("one");
    ASSERT_EQ(run_runner(plan_file(t, "one", {.optimizer = optimizer}), base), 0);
    const std::string down = t.file("down"), up = t.file("up");
    ASSERT_EQ(run_runner(plan_file(t, "two", {.ranks = 2, .zero = 3, .optimizer = optimizer, .steps = 2}), down), 0);
    ASSERT_EQ(run_runner(plan_file(t, "one-more", {.optimizer = optimizer}), down, "--resume"), 0);
    ASSERT_EQ(run_runner(plan_file(t, "one-half", {.optimizer = optimizer, .steps = 2}), up), 0);
    ASSERT_EQ(run_runner(plan_file(t, "four", {.ranks = 4, .zero = 3, .optimizer = optimizer}), up, "--resume"), 0);
    for (const std::string& out : {down, up}) {
      expect_same_losses(base + "/metrics.jsonl", out + "/metrics.jsonl");
      EXPECT_LT(max_abs_difference(fp32_tensors(base + "/model/model.safetensors"),
                                   fp32_tensors(out + "/model/model.safetensors")),
                std::string(optimizer) == "adamw" ? kWeightTolerance : kWeightToleranceEightBit)
          << out;
    }
  }
}

// Offload keeps the optimizer's copies, states and master weights in the
// host ledger and runs the update there: the same numbers as on the
// device, and the device holds what the plan says.
TEST(RanksTest, AnOffloadedOptimizerTrainsLikeOneOnTheDevice) {
  TempDir t;
  const std::string base = t.file("one");
  ASSERT_EQ(run_runner(plan_file(t, "one", {}), base), 0);
  const json one_rank = json_lines(base + "/metrics.jsonl").back()["memory"];
  for (const JobShape& shape : {JobShape{.ranks = 1, .zero = 1, .offload = "optimizer"},
                                JobShape{.ranks = 2, .zero = 2, .offload = "optimizer"},
                                JobShape{.ranks = 2, .zero = 3, .offload = "optimizer"}}) {
    SCOPED_TRACE("ranks " + std::to_string(shape.ranks) + ", ZeRO-" + std::to_string(shape.zero));
    const std::string name = "offload-r" + std::to_string(shape.ranks) + "z" + std::to_string(shape.zero);
    const std::string plan = expect_trains_like(t, base, name, shape);
    const std::string out = t.file(name);
    const json last = json_lines(out + "/metrics.jsonl").back();
    EXPECT_EQ(last["memory"]["optimizer_states"], 0);
    // Rank 0's share of the states, on the host.
    EXPECT_NEAR(last["host"]["optimizer_states_bytes"].get<double>(),
                one_rank["optimizer_states"].get<double>() / shape.ranks, 0.02 * one_rank["optimizer_states"].get<double>());
    const double planned = json::parse(std::ifstream(plan))["memory"]["per_gpu"]["total"].get<double>();
    if (shape.ranks > 1) {
      expect_ranks_as_planned(plan, out, shape.ranks);
    } else {
      EXPECT_NEAR(last["memory"]["peak_bytes"].get<double>(), planned, 0.05 * planned);
    }
  }
}

// What does not fit the device's budget with the optimizer on it fits
// with the optimizer offloaded, and trains within that budget.
TEST(RanksTest, AJobOverTheDeviceBudgetFitsWithTheOptimizerOffloaded) {
  TempDir t;
  const JobShape small{.zero = 0, .offload = "none", .host_memory = "50MiB", .calibrated = true};
  JobShape offloaded = small;
  offloaded.zero = 1;
  offloaded.offload = "optimizer";
  const std::string refused = t.write("refused.yaml", spec_text(small));
  EXPECT_EQ(shell(kBin + "tailor plan " + refused + " > " + t.file("refused.out") + " 2>&1"), 3);  // does not fit
  const std::string plan = plan_file(t, "offloaded", offloaded);
  const json p = json::parse(std::ifstream(plan));
  const double budget = p["memory"]["budget_per_gpu"].get<double>();
  const std::string out = t.file("offloaded");
  ASSERT_EQ(run_runner(plan, out), 0);
  EXPECT_LE(json_lines(out + "/metrics.jsonl").back()["memory"]["peak_bytes"].get<double>(), budget);
  // The same job with its optimizer on the device, held to that budget:
  // out of memory (exit 3).
  const std::string device = plan_file(t, "device", {.zero = 0, .calibrated = true});
  EXPECT_EQ(run_runner(device, t.file("device"), "--memory-limit " + std::to_string(static_cast<std::int64_t>(budget))), 3);
}

// Parameter offload: every rank's ZeRO-3 parts, their gradients and the
// optimizer in the host ledger, updated there in place. The same numbers
// as one rank on the device; the device holds what the plan says (the
// gathered unit, activations, the gradient in flight) and the host ledgers
// add up to the plan's host bytes.
TEST(RanksTest, OffloadedParametersTrainLikeOnesOnTheDevice) {
  TempDir t;
  for (const bool lora : {false, true}) {
    const std::string base = t.file(lora ? "one-lora" : "one");
    ASSERT_EQ(run_runner(plan_file(t, lora ? "one-lora" : "one", {.lora = lora}), base), 0);
    for (const int ranks : {1, 2}) {
      if (lora && ranks == 1) continue;
      SCOPED_TRACE(std::to_string(ranks) + " ranks" + (lora ? ", LoRA" : ""));
      const JobShape shape{.ranks = ranks, .zero = 3, .lora = lora, .offload = "optimizer_and_params"};
      const std::string name = "params-r" + std::to_string(ranks) + (lora ? "-lora" : "");
      const std::string plan = expect_trains_like(t, base, name, shape);
      const json p = json::parse(std::ifstream(plan));
      const json last = json_lines(t.file(name) + "/metrics.jsonl").back();
      for (const char* part : {"weights", "adapter", "gradients", "optimizer_states", "master_weights"}) {
        EXPECT_EQ(last["memory"][part], 0) << part;
      }
      const double planned = p["memory"]["per_gpu"]["total"].get<double>();
      EXPECT_NEAR(last["memory"]["peak_bytes"].get<double>(), planned, 0.05 * planned);
      if (ranks > 1) expect_ranks_as_planned(plan, t.file(name), ranks);
      // Rank 0's ledger: its share of the host bytes (the parts split evenly).
      const double host = p["memory"]["host_total"].get<double>();
      EXPECT_GT(last["host"]["parameters_bytes"].get<double>(), 0);
      EXPECT_NEAR(last["host"]["bytes"].get<double>(), host / ranks, 0.01 * host);
    }
  }
}

// The three rungs under one device budget: the optimizer on the device does
// not fit, nor offloaded alone; with the parameters offloaded too the job
// plans and trains within the budget, and the others, held to it, run out
// of memory.
TEST(RanksTest, AJobOverTheDeviceBudgetFitsWithTheParametersOffloaded) {
  TempDir t;
  JobShape shape{.zero = 1, .offload = "optimizer", .host_memory = "20MiB", .calibrated = true};
  const std::string refused = t.write("refused.yaml", spec_text(shape));
  EXPECT_EQ(shell(kBin + "tailor plan " + refused + " > " + t.file("refused.out") + " 2>&1"), 3);
  shape.zero = 3;
  shape.offload = "optimizer_and_params";
  const std::string plan = plan_file(t, "params", shape);
  const double budget = json::parse(std::ifstream(plan))["memory"]["budget_per_gpu"].get<double>();
  const std::string out = t.file("params");
  ASSERT_EQ(run_runner(plan, out), 0);
  EXPECT_LE(json_lines(out + "/metrics.jsonl").back()["memory"]["peak_bytes"].get<double>(), budget);
  const std::string optimizer = plan_file(t, "optimizer", {.zero = 1, .offload = "optimizer", .calibrated = true});
  EXPECT_EQ(run_runner(optimizer, t.file("optimizer"),
                       "--memory-limit " + std::to_string(static_cast<std::int64_t>(budget))),
            3);
}

// Sharded ranks write their own parts of a checkpoint, and any checkpoint
// exports into the job's output model as the end of training writes it:
// the last one into the same bytes, an earlier one into what a run that
// stopped there would have written.
TEST(RanksTest, ShardedCheckpointsExportIntoOneHuggingFaceFolder) {
  TempDir t;
  const std::string job = t.file("job");
  const std::string plan = plan_file(t, "job", {.ranks = 2, .zero = 3, .lora = true, .checkpoint_every = 2});
  ASSERT_EQ(run_runner(plan, job), 0);
  const std::string last = job + "/checkpoints/step-000004";
  for (const char* f : {"rank-00000-of-00002.safetensors", "rank-00001-of-00002.safetensors", "state.json"}) {
    EXPECT_TRUE(std::filesystem::exists(last + "/" + f)) << f;
  }
  EXPECT_FALSE(std::filesystem::exists(last + "/model.pt"));
  const std::string whole = t.file("export-4");
  ASSERT_EQ(shell(kBin + "tailor-runner --plan " + plan + " --out " + whole + " --export " + last + " --quiet"), 0);
  EXPECT_EQ(max_abs_difference(fp32_tensors(job + "/model/model.safetensors"),
                               fp32_tensors(whole + "/model/model.safetensors")),
            0.0);
  EXPECT_EQ(max_abs_difference(fp32_tensors(job + "/adapter/adapter_model.safetensors"),
                               fp32_tensors(whole + "/adapter/adapter_model.safetensors")),
            0.0);
  const std::string two_steps = t.file("two-steps");
  ASSERT_EQ(run_runner(plan_file(t, "two-steps", {.lora = true, .steps = 2}), two_steps), 0);
  const std::string earlier = t.file("export-2");
  ASSERT_EQ(shell(kBin + "tailor-runner --plan " + plan + " --out " + earlier + " --export " + job +
                  "/checkpoints/step-000002 --quiet"),
            0);
  EXPECT_LT(max_abs_difference(fp32_tensors(two_steps + "/model/model.safetensors"),
                               fp32_tensors(earlier + "/model/model.safetensors")),
            kWeightTolerance);
  // No such checkpoint: bad input, named.
  EXPECT_EQ(shell(kBin + "tailor-runner --plan " + plan + " --out " + t.file("none") + " --export " + job +
                  "/checkpoints/step-000003 --quiet 2> " + t.file("none.err")),
            2);
  std::ifstream err(t.file("none.err"));
  const std::string message((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  EXPECT_NE(message.find("step-000003"), std::string::npos) << message;
  // --merge belongs to --export: alone it is refused, not ignored.
  EXPECT_EQ(shell(kBin + "tailor-runner --plan " + plan + " --out " + t.file("merge-alone") + " --merge --quiet 2> " +
                  t.file("merge.err")),
            2);
}

// Under ZeRO-3 a LoRA job's checkpoints hold the adapters only (each rank
// its parts of them, beside the base's fingerprint) and, with output.merge
// false (the adapters' default), only the adapters are gathered at the end:
// adapter/ is the merged run's, and there is no model/.
TEST(RanksTest, ZeroThreeAdapterJobsCheckpointAndWriteOnlyTheAdapters) {
  TempDir t;
  const std::string merged = t.file("merged"), adapter_only = t.file("adapter-only");
  ASSERT_EQ(run_runner(plan_file(t, "merged", {.ranks = 2, .zero = 3, .lora = true, .checkpoint_every = 2}), merged), 0);
  ASSERT_EQ(run_runner(plan_file(t, "adapter-only",
                                 {.ranks = 2, .zero = 3, .lora = true, .checkpoint_every = 2, .merge = false}),
                       adapter_only),
            0);
  EXPECT_TRUE(std::filesystem::exists(merged + "/model/model.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(adapter_only + "/model"));
  EXPECT_EQ(max_abs_difference(fp32_tensors(merged + "/adapter/adapter_model.safetensors"),
                               fp32_tensors(adapter_only + "/adapter/adapter_model.safetensors")),
            0.0);
  const std::string last = adapter_only + "/checkpoints/step-000004";
  std::ifstream in(last + "/state.json");
  const json state = json::parse(in, nullptr, false);
  ASSERT_FALSE(state.is_discarded());
  EXPECT_EQ(state["params"], "trainable");
  EXPECT_FALSE(state["base_fingerprint"].empty());
  // The shards hold the adapters and their states: a small part of the
  // base's 4-byte weights.
  std::uintmax_t shards = 0;
  for (const char* f : {"rank-00000-of-00002.safetensors", "rank-00001-of-00002.safetensors"}) {
    shards += std::filesystem::file_size(last + "/" + f);
  }
  const std::uintmax_t base = std::filesystem::file_size(merged + "/model/model.safetensors");
  EXPECT_LT(shards * 4, base) << shards << " bytes of shards for a base of " << base;
}

// A checkpoint whose files changed after they were written is passed over
// at resume, with an event, for the one before it; one rank and sharded
// ranks alike. The run then ends as an uninterrupted one would.
TEST(RanksTest, ADamagedNewestCheckpointResumesFromTheOneBefore) {
  TempDir t;
  const std::string base = t.file("base");
  ASSERT_EQ(run_runner(plan_file(t, "base", {.steps = 6}), base), 0);
  for (const JobShape& shape : {JobShape{.steps = 4, .checkpoint_every = 2},
                                JobShape{.ranks = 2, .zero = 3, .steps = 4, .checkpoint_every = 2}}) {
    SCOPED_TRACE(std::to_string(shape.ranks) + " ranks");
    const std::string out = t.file("job-" + std::to_string(shape.ranks));
    ASSERT_EQ(run_runner(plan_file(t, "first-" + std::to_string(shape.ranks), shape), out), 0);
    const std::string newest = out + "/checkpoints/step-000004";
    const std::string file =
        newest + (shape.ranks > 1 ? "/rank-00001-of-00002.safetensors" : "/optimizer.pt");
    {  // 4 KiB of other bytes in the middle of the file, its size unchanged
      std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(file) / 2));
      const std::string noise(4096, '\x5a');
      f.write(noise.data(), static_cast<std::streamsize>(noise.size()));
    }
    JobShape more = shape;
    more.steps = 6;
    ASSERT_EQ(run_runner(plan_file(t, "more-" + std::to_string(shape.ranks), more), out, "--resume"), 0);
    bool skipped = false;
    std::int64_t resumed = -1;
    for (const json& e : json_lines(out + "/events.jsonl")) {
      if (e["event"] == "checkpoint_skipped") {
        skipped = true;
        EXPECT_EQ(e["checkpoint"], newest);
        EXPECT_NE(e["message"].get<std::string>().find("is damaged"), std::string::npos) << e;
        EXPECT_TRUE(std::filesystem::exists(e["moved_to"].get<std::string>())) << e;
      }
      if (e["event"] == "resume") resumed = e["step"];
    }
    EXPECT_TRUE(skipped);
    EXPECT_EQ(resumed, 2);
    EXPECT_LT(max_abs_difference(fp32_tensors(base + "/model/model.safetensors"),
                                 fp32_tensors(out + "/model/model.safetensors")),
              kWeightTolerance);
  }
}

// A checkpoint of AdamW resumes under 8-bit AdamW and the other way round
// (an out-of-memory re-plan may switch between them): the states are
// converted, the resume event says so, and training goes on (the losses
// near a run under the second optimizer throughout; the weights are not
// compared: the two optimizers' first steps differ); one rank and ZeRO-3
// ranks alike. optimizer_test.cpp checks the conversion itself.
TEST(RanksTest, ACheckpointResumesUnderTheOtherAdamw) {
  TempDir t;
  for (const char* from : {"adamw", "adamw_8bit"}) {
    const char* to = std::string(from) == "adamw" ? "adamw_8bit" : "adamw";
    for (const int ranks : {1, 2}) {
      SCOPED_TRACE(std::string(from) + " -> " + to + ", " + std::to_string(ranks) + " ranks");
      const int zero = ranks > 1 ? 3 : 0;
      const std::string name = std::string(from) + "-" + std::to_string(ranks);
      const std::string base = t.file(name + "-base");
      ASSERT_EQ(run_runner(plan_file(t, name + "-base", {.ranks = ranks, .zero = zero, .optimizer = to}), base), 0);
      const std::string out = t.file(name);
      ASSERT_EQ(run_runner(plan_file(t, name + "-first", {.ranks = ranks, .zero = zero, .optimizer = from, .steps = 2}),
                           out),
                0);
      ASSERT_EQ(run_runner(plan_file(t, name + "-then", {.ranks = ranks, .zero = zero, .optimizer = to}), out,
                           "--resume"),
                0);
      std::string converted;
      for (const json& e : json_lines(out + "/events.jsonl")) {
        if (e["event"] == "resume") converted = e.value("optimizer_converted", "");
      }
      EXPECT_EQ(converted, std::string(from) + " -> " + to);
      // The last two steps: the first two ran under the other optimizer,
      // so only the losses after them compare, loosely (8-bit moments).
      const auto a = json_lines(base + "/metrics.jsonl"), b = json_lines(out + "/metrics.jsonl");
      ASSERT_EQ(b.back()["step"], 4);
      EXPECT_NEAR(a.back()["loss"].get<double>(), b.back()["loss"].get<double>(), 0.02 * a.back()["loss"].get<double>());
    }
  }
}

// A loss that turns NaN or infinite fails the run with an event saying so
// and an exit of its own (5, diverged), rather than training on and
// reporting success.
TEST(RanksTest, ANonFiniteLossFailsTheRunWithItsOwnEvent) {
  TempDir t;
  std::string spec = spec_text({.steps = 6});
  const std::string lr = "lr: 2e-3";
  spec.replace(spec.find(lr), lr.size(), "lr: 1e30");
  const std::string file = t.write("diverges.yaml", spec);
  const std::string plan = t.file("diverges.plan.json");
  ASSERT_EQ(shell(kBin + "tailor plan " + file + " --output json > " + plan + " 2> " + plan + ".err"), 0);
  const std::string out = t.file("diverges");
  EXPECT_EQ(run_runner(plan, out), 5);
  const auto events = json_lines(out + "/events.jsonl");
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back()["exit_code"], 5) << events.back();
  const json& before = events[events.size() - 2];
  EXPECT_EQ(before["event"], "nonfinite_loss") << before;
  EXPECT_EQ(events.back()["event"], "error");
  EXPECT_NE(events.back()["message"].get<std::string>().find("diverged"), std::string::npos) << events.back();
  EXPECT_FALSE(std::filesystem::exists(out + "/model")) << "no model from a diverged run";
}

// A run none of whose checkpoints could be written (a file where the
// folder goes) keeps its model but does not end as a success: it could not
// have resumed from anything.
TEST(RanksTest, ARunWhoseEveryCheckpointFailedDoesNotSucceed) {
  TempDir t;
  const std::string out = t.file("job");
  std::filesystem::create_directories(out);
  t.write("job/checkpoints", "in the way\n");
  ASSERT_EQ(run_runner(plan_file(t, "blocked", {.steps = 4, .checkpoint_every = 2}), out), 1);
  const auto events = json_lines(out + "/events.jsonl");
  int failed = 0;
  for (const json& e : events) failed += e["event"] == "checkpoint_error";
  EXPECT_EQ(failed, 2);  // step 2 and the last
  EXPECT_EQ(events.back()["event"], "error") << events.back();
  EXPECT_NE(events.back()["message"].get<std::string>().find("none of this run's 2 checkpoints could be written"),
            std::string::npos)
      << events.back();
  EXPECT_TRUE(std::filesystem::exists(out + "/model/model.safetensors"));
  // One written checkpoint is enough to succeed.
  const std::string fine = t.file("fine");
  EXPECT_EQ(run_runner(plan_file(t, "fine", {.steps = 2, .checkpoint_every = 1}), fine), 0);
}

TEST(RanksTest, KillingOneRankStopsTheJobAtOnceAndItResumesFromTheLastCheckpoint) {
  TempDir t;
  const std::string out = t.file("job");
  const pid_t launcher = start_runner(plan_file(t, "long", {.ranks = 2, .zero = 2, .steps = 100000, .checkpoint_every = 2}), out);
  // Rank 1's process id from its start event, once rank 0 has checkpointed.
  std::int64_t victim = 0, rank0 = 0;
  ASSERT_TRUE(wait_for([&] {
    for (const json& e : json_lines(out + "/events.jsonl")) {
      if (e["event"] == "start") rank0 = e["rank_pid"];
      if (e["event"] == "checkpoint") return true;
    }
    return false;
  }));
  for (const json& e : json_lines(dist::rank_events_path(out, 1))) {
    if (e["event"] == "start") victim = e["rank_pid"];
  }
  ASSERT_GT(victim, 0);
  ASSERT_EQ(::kill(static_cast<pid_t>(victim), SIGKILL), 0);
  EXPECT_EQ(wait_exit(launcher), 1);  // a failure: retried from the checkpoint
  EXPECT_NE(::kill(static_cast<pid_t>(rank0), 0), 0) << "rank 0 outlived the job";
  const json last = json_lines(out + "/events.jsonl").back();
  EXPECT_EQ(last["event"], "error");
  EXPECT_EQ(last["rank"], 1);
  EXPECT_NE(last["message"].get<std::string>().find("rank 1 was killed by signal 9"), std::string::npos) << last;
  std::int64_t saved = 0;
  for (const json& e : json_lines(out + "/events.jsonl")) {
    if (e["event"] == "checkpoint") saved = e["step"];
  }
  ASSERT_GT(saved, 0);
  ASSERT_EQ(run_runner(plan_file(t, "short", {.ranks = 2, .zero = 2, .steps = static_cast<int>(saved) + 2}), out,
                       "--resume"),
            0);
  EXPECT_EQ(json_lines(out + "/metrics.jsonl").back()["step"], saved + 2);
}

TEST(RanksTest, SigtermStopsEveryRankAfterTheSameStepWithACheckpoint) {
  TempDir t;
  const std::string out = t.file("job");
  const pid_t launcher = start_runner(plan_file(t, "long", {.ranks = 2, .zero = 1, .steps = 100000}), out);
  ASSERT_TRUE(wait_for([&] { return !json_lines(out + "/metrics.jsonl").empty(); }));
  ASSERT_EQ(::kill(launcher, SIGTERM), 0);
  EXPECT_EQ(wait_exit(launcher), 4);
  const auto events = json_lines(out + "/events.jsonl");
  const json last = events.back();
  ASSERT_EQ(last["event"], "cancelled");
  const json before = events[events.size() - 2];
  EXPECT_EQ(before["event"], "checkpoint");
  EXPECT_EQ(before["step"], last["step"]);
  EXPECT_EQ(json_lines(dist::rank_events_path(out, 1)).back()["step"], last["step"]);
  const int step = last["step"];
  ASSERT_EQ(run_runner(plan_file(t, "short", {.ranks = 2, .zero = 1, .steps = step + 1}), out, "--resume"), 0);
}

// strategy.probe on a plan of two ranks: every candidate is a plan of two
// ranks, measured by two ranks started together for it (their peak the
// larger rank's); then, held to a budget between the candidates' measured
// peaks, the widest runs out of memory in a rank, which stops its peer at
// once (no collective waits for it), is recorded as a measured "does not
// fit", and the job trains the fastest candidate that fitted, within the
// budget.
TEST(RanksTest, TwoRanksProbeEachCandidateTogetherAndTrainTheFastestThatFits) {
  TempDir t;
  const std::string spec =
      t.write("probe.yaml",
              "apiVersion: tailor/v1\nkind: TrainingJob\nname: probe-ranks\n"
              "model: {preset: tiny-llama-byte, init: random}\n"
              "data: {train: " TAILOR_SOURCE_DIR
              "/configs/data/tiny-corpus.txt, format: text, seq_len: 64, "
              "packing: true}\n"
              "training: {global_batch_size: 16, micro_batch_size: 8, max_steps: 3, lr: 2e-3, seed: 7}\n"
              "strategy: {precision: fp32, adapter: none, gradient_checkpointing: false, probe: 3}\n"
              "resources: {gpus: 0, host_memory: 4GiB, ranks: 2}\n");
  const std::string plan = t.file("probe.plan.json");
  ASSERT_EQ(shell(kBin + "tailor plan " + spec + " --output json > " + plan + " 2> " + plan + ".err"), 0);
  const json asked = json::parse(std::ifstream(plan));
  ASSERT_EQ(asked["probe"]["candidates"].size(), 3u) << asked["probe"];
  for (const json& c : asked["probe"]["candidates"])
    EXPECT_EQ(c["strategy"]["num_gpus"], 2) << c["summary"];

  // Measured only: three candidates, each by both ranks, nothing trained.
  const std::string measured = t.file("measured");
  ASSERT_EQ(run_runner(plan, measured, "--probe-only"), 0) << read_file(measured + ".log");
  std::vector<std::string> kinds;
  for (const json& e : json_lines(measured + "/events.jsonl"))
    kinds.push_back(e["event"]);
  EXPECT_EQ(kinds, (std::vector<std::string>{"probe_start", "probe", "probe", "probe", "probe_done"}));
  EXPECT_FALSE(std::filesystem::exists(measured + "/metrics.jsonl"));
  EXPECT_FALSE(std::filesystem::exists(measured + "/probe")) << "the ranks' files are left behind";
  const json probed = json::parse(std::ifstream(measured + "/plan.probed.json"));
  std::int64_t widest = 0, leanest = INT64_MAX;
  std::size_t widest_index = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    const json& m = probed["probe"]["candidates"][i]["measured"];
    ASSERT_EQ(m["outcome"], "fits") << m;
    EXPECT_GT(m["tokens_per_second"].get<double>(), 0);
    const std::int64_t peak = m["peak_bytes"];
    if (peak > widest) widest = peak, widest_index = i;
    leanest = std::min(leanest, peak);
  }
  ASSERT_GT(widest, leanest * 11 / 10) << "a budget must fit between the candidates' peaks";

  // Held to a budget between them: the widest is out of memory in a rank.
  const std::int64_t budget = (widest + leanest) / 2;
  const std::string out = t.file("trained");
  ASSERT_EQ(run_runner(plan, out, "--memory-limit " + std::to_string(budget)), 0) << read_file(out + ".log");
  const json trained = json::parse(std::ifstream(out + "/plan.probed.json"));
  const json& over = trained["probe"]["candidates"][widest_index]["measured"];
  EXPECT_EQ(over["outcome"], "out_of_memory") << over;
  EXPECT_EQ(over["message"].get<std::string>().rfind("rank ", 0), 0u) << over;
  const int chosen = trained["probe"]["chosen"];
  ASSERT_GE(chosen, 0);
  EXPECT_NE(chosen, static_cast<int>(widest_index));
  EXPECT_EQ(trained["strategy"], trained["probe"]["candidates"][chosen]["strategy"]);
  // The probe's events, then the training's, ending done; each rank within
  // the budget.
  const std::vector<json> events = json_lines(out + "/events.jsonl");
  ASSERT_GE(events.size(), 6u);
  EXPECT_EQ(events[0]["event"], "probe_start");
  EXPECT_EQ(events[4]["event"], "probe_done");
  EXPECT_EQ(events[5]["event"], "start");
  EXPECT_EQ(events.back()["event"], "done") << events.back();
  const json last = json_lines(out + "/metrics.jsonl").back();
  EXPECT_EQ(last["step"], 3);
  for (const json& r : last["ranks"])
    EXPECT_LE(r["peak_bytes"].get<std::int64_t>(), budget) << r;
}

// SIGTERM while the ranks probe (tailord's cancel): the probe stops, the
// run ends cancelled (exit 4) with its terminal event, and it leaves no
// ranks' files behind; so does one process probing in itself (before, the
// signal killed it mid-probe). Ranks started by another launcher refuse to
// probe.
TEST(RanksTest, ASignalWhileTheRanksProbeCancelsTheRunAndOtherLaunchersRanksRefuseIt) {
  TempDir t;
  std::string plan;
  // Two ranks, then one process (whose probe runs in the process itself).
  for (const int ranks : {2, 1}) {
    const std::string name = "probe" + std::to_string(ranks);
    const std::string spec =
        t.write(name + ".yaml",
                "apiVersion: tailor/v1\nkind: TrainingJob\nname: probe-cancel\n"
                "model: {preset: tiny-llama-byte, init: random}\n"
                "data: {train: " TAILOR_SOURCE_DIR
                "/configs/data/tiny-corpus.txt, format: text, seq_len: 64, packing: true}\n"
                "training: {global_batch_size: 16, micro_batch_size: 8, max_steps: 3, lr: 2e-3, seed: 7}\n"
                "strategy: {precision: fp32, adapter: none, gradient_checkpointing: false, probe: 3}\n"
                "resources: {gpus: 0, host_memory: 4GiB, ranks: " +
                    std::to_string(ranks) + "}\n");
    const std::string this_plan = t.file(name + ".plan.json");
    ASSERT_EQ(shell(kBin + "tailor plan " + spec + " --output json > " + this_plan + " 2> " + this_plan + ".err"), 0);
    if (ranks == 2) plan = this_plan;
    const std::string out = t.file("job" + std::to_string(ranks));
    const pid_t runner = start_runner(this_plan, out);
    ASSERT_TRUE(wait_for([&] { return !json_lines(out + "/events.jsonl").empty(); }));
    ASSERT_EQ(::kill(runner, SIGTERM), 0);
    EXPECT_EQ(wait_exit(runner), 4) << ranks << " ranks";
    const json last = json_lines(out + "/events.jsonl").back();
    EXPECT_EQ(last["event"], "cancelled") << last;
    EXPECT_EQ(last["exit_code"], 4) << last;
    EXPECT_FALSE(std::filesystem::exists(out + "/probe"));
    EXPECT_FALSE(std::filesystem::exists(out + "/plan.probed.json"));
    EXPECT_FALSE(std::filesystem::exists(out + "/metrics.jsonl"));
  }

  // Ranks another launcher started (srun, torchrun) refuse the probe by
  // name: none of ours could stop a rank's peers when it runs out of memory.
  const std::string rank = t.file("rank0");
  EXPECT_EQ(shell("RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 " + kBin + "tailor-runner --plan " + plan +
                  " --out " + rank + " --quiet 2> " + rank + ".log"),
            2);
  EXPECT_NE(read_file(rank + ".log").find("needs tailor-runner's own launcher"), std::string::npos)
      << read_file(rank + ".log");
}

TEST(RanksTest, ARankThatNeverJoinsFailsTheJobWithAClearError) {
  TempDir t;
  const std::string out = t.file("job");
  const std::string plan = plan_file(t, "two", {.ranks = 2});
  const int port = dist::free_loopback_port();
  ASSERT_EQ(shell("RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
                  " TAILOR_RENDEZVOUS_TIMEOUT=1 " + kBin + "tailor-runner --plan " + plan + " --out " + out +
                  " --quiet 2> " + out + ".log"),
            1);
  const json last = json_lines(out + "/events.jsonl").back();
  EXPECT_EQ(last["event"], "error");
  EXPECT_NE(last["message"].get<std::string>().find("rank 1 of 2 did not join within 1 s"), std::string::npos) << last;
}

}  // namespace
}  // namespace tailor::runner
