#include "strategies/planner.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "dsl/spec_loader.h"
#include "strategies/constraints.h"

namespace tailor::strategies {
namespace {

namespace fs = std::filesystem;

dsl::JobSpec load(const std::string& example, std::vector<std::string> overrides = {}) {
  dsl::LoadOptions opts;
  opts.overrides = std::move(overrides);
  const auto loaded = dsl::load_job_spec((fs::path(TAILOR_SOURCE_DIR) / "configs/examples" / example).string(), opts);
  EXPECT_TRUE(loaded.ok()) << loaded.diagnostics.to_string();
  return *loaded.spec;
}

Hardware gpus(const std::string& flag, Bytes host = Bytes::gib(64)) {
  Hardware hw;
  hw.gpus = *parse_gpus_flag(flag, dsl::Catalog::builtin());
  hw.host_memory = host;
  hw.cpu = cpu_device(host);
  hw.source = "--gpus " + flag;
  return hw;
}

Hardware cpu(Bytes host) {
  Hardware hw;
  hw.host_memory = host;
  hw.cpu = cpu_device(host);
  return hw;
}

TEST(PlannerTest, Llama2_7bOnOne24GbGpuPicksAnAdapterPlanWithCheckpointing) {
  const Plan p = plan_job(load("llama2-7b-qlora-24gb.yaml"), gpus("1x24GiB"));
  ASSERT_TRUE(p.fits);
  EXPECT_NE(p.chosen.strategy.adapter, Adapter::kNone);
  EXPECT_GE(p.chosen.strategy.checkpoint_every, 1);
  EXPECT_LE(p.chosen.memory.per_device.total(), p.budget_per_device);
  // The global batch is kept exact through accumulation.
  EXPECT_EQ(p.chosen.strategy.micro_batch_size * p.chosen.strategy.grad_accumulation, 32);
}

TEST(PlannerTest, Llama2_70bOnTwoA6000sNeedsZero3WithOffloadOrQlora) {
  const Plan p = plan_job(load("llama2-70b-2xa6000.yaml"), gpus("2xA6000", Bytes::gib(256)));
  ASSERT_TRUE(p.fits);
  const Strategy& s = p.chosen.strategy;
  EXPECT_TRUE((s.zero_stage == 3 && s.offload != Offload::kNone) || s.adapter == Adapter::kQlora) << s.describe();
  // Without parameter offload and without QLoRA it cannot fit.
  const Plan strict = plan_job(load("llama2-70b-2xa6000.yaml", {"strategy.forbid=[qlora, offload_params]"}),
                               gpus("2xA6000", Bytes::gib(256)));
  EXPECT_FALSE(strict.fits);
}

TEST(PlannerTest, Gpt2OnAT4FitsAFullFineTuneInFp16) {
  const Plan p = plan_job(load("gpt2-t4.yaml"), gpus("1xT4"));
  ASSERT_TRUE(p.fits);
  EXPECT_EQ(p.chosen.strategy.adapter, Adapter::kNone);
  EXPECT_EQ(p.chosen.strategy.precision, Precision::kFp16);  // the T4 has no bf16
}

TEST(PlannerTest, TinyCpuJobFitsInHostMemoryWithoutApproximations) {
  const Plan p = plan_job(load("tiny-cpu.yaml"), cpu(Bytes::gib(2)));
  ASSERT_TRUE(p.fits);
  EXPECT_TRUE(p.on_cpu);
  EXPECT_EQ(p.chosen.strategy.optimizer, Optimizer::kAdamw);
  EXPECT_NE(p.chosen.strategy.precision, Precision::kPureBf16);
  EXPECT_EQ(p.chosen.strategy.zero_stage, 0);
}

TEST(PlannerTest, NothingFittingIsAValueWithShortfallAndSmallestHardware) {
  const Plan p = plan_job(load("llama3-8b-full-8xa100.yaml"), gpus("4xT4", Bytes::gib(32)));
  EXPECT_FALSE(p.fits);
  EXPECT_GT(p.shortfall.count() + p.host_shortfall.count(), 0);
  // The named hardware is bigger than a T4 and really fits.
  ASSERT_EQ(p.smallest_fitting_gpu.rfind("4x ", 0), 0u) << p.smallest_fitting_gpu;
  const std::string key = p.smallest_fitting_gpu.substr(3);
  EXPECT_GT(dsl::Catalog::builtin().find_gpu(key)->memory, Bytes::gib(16));
  EXPECT_TRUE(plan_job(load("llama3-8b-full-8xa100.yaml"), gpus("4x" + key, Bytes::gib(32))).fits);
  ASSERT_FALSE(p.decisions.empty());
  EXPECT_EQ(p.decisions.back().action, "reject the job");
}

TEST(PlannerTest, MoreGpuMemoryNeverGivesASlowerPlan) {
  for (const char* example : {"llama2-7b-qlora-24gb.yaml", "gpt2-t4.yaml", "llama2-13b-4090.yaml"}) {
    const dsl::JobSpec spec = load(example);
    double last_speed = 0;
    bool fitted = false;
    for (int gib = 8; gib <= 96; gib += 8) {
      const Plan p = plan_job(spec, gpus("1x" + std::to_string(gib) + "GiB", Bytes::gib(512)));
      if (fitted) {
        EXPECT_TRUE(p.fits) << example << " at " << gib << " GiB";
      }
      if (p.fits) {
        EXPECT_GE(p.chosen.throughput.tokens_per_second / (1 + 0.1 * fidelity_cost(p.chosen.strategy)),
                  last_speed * (1 - 1e-9))
            << example << " at " << gib << " GiB";
        last_speed = p.chosen.throughput.tokens_per_second / (1 + 0.1 * fidelity_cost(p.chosen.strategy));
        fitted = true;
      }
    }
    EXPECT_TRUE(fitted) << example;
  }
}

TEST(PlannerTest, PinnedKnobsAreNeverBroken) {
  const std::vector<std::vector<std::string>> pins = {
      {"strategy.precision=fp32"},       {"strategy.precision=pure-bf16"},  {"strategy.gradient_checkpointing=false"},
      {"strategy.gradient_checkpointing=2"}, {"strategy.adapter=none"},     {"strategy.adapter=lora"},
      {"strategy.optimizer=adamw_8bit"}, {"strategy.optimizer=sgd"},        {"strategy.zero_stage=0"},
      {"training.micro_batch_size=2"},   {"strategy.adapter=qlora", "strategy.precision=bf16"}};
  for (const auto& pin : pins) {
    const dsl::JobSpec spec = load("llama2-7b-qlora-24gb.yaml", pin);
    const Plan p = plan_job(spec, gpus("1x48GiB"));
    const Strategy& s = p.chosen.strategy;
    const dsl::StrategySpec& want = spec.strategy;
    if (want.precision) {
      EXPECT_EQ(s.precision, *want.precision);
    }
    if (want.gradient_checkpointing) {
      EXPECT_EQ(s.checkpoint_every, *want.gradient_checkpointing);
    }
    if (want.adapter) {
      EXPECT_EQ(s.adapter, *want.adapter);
    }
    if (want.optimizer) {
      EXPECT_EQ(s.optimizer, *want.optimizer);
    }
    if (want.zero_stage) {
      EXPECT_EQ(s.zero_stage, *want.zero_stage);
    }
    if (spec.training.micro_batch_size) {
      EXPECT_EQ(s.micro_batch_size, *spec.training.micro_batch_size);
    }
    for (const Alternative& a : p.alternatives) {
      EXPECT_TRUE(Constraints(spec, gpus("1x48GiB")).admits(a.candidate.strategy)) << a.candidate.strategy.describe();
    }
  }
}

TEST(PlannerTest, ForbidAndAllowBoundTheChoice) {
  const Plan full = plan_job(load("llama2-7b-qlora-24gb.yaml", {"strategy.forbid=[adapters]"}), gpus("1x80GiB"));
  ASSERT_TRUE(full.fits);
  EXPECT_EQ(full.chosen.strategy.adapter, Adapter::kNone);
  const Plan only = plan_job(load("llama2-7b-qlora-24gb.yaml", {"strategy.allow=[bf16, qlora, adapters, gradient_checkpointing, gradient_accumulation]"}),
                             gpus("1x24GiB"));
  ASSERT_TRUE(only.fits);
  EXPECT_EQ(only.chosen.strategy.adapter, Adapter::kQlora);
  using dsl::Technique;
  for (Technique t : Constraints::techniques_of(only.chosen.strategy)) {
    EXPECT_TRUE(t == Technique::kBf16 || t == Technique::kQlora || t == Technique::kAdapters ||
                t == Technique::kGradientCheckpointing || t == Technique::kGradientAccumulation)
        << dsl::to_string(t);
  }
}

TEST(PlannerTest, DecisionTraceFollowsTheTreeAndStopsWhenItFits) {
  const Plan p = plan_job(load("llama2-7b-qlora-24gb.yaml"), gpus("1x24GiB"));
  ASSERT_GE(p.decisions.size(), 4u);
  EXPECT_EQ(p.decisions[0].question.rfind("Does the job fit as written", 0), 0u);
  EXPECT_NE(p.decisions[1].question.find("Mixed precision"), std::string::npos);
  EXPECT_NE(p.decisions[2].question.find("Gradient checkpointing"), std::string::npos);
  EXPECT_NE(p.decisions[3].question.find("micro-batch"), std::string::npos);
  EXPECT_NE(p.decisions[0].answer.find("GiB"), std::string::npos);  // byte figures
  EXPECT_NE(p.decisions.back().question.find("fastest"), std::string::npos);
  // A job that fits as written stops at the first question.
  const Plan easy = plan_job(load("tiny-cpu.yaml"), cpu(Bytes::gib(2)));
  EXPECT_EQ(easy.decisions.size(), 2u);
  EXPECT_EQ(easy.decisions[0].action, "keep it");
}

TEST(PlannerTest, ForbiddenStepsAreSkippedInTheTrace) {
  const Plan p = plan_job(load("llama2-7b-qlora-24gb.yaml", {"strategy.forbid=[gradient_checkpointing]"}), gpus("1x24GiB"));
  bool found = false;
  for (const Decision& d : p.decisions) {
    if (d.question.find("Gradient checkpointing") != std::string::npos) {
      found = true;
      EXPECT_NE(d.answer.find("not allowed"), std::string::npos) << d.answer;
      EXPECT_EQ(d.action, "none");
    }
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(p.chosen.strategy.checkpoint_every, 0);
}

TEST(PlannerTest, GlobalBatchNotDivisibleByGpusIsAnError) {
  const Plan p = plan_job(load("gpt2-t4.yaml", {"training.global_batch_size=30"}), gpus("4xT4"));
  EXPECT_FALSE(p.fits);
  ASSERT_EQ(p.errors.size(), 1u);
  EXPECT_NE(p.errors[0].find("not divisible by the 4 GPUs"), std::string::npos);
}

}  // namespace
}  // namespace tailor::strategies
