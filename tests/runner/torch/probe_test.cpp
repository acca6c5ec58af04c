// strategy.probe on the CPU, in process: the planner's top plans measured
// against an exhaustive sweep of every plan that fits (the same jobs, every
// candidate measured the same way), and a probe that runs out of memory.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "dsl/spec_loader.h"
#include "runner/protocol/capabilities.h"
#include "runner/protocol/events.h"
#include "runner/protocol/plan_reader.h"
#include "runner/torch/trainer.h"
#include "strategies/plan_document.h"
#include "strategies/planner.h"
#include "tests/testing/temp_dir.h"

namespace tailor::runner {
namespace {

using tailor::testing::TempDir;

std::string corpus() {
  std::string text;
  const char* lines[] = {"the tailor mends a coat by the river", "a weaver folds the sails before the storm",
                         "the miller counts apples in the barn", "my neighbour paints the gate blue"};
  for (int i = 0; i < 200; ++i)
    text += std::string(lines[i % 4]) + ".\n\n";
  return text;
}

dsl::JobSpec load_spec(const TempDir& dir, const std::string& body) {
  dir.write("data.txt", corpus());
  const std::string yaml = "apiVersion: tailor/v1\nkind: TrainingJob\nname: probe\n" + body;
  const auto loaded = dsl::load_job_spec(dir.write("job.yaml", yaml), {});
  EXPECT_TRUE(loaded.ok()) << loaded.diagnostics.to_string();
  return *loaded.spec;
}

strategies::Hardware cpu(Bytes memory) {
  strategies::Hardware hw;
  hw.host_memory = memory;
  hw.cpu = strategies::cpu_device(memory);
  return hw;
}

// Measures `candidates` as strategy.probe does, in `out`: the plan's probe
// replaced by them. One warm-up step and 0.3 s of timed steps keep the
// test quick; every candidate is timed alike.
ProbeTable measure(const dsl::JobSpec& spec, const strategies::Hardware& hw,
                   std::vector<strategies::Candidate> candidates, const std::string& out,
                   std::int64_t memory_limit = -1) {
  dsl::JobSpec s = spec;
  s.strategy.probe = 1;
  strategies::Plan plan = strategies::plan_job(s, hw, runner_plan_options(nullptr));
  EXPECT_TRUE(plan.fits);
  plan.probe_candidates = std::move(candidates);
  plan.probe_limited.clear();
  auto cfg = parse_plan(strategies::plan_to_json(plan, s), out + "/plan.json");
  EXPECT_TRUE(cfg.is_ok()) << cfg.status().message();
  TrainOptions o;
  o.config = *cfg;
  o.config.probe->warmup_steps = 1;
  o.config.probe->min_timed_seconds = 0.3;
  // Every core: ctest runs this test alone (RUN_SERIAL).
  o.threads = 0;
  o.out_dir = out;
  o.quiet = true;
  o.memory_limit = memory_limit;
  auto probed = probe_before_training(o, false);
  EXPECT_TRUE(probed.is_ok()) << probed.status().message();
  return probed.is_ok() && probed->probe ? *probed->probe : ProbeTable{};
}

const ProbeMeasurement* measured_as(const ProbeTable& t, const std::string& summary) {
  for (const ProbeCandidate& c : t.candidates) {
    if (c.summary == summary) return c.measured ? &*c.measured : nullptr;
  }
  return nullptr;
}

struct Shape {
  const char* name;
  const char* spec;
  Bytes memory;
};

class ProbeShapesTest : public ::testing::TestWithParam<Shape> {};

// The probe's choice among the planner's top 5 (the most a spec asks for)
// is within 5% of the fastest plan of the whole sweep: as the sweep
// measured it, or, where the sweep says otherwise, measured side by side
// again. (The probe's path itself, probe_before_training, is what the sweep
// runs; ProbeTest below and the CLI and tailord tests run real probes.)
constexpr std::ptrdiff_t kProbe = dsl::kMaxProbe;
TEST_P(ProbeShapesTest, PicksThePlanTheExhaustiveSweepMeasuresFastest) {
  const Shape& shape = GetParam();
  TempDir dir;
  const dsl::JobSpec spec = load_spec(dir, shape.spec);
  const strategies::Hardware hw = cpu(shape.memory);
  const std::vector<strategies::Candidate> all =
      strategies::plans_in_policy_order(spec, hw, runner_plan_options(nullptr));
  ASSERT_GT(all.size(), static_cast<std::size_t>(kProbe)) << "the sweep must be wider than the probe";
  ASSERT_LE(all.size(), 16u) << "the sweep must stay small enough to measure whole";
  const ProbeTable sweep = measure(spec, hw, all, dir.file("sweep"));
  double fastest = 0;
  std::string fastest_summary;
  for (const ProbeCandidate& c : sweep.candidates) {
    ASSERT_TRUE(c.measured) << c.summary;
    EXPECT_EQ(c.measured->outcome, ProbeMeasurement::Outcome::kFits) << c.summary << ": " << c.measured->message;
    if (c.measured->tokens_per_second > fastest) {
      fastest = c.measured->tokens_per_second;
      fastest_summary = c.summary;
    }
  }
  // The probe of the top 5: the same measurements of the same candidates,
  // chosen by the probe's own rule (measuring them again would add
  // nothing but the machine's noise between two moments).
  const std::vector<ProbeCandidate> top(sweep.candidates.begin(), sweep.candidates.begin() + kProbe);
  const int choice = choose_probed(top, sweep.tie_band);
  ASSERT_GE(choice, 0);
  const std::string chosen = top[static_cast<std::size_t>(choice)].summary;
  const ProbeMeasurement* in_sweep = measured_as(sweep, chosen);
  ASSERT_NE(in_sweep, nullptr) << chosen;
  std::printf("%s: %zu plans fit; sweep fastest %s (%.0f tokens/s); probe (top %d) would choose %s (%.0f tokens/s)\n",
              shape.name, all.size(), fastest_summary.c_str(), fastest, static_cast<int>(kProbe), chosen.c_str(),
              in_sweep->tokens_per_second);
  if (in_sweep->tokens_per_second >= 0.95 * fastest) return;
  // Two plans of the sweep were measured seconds apart, and another test
  // may have shared the cores with one of them: measured again side by
  // side, alternately, the best of two each.
  auto candidate = [&](const std::string& summary) {
    return *std::find_if(all.begin(), all.end(), [&](const auto& c) { return c.strategy.describe() == summary; });
  };
  double picked = 0, best = 0;
  for (int round = 0; round < 2; ++round) {
    const std::string r = std::to_string(round);
    const ProbeTable a = measure(spec, hw, {candidate(chosen)}, dir.file("chosen" + r));
    const ProbeTable b = measure(spec, hw, {candidate(fastest_summary)}, dir.file("fastest" + r));
    ASSERT_TRUE(a.measured() && b.measured());
    picked = std::max(picked, a.candidates[0].measured->tokens_per_second);
    best = std::max(best, b.candidates[0].measured->tokens_per_second);
  }
  std::printf("%s: side by side, %s %.0f tokens/s, %s %.0f tokens/s\n", shape.name, chosen.c_str(), picked,
              fastest_summary.c_str(), best);
  EXPECT_GE(picked, 0.95 * best) << chosen << " against " << fastest_summary;
}

// The bf16 shapes run 32-token sequences: on a CPU without bf16
// instructions (the AVX2 EPYC) a bf16 step trains about 400 tokens/s,
// whatever the length, and at 128 tokens the test took 200 s there.
const Shape kShapes[] = {
    // A full fine-tune in bf16: micro-batching and attention decide.
    Shape{"full", R"(model:
  arch: {family: llama, layers: 2, hidden: 256, intermediate: 512, heads: 4, kv_heads: 2, vocab: 260, max_seq_len: 256}
data: {train: data.txt, seq_len: 32}
training: {global_batch_size: 8, max_steps: 10, lr: 1e-3, seed: 3}
strategy: {adapter: none, optimizer: adamw, precision: bf16, gradient_checkpointing: false}
resources: {gpus: 0}
)",
          Bytes::gib(8)},
    // LoRA on a wider model, checkpointing every layer: micro-batching and
    // attention decide.
    Shape{"lora", R"(model:
  arch: {family: llama, layers: 2, hidden: 256, intermediate: 512, heads: 4, kv_heads: 4, vocab: 260, max_seq_len: 256}
data: {train: data.txt, seq_len: 32}
training: {global_batch_size: 8, max_steps: 10, lr: 1e-3, seed: 3}
strategy: {adapter: lora, lora: {r: 8}, optimizer: adamw, precision: bf16, gradient_checkpointing: true}
resources: {gpus: 0}
)",
          Bytes::gib(8)},
    // A long-sequence job whose budget rules out the widest plans.
    Shape{"tight", R"(model:
  arch: {family: llama, layers: 4, hidden: 128, intermediate: 256, heads: 4, kv_heads: 2, vocab: 260, max_seq_len: 512}
data: {train: data.txt, seq_len: 512}
training: {global_batch_size: 4, max_steps: 10, lr: 1e-3, seed: 3}
strategy: {adapter: none, optimizer: adamw, precision: fp32}
resources: {gpus: 0}
)",
          Bytes::mib(160)},
};

INSTANTIATE_TEST_SUITE_P(Jobs, ProbeShapesTest, ::testing::ValuesIn(kShapes),
                         [](const auto& p) { return std::string(p.param.name); });

// A candidate that runs out of memory under the budget is a measured "does
// not fit": the probe goes on and trains another.
TEST(ProbeTest, ACandidateOutOfMemoryIsMeasuredAsNotFitting) {
  TempDir dir;
  const dsl::JobSpec spec = load_spec(dir, R"(model:
  arch: {family: llama, layers: 4, hidden: 128, intermediate: 256, heads: 4, kv_heads: 2, vocab: 260, max_seq_len: 256}
data: {train: data.txt, seq_len: 256}
training: {global_batch_size: 4, micro_batch_size: 4, max_steps: 10, lr: 1e-3, seed: 3}
strategy: {adapter: none, optimizer: adamw, precision: fp32}
resources: {gpus: 0}
)");
  const strategies::Hardware hw = cpu(Bytes::gib(8));
  std::vector<strategies::Candidate> all = strategies::plans_in_policy_order(spec, hw, runner_plan_options(nullptr));
  // The plan without checkpointing and one checkpointing every layer.
  auto with = [&](std::int64_t every) {
    const auto it = std::find_if(all.begin(), all.end(), [&](const strategies::Candidate& c) {
      return c.strategy.checkpoint_every == every && c.strategy.attention == strategies::Attention::kMemoryEfficient;
    });
    EXPECT_NE(it, all.end()) << "checkpoint_every " << every;
    return *it;
  };
  const strategies::Candidate wide = with(0), lean = with(1);
  const std::int64_t wide_peak = wide.memory.per_device.total().count(),
                     lean_peak = lean.memory.per_device.total().count();
  ASSERT_GT(wide_peak, lean_peak * 5 / 4) << "the two plans must differ enough to place a budget between them";
  const std::int64_t budget = (wide_peak + lean_peak) / 2;
  const ProbeTable t = measure(spec, hw, {wide, lean}, dir.file("out"), budget);
  ASSERT_EQ(t.candidates.size(), 2u);
  ASSERT_TRUE(t.candidates[0].measured && t.candidates[1].measured);
  EXPECT_EQ(t.candidates[0].measured->outcome, ProbeMeasurement::Outcome::kOutOfMemory)
      << t.candidates[0].measured->message;
  EXPECT_EQ(t.candidates[0].measured->budget_bytes, budget);
  EXPECT_EQ(t.candidates[1].measured->outcome, ProbeMeasurement::Outcome::kFits) << t.candidates[1].measured->message;
  EXPECT_LE(t.candidates[1].measured->peak_bytes, budget);
  EXPECT_EQ(t.chosen, 1);
  // The events and the probed plan say so.
  std::ifstream events(dir.file("out/events.jsonl"));
  std::vector<std::string> kinds, outcomes;
  for (std::string line; std::getline(events, line);) {
    const auto j = nlohmann::json::parse(line);
    kinds.push_back(j["event"]);
    if (j["event"] == events::kProbe) outcomes.push_back(j["outcome"]);
  }
  EXPECT_EQ(kinds, (std::vector<std::string>{events::kProbeStart, events::kProbe, events::kProbe, events::kProbeDone}));
  EXPECT_EQ(outcomes, (std::vector<std::string>{"out_of_memory", "fits"}));
  auto probed = read_plan_file(dir.file("out/plan.probed.json"));
  ASSERT_TRUE(probed.is_ok()) << probed.status().message();
  EXPECT_EQ(probed->strategy.checkpoint_every, 1);
  EXPECT_TRUE(probed->probe && probed->probe->measured());
}

}  // namespace
}  // namespace tailor::runner
