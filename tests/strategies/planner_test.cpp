#include "strategies/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "dsl/spec_loader.h"
#include "strategies/constraints.h"
#include "strategies/headroom.h"
#include "strategies/plan_document.h"
#include "strategies/runtime_profile.h"

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

TEST(PlannerTest, Llama2_7bOnOne24GbGpuPicksAnAdapterPlanWithMemoryToSpare) {
  const Plan p = plan_job(load("llama2-7b-qlora-24gb.yaml"), gpus("1x24GiB"));
  ASSERT_TRUE(p.fits);
  EXPECT_NE(p.chosen.strategy.adapter, Adapter::kNone);
  EXPECT_LE(p.chosen.memory.per_device.total(), p.budget_per_device);
  // Not a plan that grazes the budget for a sliver of speed.
  EXPECT_GE(static_cast<double>(p.chosen.spare().count()), 0.05 * static_cast<double>(p.budget_per_device.count()));
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

// strategy.lora.modules_to_save: the planner counts the two matrices'
// states (trainable parameters: the matrices more than the adapters) under
// every rung tailor-runner trains them with, ZeRO-3 and offload included;
// another stack's ZeRO-3 and offload with them are not modelled.
TEST(PlannerTest, ModulesToSaveArePlannedAtEveryStageForTailorRunnerOnly) {
  const Hardware hw = gpus("2xA6000", Bytes::gib(256));
  const std::string whole = "strategy.lora.modules_to_save=[embed_tokens, lm_head]";
  const dsl::JobSpec spec = load("llama2-70b-2xa6000.yaml", {"strategy.adapter=qlora", whole});
  const Plan p = plan_job(spec, hw);
  ASSERT_TRUE(p.fits);
  Strategy z3 = p.chosen.strategy;
  z3.zero_stage = 3;
  z3.offload = Offload::kOptimizerAndParams;
  EXPECT_EQ(Constraints(spec, hw).why_not(z3), "");
  const dsl::JobSpec hf = load("llama2-70b-2xa6000.yaml", {"strategy.adapter=qlora", whole, "planner.runtime=hf"});
  EXPECT_EQ(Constraints(hf, hw).why_not(z3),
            "ZeRO-3 and offload with strategy.lora.modules_to_save are modelled for tailor-runner only");
  const Plan hf_plan = plan_job(hf, hw);
  if (hf_plan.fits) {
    EXPECT_LT(hf_plan.chosen.strategy.zero_stage, 3) << hf_plan.chosen.strategy.describe();
    EXPECT_EQ(hf_plan.chosen.strategy.offload, Offload::kNone) << hf_plan.chosen.strategy.describe();
  }
  const Plan plain = plan_job(load("llama2-70b-2xa6000.yaml", {"strategy.adapter=qlora"}), hw);
  ASSERT_TRUE(plain.fits);
  const std::int64_t matrices = 2 * spec.model.arch.vocab * spec.model.arch.hidden;
  EXPECT_EQ(evaluate(spec, hw, plain.chosen.strategy, {}).memory.trainable_parameters,
            plain.chosen.memory.trainable_parameters + matrices);
}

// Another stack's plan keeps its kind's headroom and says so; where a
// published run of that kind went beyond it, the text says by how much.
TEST(PlannerTest, AnotherStacksHeadroomNamesItsKindAndTheLargestMissBeyondIt) {
  const dsl::JobSpec hf = load("llama2-70b-2xa6000.yaml", {"strategy.adapter=qlora", "planner.runtime=hf"});
  Strategy s;
  s.adapter = Adapter::kQlora;
  s.num_gpus = 2;
  s.zero_stage = 3;
  const HeadroomRow& row = kind_headroom(dsl::Runtime::kHf, Adapter::kQlora, true);
  ASSERT_GT(row.worst, row.headroom);
  char expected[160];
  std::snprintf(expected, sizeof expected,
                "%.0f%% headroom (hf, qlora, sharded: the held-out under-estimates of %d published peaks; the largest, "
                "%.1f%% over its estimate, exceeds it)",
                100 * row.headroom, row.points, 100 * row.worst);
  EXPECT_EQ(describe_headroom(hf, s), expected);
  EXPECT_DOUBLE_EQ(headroom_for(hf, s), row.headroom);
  // A kind whose published runs all stayed within it says nothing more.
  s.adapter = Adapter::kLora;
  s.num_gpus = 1;
  s.zero_stage = 0;
  const HeadroomRow& litgpt = kind_headroom(dsl::Runtime::kLitgpt, Adapter::kLora, false);
  ASSERT_LE(litgpt.worst, litgpt.headroom);
  const dsl::JobSpec lit = load("llama2-70b-2xa6000.yaml", {"strategy.adapter=lora", "planner.runtime=litgpt"});
  EXPECT_EQ(describe_headroom(lit, s).find("the largest"), std::string::npos) << describe_headroom(lit, s);
  // The spec's own headroom is the spec's.
  const dsl::JobSpec own = load("llama2-70b-2xa6000.yaml", {"planner.runtime=hf", "strategy.headroom=0.3"});
  EXPECT_EQ(describe_headroom(own, s), "30% headroom (the spec's)");
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

// Without bf16 in hardware the runner multiplies bf16 through fp32, a step
// at about three quarters of fp32's speed: fp32 is the faster plan.
TEST(PlannerTest, ACpuWithoutBf16InHardwareTrainsInFp32) {
  Hardware avx2 = cpu(Bytes::gib(2));
  avx2.cpu = cpu_device(avx2.host_memory, /*native_bf16=*/false);
  const Plan p = plan_job(load("tiny-cpu.yaml"), avx2);
  ASSERT_TRUE(p.fits);
  EXPECT_EQ(p.chosen.strategy.precision, Precision::kFp32) << p.chosen.strategy.describe();
  // The same job on a CPU with bf16 in hardware: bf16, the faster.
  EXPECT_EQ(plan_job(load("tiny-cpu.yaml"), cpu(Bytes::gib(2))).chosen.strategy.precision, Precision::kBf16);
}

// DPO: pairs are two rows a pass, and the reference goes where the plan's
// adapters allow: switched off under LoRA (no bytes), precomputed otherwise
// (no bytes, its forwards once before training), a frozen copy when pinned.
TEST(PlannerTest, DpoDoublesThePassesAndPlacesTheReference) {
  const Hardware hw = cpu(Bytes::gib(2));
  Strategy s;
  s.micro_batch_size = 4;
  s.grad_accumulation = 2;
  const dsl::JobSpec sft = load("tiny-cpu.yaml", {"training.global_batch_size=8"});
  const dsl::JobSpec dpo = load("dpo-cpu.yaml", {"strategy.adapter=none", "strategy.reference=separate"});
  dsl::JobSpec sft_same = dpo;  // the same model and data shape, trained with the next-token loss
  sft_same.training.method = dsl::TrainingMethod::kSft;
  sft_same.data.preference = false;
  const Candidate one = evaluate(sft_same, hw, s, {});
  const Candidate pairs = evaluate(dpo, hw, s, {});
  EXPECT_EQ(pairs.strategy.reference, Reference::kSeparate);
  EXPECT_EQ(one.strategy.reference, Reference::kNone);
  Strategy doubled = s;
  doubled.micro_batch_size = 8;
  const Candidate two_rows = evaluate(sft_same, hw, doubled, {});
  // The activations of 2b rows, less the attention mask padded rows keep (a
  // pair's rows are causal alone).
  EXPECT_GT(pairs.memory.per_device.activations.count(), 3 * one.memory.per_device.activations.count() / 2);
  EXPECT_LT(pairs.memory.per_device.activations, two_rows.memory.per_device.activations);
  // Every row's logits, and one row's gradient at a time (each row is its
  // own loss): fp32, vocab 260.
  EXPECT_EQ(pairs.memory.per_device.logits.count(), (8 + 1) * 256 * 260 * 4);
  EXPECT_EQ(two_rows.memory.per_device.logits.count(), 2 * 8 * 256 * 260 * 4);
  // The copy: every parameter once more in the compute dtype (fp32 here).
  EXPECT_EQ(pairs.memory.reference.count(), dpo.model.arch.parameter_count() * 4);
  EXPECT_EQ(pairs.memory.per_device.weights, one.memory.per_device.weights + pairs.memory.reference);
  EXPECT_GT(pairs.throughput.reference_seconds, 0);
  EXPECT_EQ(pairs.throughput.reference_pass_seconds, 0);
  EXPECT_EQ(one.throughput.reference_seconds, 0);
  // Unpinned, a full fine-tune precomputes: no copy, and the same forwards
  // paid once before training rather than in every step.
  const Candidate before = evaluate(load("dpo-cpu.yaml", {"strategy.adapter=none"}), hw, s, {});
  EXPECT_EQ(before.strategy.reference, Reference::kPrecomputed);
  EXPECT_EQ(before.memory.reference.count(), 0);
  EXPECT_EQ(before.memory.per_device.weights, one.memory.per_device.weights);
  EXPECT_EQ(before.throughput.reference_seconds, 0);
  EXPECT_DOUBLE_EQ(before.throughput.reference_pass_seconds, pairs.throughput.reference_seconds);
  EXPECT_DOUBLE_EQ(before.throughput.step_seconds, pairs.throughput.step_seconds - pairs.throughput.reference_seconds);
  // Under LoRA the adapters switch off: nothing to copy.
  Strategy lora = s;
  lora.adapter = Adapter::kLora;
  lora.lora_rank = 8;
  const Candidate off = evaluate(load("dpo-cpu.yaml"), hw, lora, {});
  EXPECT_EQ(off.strategy.reference, Reference::kAdapterOff);
  EXPECT_EQ(off.memory.reference.count(), 0);
  // The plan explains it, and a pin the plan cannot honour is refused by name.
  const Plan p = plan_job(load("dpo-cpu.yaml"), hw);
  ASSERT_TRUE(p.fits);
  EXPECT_EQ(p.chosen.strategy.reference, Reference::kAdapterOff);
  const auto step = [](const Plan& plan) {
    return std::find_if(plan.decisions.begin(), plan.decisions.end(), [](const Decision& d) { return d.step == "reference"; });
  };
  ASSERT_NE(step(p), p.decisions.end());
  EXPECT_EQ(step(p)->change, "switch the adapters off for the reference's forward");
  const Plan full = plan_job(load("dpo-cpu.yaml", {"strategy.adapter=none"}), hw);
  ASSERT_TRUE(full.fits);
  EXPECT_EQ(full.chosen.strategy.reference, Reference::kPrecomputed);
  ASSERT_NE(step(full), full.decisions.end());
  EXPECT_EQ(step(full)->change, "compute the reference's log-probabilities before training and cache them");
  EXPECT_NE(step(full)->reason.find("a frozen copy would need"), std::string::npos) << step(full)->reason;
  const dsl::JobSpec copy = load("dpo-cpu.yaml", {"strategy.adapter=auto", "strategy.reference=separate"});
  const Plan pinned = plan_job(copy, hw);
  ASSERT_TRUE(pinned.fits);
  EXPECT_EQ(pinned.chosen.strategy.adapter, Adapter::kNone);
  EXPECT_EQ(pinned.chosen.strategy.reference, Reference::kSeparate);
  const Constraints c(copy, hw);
  EXPECT_EQ(c.why_not(lora),
            "a separate reference beside adapters is the adapters model.adapter starts from, frozen; without "
            "model.adapter adapter_off is the same reference without the copy");
  // Precomputed goes with adapters and with ZeRO-3; a copy at ZeRO-3 is
  // sharded as the trained weights are.
  const dsl::JobSpec ahead = load("dpo-cpu.yaml", {"strategy.reference=precomputed"});
  EXPECT_EQ(Constraints(ahead, hw).why_not(lora), "");
  EXPECT_EQ(evaluate(ahead, hw, lora, {}).strategy.reference, Reference::kPrecomputed);
  Strategy z3 = s;
  z3.num_gpus = 2;
  z3.zero_stage = 3;
  z3.grad_accumulation = 1;
  const dsl::JobSpec two_copies =
      load("dpo-cpu.yaml", {"strategy.adapter=auto", "strategy.reference=separate", "resources.ranks=2"});
  EXPECT_EQ(Constraints(two_copies, hw).why_not(z3), "");
  EXPECT_EQ(evaluate(two_copies, hw, z3, {}).memory.reference.count(), pairs.memory.reference.count() / 2);
  EXPECT_EQ(Constraints(load("dpo-cpu.yaml", {"strategy.adapter=none", "resources.ranks=2"}), hw).why_not(z3), "");
}

// From an adapter (model.adapter): the reference is the model the job
// starts from, so auto keeps that adapter frozen beside the trained one
// (as TRL copies a PeftModel's adapter into a "ref" one): its bytes are
// the adapter's, whole on every rank, so ZeRO-3 takes it too; a pinned
// adapter_off scores against the base alone, and says so.
TEST(PlannerTest, FromAnAdapterTheReferenceIsThatAdapterFrozen) {
  const Hardware hw = cpu(Bytes::gib(2));
  const std::string folder = (fs::path(TAILOR_SOURCE_DIR) / "tests/dsl/cases/adapters/r8").string();
  const dsl::JobSpec spec = load("dpo-cpu.yaml", {"model.adapter=" + folder});
  Strategy lora;
  lora.micro_batch_size = 4;
  lora.grad_accumulation = 2;
  lora.adapter = Adapter::kLora;
  lora.lora_rank = 8;
  const Candidate c = evaluate(spec, hw, lora, {});
  EXPECT_EQ(c.strategy.reference, Reference::kSeparate);
  // r (in + out) for q_proj and v_proj of both layers, in fp32.
  EXPECT_EQ(c.memory.reference.count(), lora_parameter_count(spec.model.arch, 8, {"q_proj", "v_proj"}) * 4);
  const Plan p = plan_job(spec, hw);
  ASSERT_TRUE(p.fits);
  EXPECT_EQ(p.chosen.strategy.reference, Reference::kSeparate);
  const auto step = [](const Plan& plan) {
    return std::find_if(plan.decisions.begin(), plan.decisions.end(),
                        [](const Decision& d) { return d.step == "reference"; });
  };
  ASSERT_NE(step(p), p.decisions.end());
  EXPECT_EQ(step(p)->change, "keep a frozen copy of the adapters the job starts from");
  Strategy z3 = lora;
  z3.num_gpus = 2;
  z3.zero_stage = 3;
  z3.grad_accumulation = 1;
  EXPECT_EQ(Constraints(load("dpo-cpu.yaml", {"model.adapter=" + folder, "resources.ranks=2"}), hw).why_not(z3), "");
  const Plan base = plan_job(load("dpo-cpu.yaml", {"model.adapter=" + folder, "strategy.reference=adapter_off"}), hw);
  ASSERT_NE(step(base), base.decisions.end());
  EXPECT_NE(step(base)->reason.find("without the adapters model.adapter starts from"), std::string::npos)
      << step(base)->reason;
}

// KTO: the reference goes where DPO's does, but a full fine-tune keeps a
// frozen copy (KL rows change each epoch, so nothing is precomputed), and
// its KL rows add two forwards a micro-batch (the trained model's and the
// reference's) to the reference's one; apo_zero_unpaired has none.
TEST(PlannerTest, KtoPlacesItsReferenceAndTimesItsKlRows) {
  const Hardware hw = cpu(Bytes::gib(2));
  Strategy s;
  s.micro_batch_size = 4;
  s.grad_accumulation = 2;
  const std::vector<std::string> kto = {"training.method=kto", "training.loss_type=kto", "strategy.adapter=none"};
  const Candidate full = evaluate(load("dpo-cpu.yaml", kto), hw, s, {});
  EXPECT_EQ(full.strategy.reference, Reference::kSeparate);
  EXPECT_TRUE(full.strategy.kl_rows);
  const Candidate dpo =
      evaluate(load("dpo-cpu.yaml", {"strategy.adapter=none", "strategy.reference=separate"}), hw, s, {});
  EXPECT_EQ(full.memory.per_device.total(), dpo.memory.per_device.total());
  EXPECT_DOUBLE_EQ(full.throughput.reference_seconds, 3 * dpo.throughput.reference_seconds);
  const Candidate apo = evaluate(
      load("dpo-cpu.yaml", {"training.method=kto", "training.loss_type=apo_zero_unpaired", "strategy.adapter=none"}),
      hw, s, {});
  EXPECT_FALSE(apo.strategy.kl_rows);
  EXPECT_DOUBLE_EQ(apo.throughput.reference_seconds, dpo.throughput.reference_seconds);
  // Under LoRA the adapters switch off, and the plan says what the KL rows cost.
  const Plan p = plan_job(load("dpo-cpu.yaml", {"training.method=kto", "training.loss_type=kto"}), hw);
  ASSERT_TRUE(p.fits);
  EXPECT_EQ(p.chosen.strategy.reference, Reference::kAdapterOff);
  const auto step =
      std::find_if(p.decisions.begin(), p.decisions.end(), [](const Decision& d) { return d.step == "reference"; });
  ASSERT_NE(step, p.decisions.end());
  EXPECT_NE(step->question.find("KTO"), std::string::npos) << step->question;
  EXPECT_NE(step->reason.find("KL rows"), std::string::npos) << step->reason;
  EXPECT_EQ(step->reason.find("precomputed"), std::string::npos) << step->reason;
  // A full fine-tune without a pin keeps the copy, and says why not precomputed.
  const Plan copy = plan_job(load("dpo-cpu.yaml", kto), hw);
  ASSERT_TRUE(copy.fits);
  EXPECT_EQ(copy.chosen.strategy.reference, Reference::kSeparate);
}

// ORPO and SimPO train on pairs without a reference: the passes are
// doubled as for DPO, but nothing is copied, no reference forward is
// timed and the plan has no reference step; ORPO's prompts go through the
// head once more (the chosen rows' logits kept twice).
TEST(PlannerTest, OrpoAndSimpoDoubleThePassesWithoutAReference) {
  const Hardware hw = cpu(Bytes::gib(2));
  Strategy s;
  s.micro_batch_size = 4;
  s.grad_accumulation = 2;
  const dsl::JobSpec dpo = load("dpo-cpu.yaml", {"strategy.adapter=none", "strategy.reference=separate"});
  const Candidate with_reference = evaluate(dpo, hw, s, {});
  for (const char* method : {"orpo", "simpo"}) {
    SCOPED_TRACE(method);
    const dsl::JobSpec spec = load("dpo-cpu.yaml", {"strategy.adapter=none", std::string("training.method=") + method,
                                                    "training.beta=null", "training.loss_type=null"});
    const Candidate c = evaluate(spec, hw, s, {});
    EXPECT_TRUE(c.strategy.pairs);
    EXPECT_EQ(c.strategy.reference, Reference::kNone);
    EXPECT_EQ(c.memory.reference.count(), 0);
    EXPECT_EQ(c.memory.per_device.weights, with_reference.memory.per_device.weights - with_reference.memory.reference);
    // (ORPO's larger logits cover more of the recomputed layer's bytes.)
    if (std::string(method) == "simpo") {
      EXPECT_EQ(c.memory.per_device.activations, with_reference.memory.per_device.activations);
    } else {
      EXPECT_LE(c.memory.per_device.activations, with_reference.memory.per_device.activations);
    }
    EXPECT_EQ(c.throughput.reference_seconds, 0);
    EXPECT_LT(c.throughput.step_seconds, with_reference.throughput.step_seconds);
    const std::int64_t rows = std::string(method) == "orpo" ? 12 : 8;  // 2b rows, and orpo's b prompts
    EXPECT_EQ(c.memory.per_device.logits.count(), (rows + 1) * 256 * 260 * 4);
    const Plan p = plan_job(spec, hw);
    ASSERT_TRUE(p.fits);
    EXPECT_TRUE(p.chosen.strategy.pairs);
    EXPECT_EQ(p.chosen.strategy.reference, Reference::kNone);
    EXPECT_TRUE(std::none_of(p.decisions.begin(), p.decisions.end(), [](const Decision& d) { return d.step == "reference"; }));
  }
}

// A reward model: pairs, no reference, no vocabulary head (its untied
// lm_head's weights, gradients and states give way to a (1, hidden) score),
// no logits, and a plan that never trains adapters or fuses a head.
TEST(PlannerTest, ARewardModelTradesTheVocabularyHeadForAScore) {
  const Hardware hw = gpus("1x24GiB");
  Strategy s;
  s.micro_batch_size = 2;
  s.grad_accumulation = 4;
  s.precision = Precision::kBf16;
  const std::vector<std::string> untied = {"strategy.adapter=none", "training.beta=null", "training.loss_type=null",
                                           "strategy.lora=null", "strategy.reference=null", "resources.gpus=1",
                                           "model.arch.tie_embeddings=false", "model.arch.vocab=32000"};
  std::vector<std::string> reward = untied;
  reward.push_back("training.method=reward");
  std::vector<std::string> simpo = untied;
  simpo.push_back("training.method=simpo");
  const dsl::JobSpec spec = load("dpo-cpu.yaml", reward);
  const Candidate r = evaluate(spec, hw, s, {});
  const Candidate lm = evaluate(load("dpo-cpu.yaml", simpo), hw, s, {});
  EXPECT_TRUE(r.strategy.pairs);
  EXPECT_EQ(r.strategy.reference, Reference::kNone);
  const std::int64_t head = 32000 * 128, score = 128;
  EXPECT_EQ(r.memory.trainable_parameters, lm.memory.trainable_parameters - head + score);
  EXPECT_LT(r.memory.per_device.logits.count(), 1024);  // one fp32 score a row
  EXPECT_GT(lm.memory.per_device.logits.count(), 4 * 256 * 32000);
  EXPECT_LT(r.memory.per_device.total(), lm.memory.per_device.total());
  EXPECT_EQ(spec.strategy.adapter, Adapter::kNone);  // unset: none, not auto
  const Plan p = plan_job(spec, gpus("1x4GiB"));
  ASSERT_TRUE(p.fits);
  EXPECT_EQ(p.chosen.strategy.adapter, Adapter::kNone);
  EXPECT_EQ(p.chosen.strategy.cross_entropy, CrossEntropy::kLogits);
}

// Llama-3.1-8B QLoRA at 32k tokens on one 24 GiB GPU fits only with the
// checkpointed inputs in host memory. Pinned, the plan offloads them, a
// rung of its own says so and the host holds them; left to the planner it
// does not (its CUDA path has not run on a GPU yet), and pinned off never.
TEST(PlannerTest, PinnedActivationOffloadFitsLongContextThatNothingElseFits) {
  const std::vector<std::string> long_context = {"model.preset=llama-3.1-8b", "data.seq_len=32768",
                                                 "training.global_batch_size=8", "strategy.adapter=qlora"};
  const Hardware hw = gpus("1x24GiB", Bytes::gib(128));
  std::vector<std::string> pinned = long_context;
  pinned.push_back("strategy.activation_offload=true");
  const Plan p = plan_job(load("llama2-7b-qlora-24gb.yaml", pinned), hw);
  ASSERT_TRUE(p.fits);
  EXPECT_TRUE(p.chosen.strategy.activation_offload);
  EXPECT_GE(p.chosen.strategy.checkpoint_every, 1);
  EXPECT_GT(p.chosen.memory.host.count(), 0);
  EXPECT_TRUE(std::any_of(p.decisions.begin(), p.decisions.end(), [](const Decision& d) {
    return d.step == "activation_offload" && d.verdict == Verdict::kApplied;
  }));
  for (const char* left : {"strategy.activation_offload=auto", "strategy.activation_offload=false"}) {
    std::vector<std::string> o = long_context;
    o.push_back(left);
    const Plan q = plan_job(load("llama2-7b-qlora-24gb.yaml", o), hw);
    EXPECT_FALSE(q.fits) << left;
    EXPECT_FALSE(q.chosen.strategy.activation_offload) << left;
    // Left to the planner, the plan says the pin would make it fit, and why
    // it is not chosen; pinned off, it says nothing of it.
    const bool left_auto = std::string(left).ends_with("auto");
    ASSERT_EQ(q.with_activation_offload.has_value(), left_auto) << left;
    if (left_auto) {
      EXPECT_TRUE(q.with_activation_offload->candidate.fits);
      EXPECT_TRUE(q.with_activation_offload->candidate.strategy.activation_offload);
      EXPECT_EQ(q.with_activation_offload->candidate.strategy, p.chosen.strategy);
      EXPECT_NE(q.no_fit_reason().find("fits with strategy.activation_offload: true"), std::string::npos)
          << q.no_fit_reason();
    }
    for (const Alternative& a : q.alternatives)
      EXPECT_FALSE(a.candidate.strategy.activation_offload) << left;
  }
  // On the CPU the host is the device: nothing to gain, never chosen.
  const Plan c = plan_job(load("tiny-cpu.yaml", {"data.seq_len=128"}), cpu(Bytes::mib(64)));
  EXPECT_FALSE(c.chosen.strategy.activation_offload);
}

// Answers to training.eval_prompts are generated on rank 0 alone, which
// needs the whole model there: the planner keeps such a job off ZeRO-3.
TEST(PlannerTest, EvalPromptsKeepTheWholeModelOnOneRank) {
  const Hardware hw = gpus("8xA100-80GB");
  EXPECT_EQ(plan_job(load("llama3-8b-full-8xa100.yaml"), hw).chosen.strategy.zero_stage, 3);
  const dsl::JobSpec asking = load("llama3-8b-full-8xa100.yaml", {"training.eval_prompts=[\"Hi\"]"});
  const Plan p = plan_job(asking, hw);
  ASSERT_TRUE(p.fits);
  EXPECT_LT(p.chosen.strategy.zero_stage, 3);
  Strategy z3 = p.chosen.strategy;
  z3.zero_stage = 3;
  EXPECT_EQ(Constraints(asking, hw).why_not(z3),
            "training.eval_prompts under ZeRO-3 is not built (generation needs the whole model on one rank)");
}

// The 8B example: DPO with adapters on one 24 GiB GPU.
TEST(PlannerTest, DpoOfAn8bModelFitsOne24GbGpuWithAdaptersAndNoCopy) {
  const Plan p = plan_job(load("dpo-llama3-8b-qlora-24gb.yaml"), gpus("1x24GiB"));
  ASSERT_TRUE(p.fits);
  EXPECT_NE(p.chosen.strategy.adapter, Adapter::kNone);
  EXPECT_EQ(p.chosen.strategy.reference, Reference::kAdapterOff);
  EXPECT_EQ(p.chosen.memory.reference.count(), 0);
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
  EXPECT_EQ(p.decisions.back().action(), "reject the job");
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
        // The fastest plan that fits never slows down; the chosen one stays
        // within the policy's three tie bands of it (no offload, spare
        // memory, fewer techniques: each may give up one band).
        auto score = [](const Candidate& c) { return c.throughput.tokens_per_second / (1 + 0.1 * fidelity_cost(c.strategy)); };
        const double fastest = score(p.fastest_by_estimate ? p.fastest_by_estimate->candidate : p.chosen);
        EXPECT_GE(fastest, last_speed * (1 - 1e-9)) << example << " at " << gib << " GiB";
        const double band = 1 - PlanOptions{}.small_gain;
        EXPECT_GE(score(p.chosen), fastest * band * band * band * (1 - 1e-9)) << example << " at " << gib;
        last_speed = fastest;
        fitted = true;
      }
    }
    EXPECT_TRUE(fitted) << example;
  }
}

TEST(PlannerTest, PinnedKnobsAreNeverBroken) {
  const std::vector<std::vector<std::string>> pins = {{"strategy.precision=fp32"},
                                                      {"strategy.precision=pure-bf16"},
                                                      {"strategy.gradient_checkpointing=false"},
                                                      {"strategy.gradient_checkpointing=2"},
                                                      {"strategy.adapter=none"},
                                                      {"strategy.adapter=lora"},
                                                      {"strategy.optimizer=adamw_8bit"},
                                                      {"strategy.optimizer=sgd"},
                                                      {"strategy.zero_stage=0"},
                                                      {"strategy.optimizer=lion"},
                                                      {"training.micro_batch_size=2"},
                                                      {"strategy.adapter=qlora", "strategy.precision=bf16"},
                                                      {"strategy.quantization=nf4"},
                                                      {"strategy.quantization=int8"},
                                                      {"strategy.quantization=none"}};
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
    if (want.quantization) {
      EXPECT_EQ(s.quantization, *want.quantization);
      if (*want.quantization != Quantization::kNone) {
        EXPECT_EQ(s.adapter, Adapter::kQlora);
      }
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

// The base's quantisation is a knob: unpinned, the search takes the
// smallest base, NF4 with double quantisation, which is also the least to
// read when dequantising; pinned, it is kept, QLoRA follows, and the plan
// names it.
TEST(PlannerTest, TheQuantisationIsAKnobOfItsOwn) {
  const Plan free = plan_job(load("llama2-7b-qlora-24gb.yaml", {"strategy.adapter=qlora"}), gpus("1x24GiB"));
  ASSERT_TRUE(free.fits);
  EXPECT_EQ(free.chosen.strategy.quantization, Quantization::kNf4Double);
  const Plan nf4 = plan_job(load("llama2-7b-qlora-24gb.yaml", {"strategy.quantization=nf4"}), gpus("1x24GiB"));
  ASSERT_TRUE(nf4.fits);
  EXPECT_EQ(nf4.chosen.strategy.adapter, Adapter::kQlora);
  EXPECT_EQ(nf4.chosen.strategy.quantization, Quantization::kNf4);
  // The same plan with the other base: fp32 absmax per 64 values against
  // 8-bit ones, more bytes stored and read.
  Strategy doubled = nf4.chosen.strategy;
  doubled.quantization = Quantization::kNf4Double;
  const dsl::JobSpec spec = load("llama2-7b-qlora-24gb.yaml");
  const Candidate single = evaluate(spec, gpus("1x24GiB"), nf4.chosen.strategy, {});
  const Candidate both = evaluate(spec, gpus("1x24GiB"), doubled, {});
  EXPECT_GT(single.memory.per_device.weights, both.memory.per_device.weights);
  EXPECT_LT(single.throughput.tokens_per_second, both.throughput.tokens_per_second);
  EXPECT_NE(nf4.chosen.strategy.describe().find("qlora r16 over nf4,"), std::string::npos);
  EXPECT_EQ(free.chosen.strategy.describe().find(" over "), std::string::npos);
  // The tree's QLoRA rung names the base it quantises to.
  const Plan walked = plan_job(load("llama2-7b-qlora-24gb.yaml"), gpus("1x24GiB"));
  bool named = false;
  for (const Decision& d : walked.decisions) {
    if (d.step == "qlora")
      named = d.question.find("4-bit NF4 base weights with double quantisation") != std::string::npos;
  }
  EXPECT_TRUE(named);
}

// SGD's and Lion's learning rates are not AdamW's: the planner never swaps
// them in for a spec's lr, even where their single state would fit.
TEST(PlannerTest, OptimizersWithTheirOwnLearningRatesAreUsedOnlyWhenPinned) {
  for (const char* gib : {"1x24GiB", "1x48GiB", "1x80GiB"}) {
    const Plan p = plan_job(load("llama2-7b-qlora-24gb.yaml", {}), gpus(gib));
    for (const Alternative& a : p.alternatives) {
      EXPECT_NE(a.candidate.strategy.optimizer, Optimizer::kLion) << gib << ": " << a.candidate.strategy.describe();
      EXPECT_NE(a.candidate.strategy.optimizer, Optimizer::kSgd) << gib << ": " << a.candidate.strategy.describe();
    }
    EXPECT_EQ(Constraints(load("llama2-7b-qlora-24gb.yaml", {}), gpus(gib)).why_not([&] {
      Strategy s = p.chosen.strategy;
      s.optimizer = Optimizer::kLion;
      return s;
    }()), "Lion is used only when pinned");
  }
  const Plan lion = plan_job(load("llama2-7b-qlora-24gb.yaml", {"strategy.optimizer=lion"}), gpus("1x48GiB"));
  ASSERT_TRUE(lion.fits);
  EXPECT_EQ(lion.chosen.strategy.optimizer, Optimizer::kLion);
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

// Allow lists name techniques as users do: `lora` alone allows a LoRA plan
// (it once also needed "adapters", which every adapter plan uses).
TEST(PlannerTest, AllowingLoraAllowsALoraPlan) {
  const Plan p = plan_job(load("llama2-7b-qlora-24gb.yaml",
                               {"strategy.allow=[bf16, lora, gradient_checkpointing, gradient_accumulation]"}),
                          gpus("1x24GiB"));
  ASSERT_TRUE(p.fits) << (p.errors.empty() ? "" : p.errors[0]);
  EXPECT_EQ(p.chosen.strategy.adapter, Adapter::kLora);
  // `offload_params` alone allows parameter offload (which includes the
  // optimizer's): 7B fully fine-tuned on one 24 GiB GPU.
  const Plan offload = plan_job(
      load("llama2-7b-qlora-24gb.yaml", {"strategy.allow=[bf16, gradient_checkpointing, gradient_accumulation, "
                                         "zero3, offload_params]"}),
      gpus("1x24GiB", Bytes::gib(256)));
  ASSERT_TRUE(offload.fits) << (offload.errors.empty() ? offload.no_fit_reason() : offload.errors[0]);
  EXPECT_EQ(offload.chosen.strategy.offload, dsl::Offload::kOptimizerAndParams);
}

// A pin that rules out every plan is named with the reason, not only "no
// strategy satisfies the pinned knobs".
TEST(PlannerTest, Fp16PinnedOnTheCpuSaysWhy) {
  const Plan p = plan_job(load("tiny-cpu.yaml", {"strategy.precision=fp16"}), cpu(Bytes::gib(2)));
  ASSERT_FALSE(p.fits);
  ASSERT_EQ(p.errors.size(), 1u);
  EXPECT_NE(p.errors[0].find("fp16 has no CPU kernels"), std::string::npos) << p.errors[0];
  EXPECT_NE(p.errors[0].find("pin bf16 or fp32"), std::string::npos) << p.errors[0];
}

// A pin that excludes a better plan is named with the figures: a full
// fine-tune of 7B pinned on one 24 GiB GPU does not fit without offload,
// and an adapter does.
TEST(PlannerTest, APinThatExcludesABetterPlanIsNamedWithItsFigures) {
  const Plan p = plan_job(load("llama2-7b-qlora-24gb.yaml", {"strategy.adapter=none"}), gpus("1x24GiB"));
  ASSERT_TRUE(!p.fits || p.chosen.strategy.offload != dsl::Offload::kNone) << p.chosen.strategy.describe();
  const PinAdvice* adapter = nullptr;
  for (const PinAdvice& a : p.advice) {
    if (a.knob == dsl::Knob::kAdapter) adapter = &a;
  }
  ASSERT_NE(adapter, nullptr);
  EXPECT_NE(adapter->candidate.strategy.adapter, Adapter::kNone);
  EXPECT_TRUE(adapter->candidate.fits);
  EXPECT_EQ(adapter->candidate.strategy.offload, dsl::Offload::kNone);
  EXPECT_NE(adapter->text.find(adapter->candidate.memory.per_device.total().to_string()), std::string::npos)
      << adapter->text;
  EXPECT_NE(adapter->text.find(": unpin strategy.adapter"), std::string::npos) << adapter->text;
  const std::string doc = plan_to_json(p, load("llama2-7b-qlora-24gb.yaml", {"strategy.adapter=none"}));
  EXPECT_NE(doc.find("\"unpin\": \"strategy.adapter\""), std::string::npos) << doc.substr(0, 400);

  // Without pins, or with a pin the best plan keeps, there is no advice.
  EXPECT_TRUE(plan_job(load("llama2-7b-qlora-24gb.yaml"), gpus("1x24GiB")).advice.empty());
  const Plan unpinned = plan_job(load("llama2-7b-qlora-24gb.yaml"), gpus("1x24GiB"));
  const std::string kept = std::string("strategy.adapter=") + dsl::to_string(unpinned.chosen.strategy.adapter);
  EXPECT_TRUE(plan_job(load("llama2-7b-qlora-24gb.yaml", {kept}), gpus("1x24GiB")).advice.empty());
}

// Pure bf16 weights with 8-bit states lose small updates in a full
// fine-tune: the planner does not choose the pair unless the spec accepts
// the trade (or pins both).
TEST(PlannerTest, AFullFineTuneCombinesPureBf16AndEightBitStatesOnlyWhenAllowed) {
  const std::vector<std::string> full = {"strategy.adapter=none", "strategy.offload=none", "strategy.zero_stage=0"};
  auto lossy = [](const Plan& p) {
    return p.chosen.strategy.precision == Precision::kPureBf16 && p.chosen.strategy.optimizer == Optimizer::kAdamw8bit;
  };
  std::vector<std::string> allowed = full;
  allowed.push_back("strategy.allow_lossy=true");
  // A budget where the pair is what fits: the allowed plan takes it, the
  // default does not.
  bool seen = false;
  for (const char* gpu : {"1x16GiB", "1x20GiB", "1x24GiB", "1x32GiB"}) {
    const Plan with = plan_job(load("llama2-7b-qlora-24gb.yaml", allowed), gpus(gpu));
    if (!lossy(with)) continue;
    seen = true;
    const Plan without = plan_job(load("llama2-7b-qlora-24gb.yaml", full), gpus(gpu));
    EXPECT_FALSE(lossy(without)) << gpu << ": " << without.chosen.strategy.describe();
    bool named = false;
    for (const Decision& d : without.decisions) {
      named = named || d.reason.find("strategy.allow_lossy") != std::string::npos;
    }
    EXPECT_TRUE(named) << gpu << ": the trace does not name the trade";
  }
  EXPECT_TRUE(seen) << "no budget where pure bf16 with 8-bit states is the plan";
  // Pinned both: the user asked for it.
  std::vector<std::string> pinned = full;
  pinned.push_back("strategy.precision=pure-bf16");
  pinned.push_back("strategy.optimizer=adamw_8bit");
  EXPECT_TRUE(lossy(plan_job(load("llama2-7b-qlora-24gb.yaml", pinned), gpus("1x80GiB"))));
}

TEST(PlannerTest, DecisionTraceFollowsTheTreeAndStopsWhenItFits) {
  const Plan p = plan_job(load("llama2-7b-qlora-24gb.yaml"), gpus("1x24GiB"));
  ASSERT_GE(p.decisions.size(), 5u);
  EXPECT_EQ(p.decisions[0].question.rfind("Does the job fit as written", 0), 0u);
  EXPECT_NE(p.decisions[1].question.find("Mixed precision"), std::string::npos);
  EXPECT_NE(p.decisions[2].question.find("Gradient checkpointing"), std::string::npos);
  EXPECT_NE(p.decisions[3].question.find("Fuse the output projection with the loss"), std::string::npos);
  EXPECT_NE(p.decisions[4].question.find("micro-batch"), std::string::npos);
  EXPECT_NE(p.decisions[0].answer().find("GiB"), std::string::npos);  // byte figures
  EXPECT_NE(p.decisions.back().question.find("fastest"), std::string::npos);
  // A job that fits as written shows only the steps its plan takes (here
  // for speed): nothing "not needed".
  const Plan easy = plan_job(load("tiny-cpu.yaml"), cpu(Bytes::gib(2)));
  EXPECT_EQ(easy.decisions[0].action(), "keep it");
  for (const Decision& d : easy.decisions) {
    EXPECT_TRUE(d.verdict == Verdict::kFits || d.verdict == Verdict::kApplied || d.verdict == Verdict::kChosen)
        << d.question << " " << d.answer();
  }
}

TEST(PlannerTest, ForbiddenStepsAreSkippedInTheTrace) {
  const Plan p = plan_job(load("llama2-7b-qlora-24gb.yaml", {"strategy.forbid=[gradient_checkpointing]"}), gpus("1x24GiB"));
  bool found = false;
  for (const Decision& d : p.decisions) {
    if (d.question.find("Gradient checkpointing") != std::string::npos) {
      found = true;
      EXPECT_NE(d.answer().find("not allowed"), std::string::npos) << d.answer();
      EXPECT_EQ(d.action(), "none");
    }
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(p.chosen.strategy.checkpoint_every, 0);
}

// The trace starts at the spec as written and ends at the plan chosen: every
// step it takes is one the plan uses, every step it does not take says why.
TEST(PlannerTest, TheTraceEndsAtTheChosenPlanWithAReasonForEveryStepNotTaken) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"llama2-7b-qlora-24gb.yaml", "1x24GiB"}, {"llama2-7b-qlora-24gb.yaml", "1xT4"},
      {"llama2-70b-2xa6000.yaml", "2xA6000"},   {"gpt2-t4.yaml", "1xT4"},
      {"llama3-8b-full-8xa100.yaml", "8xA100-80GB"}, {"llama2-13b-4090.yaml", "1xRTX-4090"}};
  for (const auto& [example, hw] : cases) {
    const Plan p = plan_job(load(example), gpus(hw, Bytes::gib(256)));
    ASSERT_GE(p.decisions.size(), 2u) << example;
    const Strategy& s = p.chosen.strategy;
    EXPECT_EQ(p.decisions.front().step, "as_written");
    EXPECT_EQ(p.decisions.back().step, "search");
    EXPECT_EQ(p.decisions.back().needed, p.chosen.memory.per_device.total()) << example;
    for (const Decision& d : p.decisions) {
      EXPECT_GT(d.budget.count(), 0);
      if (d.verdict == Verdict::kApplied) {
        const bool uses = d.step == "precision"        ? s.precision != Precision::kFp32
                          : d.step == "checkpointing"  ? s.checkpoint_every > 0
                          : d.step == "micro_batch"    ? true
                          : d.step == "zero_1_2"       ? s.zero_stage >= 1
                          : d.step == "optimizer_8bit" ? s.optimizer == Optimizer::kAdamw8bit
                          : d.step == "lora"           ? s.adapter != Adapter::kNone
                          : d.step == "qlora"          ? s.adapter == Adapter::kQlora
                          : d.step == "zero_3"         ? s.zero_stage == 3
                          : d.step == "offload_optimizer" ? s.offload != Offload::kNone
                          : d.step == "offload_params" ? s.offload == Offload::kOptimizerAndParams
                                                       : true;
        EXPECT_TRUE(uses) << example << " on " << hw << ": " << d.question << " applied, plan " << s.describe();
        EXPECT_FALSE(d.change.empty());
      } else if (d.verdict != Verdict::kFits && d.verdict != Verdict::kChosen) {
        EXPECT_FALSE(d.reason.empty()) << example << ": " << d.question << " " << to_string(d.verdict);
      }
    }
    // Every step the plan uses appears as taken (or pinned).
    auto shown = [&](const std::string& step) {
      for (const Decision& d : p.decisions) {
        if (d.step == step && (d.verdict == Verdict::kApplied || d.verdict == Verdict::kAlready)) return true;
      }
      return false;
    };
    if (s.optimizer == Optimizer::kAdamw8bit) {
      EXPECT_TRUE(shown("optimizer_8bit")) << example;
    }
    if (s.adapter == Adapter::kQlora) {
      EXPECT_TRUE(shown("qlora")) << example;
    }
    if (s.offload != Offload::kNone) {
      EXPECT_TRUE(shown("offload_optimizer")) << example;
    }
  }
}

// A runner that cannot execute offload gets plans without it, and the plan
// says which plan it would choose otherwise.
TEST(PlannerTest, OnlyExecutablePlansAreChosenAndTheBetterOneIsNamed) {
  const dsl::JobSpec spec = load("llama2-7b-qlora-24gb.yaml", {"strategy.forbid=[qlora]"});
  const Plan any = plan_job(spec, gpus("1xT4"));
  ASSERT_TRUE(any.fits);
  ASSERT_NE(any.chosen.strategy.offload, Offload::kNone) << any.chosen.strategy.describe();
  EXPECT_FALSE(any.preferred_if_executable.has_value());
  PlanOptions o;
  o.why_not_executable = [](const Strategy& s) { return s.offload != Offload::kNone ? std::string("no host offload here") : ""; };
  const Plan limited = plan_job(spec, gpus("1xT4"), o);
  EXPECT_FALSE(limited.fits);
  EXPECT_EQ(limited.chosen.strategy.offload, Offload::kNone);
  ASSERT_TRUE(limited.preferred_if_executable.has_value());
  EXPECT_EQ(limited.preferred_if_executable->candidate.strategy, any.chosen.strategy);
  EXPECT_NE(limited.no_fit_reason().find("no host offload here"), std::string::npos) << limited.no_fit_reason();
  EXPECT_EQ(limited.decisions.back().verdict, Verdict::kNoneFits);
  bool named = false;
  for (const Decision& d : limited.decisions) named |= d.verdict == Verdict::kNotExecutable;
  EXPECT_TRUE(named);
}

// Speed differences inside the cost model's error do not buy a plan that
// grazes the budget or offloads: the T4 case (Llama-2-7B, one T4 at
// the 16 GiB it is sold with, where QLoRA on the device and LoRA with
// offload are within the band; at the driver's 15 GiB the band no longer
// holds them both) keeps QLoRA on the device with memory to spare.
TEST(PlannerTest, NearTiesGoToNoOffloadAndSpareMemory) {
  Hardware t4 = gpus("1xT4");
  t4.gpus[0].memory = Bytes::gib(16);
  const Plan p = plan_job(load("llama2-7b-qlora-24gb.yaml"), t4);
  ASSERT_TRUE(p.fits);
  EXPECT_EQ(p.chosen.strategy.offload, Offload::kNone) << p.chosen.strategy.describe();
  EXPECT_EQ(p.chosen.strategy.adapter, Adapter::kQlora);
  EXPECT_GE(static_cast<double>(p.chosen.spare().count()), 0.05 * static_cast<double>(p.budget_per_device.count()));
  if (p.fastest_by_estimate) {
    // Whatever was faster by estimate was so by less than the tie band.
    EXPECT_LT(p.fastest_by_estimate->candidate.throughput.tokens_per_second,
              p.chosen.throughput.tokens_per_second * 1.06);
  }
  // Without the tie band the plan is the estimate's fastest (speed
  // discounted for what a plan changes in training), offload or not.
  PlanOptions strict;
  strict.small_gain = 0;
  const Plan fastest = plan_job(load("llama2-7b-qlora-24gb.yaml"), t4, strict);
  EXPECT_FALSE(fastest.fastest_by_estimate.has_value());
  auto score = [](const Candidate& c) { return c.throughput.tokens_per_second / (1 + 0.1 * fidelity_cost(c.strategy)); };
  EXPECT_GT(score(fastest.chosen), score(p.chosen));
}

TEST(PlannerTest, HeadroomIsAStrategyPolicy) {
  const Plan ten = plan_job(load("llama2-7b-qlora-24gb.yaml"), gpus("1x24GiB"));
  const Plan thirty = plan_job(load("llama2-7b-qlora-24gb.yaml", {"strategy.headroom=30%"}), gpus("1x24GiB"));
  EXPECT_DOUBLE_EQ(ten.headroom, 0.10);
  EXPECT_DOUBLE_EQ(thirty.headroom, 0.30);
  EXPECT_EQ(thirty.budget_per_device.count(), static_cast<std::int64_t>(0.7 * static_cast<double>(Bytes::gib(24).count())));
  ASSERT_TRUE(thirty.fits);
  EXPECT_LE(thirty.chosen.memory.per_device.total(), thirty.budget_per_device);
}

// resources.ranks on the CPU: N processes share it, each with 1/N of the
// memory as its budget; ZeRO may shard across them, offload has nowhere to go.
TEST(PlannerTest, RanksOnTheCpuShareItsMemoryAndMayShardTheOptimizer) {
  const Plan one = plan_job(load("tiny-cpu.yaml"), cpu(Bytes::gib(2)));
  const Plan two = plan_job(load("tiny-cpu.yaml", {"resources.ranks=2", "strategy.zero_stage=2"}), cpu(Bytes::gib(2)));
  ASSERT_TRUE(two.fits) << two.no_fit_reason();
  EXPECT_EQ(two.chosen.strategy.num_gpus, 2);
  EXPECT_EQ(two.chosen.strategy.zero_stage, 2);
  EXPECT_EQ(two.chosen.strategy.micro_batch_size * two.chosen.strategy.grad_accumulation * 2, 16);
  EXPECT_NEAR(static_cast<double>(two.budget_per_device.count()), one.budget_per_device.count() / 2.0, 1.0);
  // Without a pin, ranks stay as asked (never fewer) and stage 0 is admitted.
  const Plan free = plan_job(load("tiny-cpu.yaml", {"resources.ranks=2"}), cpu(Bytes::gib(2)));
  ASSERT_TRUE(free.fits);
  EXPECT_EQ(free.chosen.strategy.num_gpus, 2);
  // Host and device are one memory on the CPU: offload only when pinned
  // (the runner then keeps it in its host ledger), with its host bytes.
  EXPECT_EQ(free.chosen.strategy.offload, Offload::kNone);
  const Plan offload =
      plan_job(load("tiny-cpu.yaml", {"resources.ranks=2", "strategy.zero_stage=1", "strategy.offload=optimizer"}),
               cpu(Bytes::gib(2)));
  ASSERT_TRUE(offload.fits) << offload.no_fit_reason();
  EXPECT_EQ(offload.chosen.strategy.offload, Offload::kOptimizer);
  EXPECT_EQ(offload.chosen.memory.per_device.optimizer_states.count(), 0);
  EXPECT_GT(offload.chosen.memory.host.count(), 0);
  // Three ranks cannot share a global batch of 16.
  const Plan three = plan_job(load("tiny-cpu.yaml", {"resources.ranks=3"}), cpu(Bytes::gib(2)));
  ASSERT_FALSE(three.errors.empty());
  EXPECT_NE(three.errors[0].find("not divisible by the 3 ranks"), std::string::npos) << three.errors[0];
}

// More ranks than GPUs is an error naming both.
TEST(PlannerTest, RanksBeyondTheGpusAreRefused) {
  auto hw = *resolve_hardware(dsl::JobSpec{}, "2xA100-80GB,host=256GiB", {}, std::nullopt, dsl::Catalog::builtin());
  const Plan p = plan_job(load("llama3-8b-full-8xa100.yaml", {"resources.ranks=4"}), hw);
  ASSERT_FALSE(p.errors.empty());
  EXPECT_NE(p.errors[0].find("resources.ranks is 4"), std::string::npos) << p.errors[0];
  EXPECT_NE(p.errors[0].find("one rank per GPU at most"), std::string::npos) << p.errors[0];
}

// Across nodes collectives run at the network's speed, and offloaded bytes
// are shared by the nodes' hosts.
TEST(PlannerTest, SeveralNodesPayTheNetworkAndShareHostMemory) {
  dsl::JobSpec spec = load("llama3-8b-full-8xa100.yaml");
  // A stack whose collectives overlap with compute (tailor-runner's are
  // queued in the compute stream's order).
  spec.planner.runtime = dsl::Runtime::kHf;
  auto hw = [](const std::string& flag) {
    return *resolve_hardware(dsl::JobSpec{}, flag, {}, std::nullopt, dsl::Catalog::builtin());
  };
  const Hardware one_node = hw("16xH100,host=1TiB");
  const Hardware two_nodes = hw("8xH100,host=1TiB,nodes=2");
  Strategy s;
  s.precision = Precision::kBf16;
  s.checkpoint_every = 1;
  s.micro_batch_size = 1;
  s.grad_accumulation = spec.training.global_batch_size / 16;
  s.num_gpus = 16;
  s.zero_stage = 3;
  s.offload = Offload::kOptimizer;
  const Candidate a = evaluate(spec, one_node, s, {});
  const Candidate b = evaluate(spec, two_nodes, s, {});
  EXPECT_GT(b.throughput.comm_seconds, a.throughput.comm_seconds);
  EXPECT_EQ(b.memory.per_device.total(), a.memory.per_device.total());
  EXPECT_NEAR(static_cast<double>(b.memory.host.count()), static_cast<double>(a.memory.host.count()) / 2, 1.0);
}

// planner.runtime predicts another stack's run: transformers keeps what
// tailor-runner does not (bitsandbytes' 4-bit linears keep their inputs, a
// composed loss, foreach AdamW's step temporary) and reserves more.
TEST(PlannerTest, TheRuntimeProfilePredictsAnotherStacksMemory) {
  const std::vector<std::string> pins = {"strategy.adapter=qlora", "strategy.precision=bf16",
                                         "strategy.gradient_checkpointing=false", "training.micro_batch_size=1"};
  const dsl::JobSpec tailor_spec = load("llama2-7b-qlora-24gb.yaml", pins);
  std::vector<std::string> hf_pins = pins;
  hf_pins.push_back("planner.runtime=hf");
  const dsl::JobSpec hf_spec = load("llama2-7b-qlora-24gb.yaml", hf_pins);
  EXPECT_EQ(hf_spec.planner.runtime, dsl::Runtime::kHf);
  const Plan tailor = plan_job(tailor_spec, gpus("1x80GiB"));
  const Plan hf = plan_job(hf_spec, gpus("1x80GiB"));
  ASSERT_TRUE(tailor.fits && hf.fits);
  ASSERT_EQ(tailor.chosen.strategy, hf.chosen.strategy);
  EXPECT_GT(hf.chosen.memory.per_device.activations, tailor.chosen.memory.per_device.activations);
  EXPECT_GT(hf.chosen.memory.per_device.logits, tailor.chosen.memory.per_device.logits);
  // Reserved is reported beside allocated: context plus the tensors grown
  // by the stack's fragmentation.
  const Bytes context = MemoryConstants::defaults().gpu_context_overhead;
  EXPECT_EQ(hf.chosen.reserved, context + Bytes(static_cast<std::int64_t>(
                                              static_cast<double>((hf.chosen.memory.per_device.total() - context).count()) *
                                              runtime_profile(dsl::Runtime::kHf).reserved_over_allocated)));
  EXPECT_GT(hf.chosen.reserved, hf.chosen.memory.per_device.total());
}

TEST(PlannerTest, TheLargestGlobalBatchPlansWithEveryDivisorAsAMicroBatch) {
  // 2^20 sequences over 4 GPUs: micro-batches are the 19 divisors of 2^18,
  // found by trial division to the square root, not by counting to 2^18.
  const Plan p = plan_job(load("gpt2-t4.yaml", {"training.global_batch_size=1048576"}), gpus("4xT4"));
  ASSERT_TRUE(p.errors.empty()) << p.errors.front();
  ASSERT_TRUE(p.fits);
  const Strategy& s = p.chosen.strategy;
  EXPECT_EQ(s.micro_batch_size * s.grad_accumulation * s.num_gpus, 1048576);
  EXPECT_EQ(s.micro_batch_size & (s.micro_batch_size - 1), 0);  // a power of two
}

TEST(PlannerTest, GlobalBatchNotDivisibleByGpusIsAnError) {
  const Plan p = plan_job(load("gpt2-t4.yaml", {"training.global_batch_size=30"}), gpus("4xT4"));
  EXPECT_FALSE(p.fits);
  ASSERT_EQ(p.errors.size(), 1u);
  EXPECT_NE(p.errors[0].find("not divisible by the 4 GPUs"), std::string::npos);
}

}  // namespace
}  // namespace tailor::strategies
