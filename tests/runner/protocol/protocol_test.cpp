// The runner protocol both sides link: the plan reader, the exit an events
// file records, and what the runner can execute.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "dsl/catalog.h"
#include "dsl/spec_loader.h"
#include "runner/protocol/capabilities.h"
#include "runner/protocol/events.h"
#include "runner/protocol/exit_code.h"
#include "runner/protocol/plan_reader.h"

namespace tailor::runner {
namespace {

using nlohmann::json;

json strategy_json() {
  return {{"precision", "bf16"},       {"adapter", "qlora"},   {"optimizer", "adamw_8bit"},
          {"offload", "none"},         {"quantization", "nf4-double-quant"},
          {"gradient_checkpointing", 1}, {"micro_batch_size", 2}, {"gradient_accumulation_steps", 8},
          {"lora_rank", 16},           {"zero_stage", 0},      {"num_gpus", 1}, {"attention", "fused"}};
}

std::string plan_text(const json& strategy) { return json{{"schema_version", 1}, {"strategy", strategy}}.dump(); }

TEST(PlanReaderTest, StrategyReadsEveryKnobByItsName) {
  auto s = parse_plan_strategy(plan_text(strategy_json()), "plan.json");
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->precision, dsl::Precision::kBf16);
  EXPECT_EQ(s->adapter, dsl::Adapter::kQlora);
  EXPECT_EQ(s->optimizer, dsl::Optimizer::kAdamw8bit);
  EXPECT_EQ(s->quantization, strategies::Quantization::kNf4Double);
  EXPECT_EQ(s->grad_accumulation, 8);
  EXPECT_EQ(s->attention, strategies::Attention::kMemoryEfficient);
}

// int8 and single NF4 were both read as NF4 double-quant before.
TEST(PlanReaderTest, QuantisationIsReadAsWrittenNotRounded) {
  for (auto q : {strategies::Quantization::kNone, strategies::Quantization::kInt8, strategies::Quantization::kNf4,
                 strategies::Quantization::kNf4Double}) {
    json st = strategy_json();
    st["quantization"] = dsl::to_string(q);
    auto s = parse_plan_strategy(plan_text(st), "plan.json");
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    EXPECT_EQ(s->quantization, q) << dsl::to_string(q);
  }
}

TEST(PlanReaderTest, UnknownNamesAndMissingKeysAreErrorsNamingTheKey) {
  json st = strategy_json();
  st["optimizer"] = "adafactor";
  auto bad = parse_plan_strategy(plan_text(st), "plan.json");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("strategy.optimizer \"adafactor\""), std::string::npos) << bad.status().message();
  st = strategy_json();
  st.erase("micro_batch_size");
  EXPECT_FALSE(parse_plan_strategy(plan_text(st), "plan.json").is_ok());
  EXPECT_FALSE(parse_plan_strategy(R"({"schema_version": 2})", "plan.json").is_ok());
  // Plans written before the attention was planned read as fused.
  st = strategy_json();
  st.erase("attention");
  auto old = parse_plan_strategy(plan_text(st), "plan.json");
  ASSERT_TRUE(old.is_ok());
  EXPECT_EQ(old->attention, strategies::Attention::kMemoryEfficient);
}

// Written only when on; a plan that offloads without checkpointing has
// nothing to offload and is refused by name.
TEST(PlanReaderTest, ActivationOffloadIsReadWhenWrittenAndNeedsCheckpointing) {
  auto plain = parse_plan_strategy(plan_text(strategy_json()), "plan.json");
  ASSERT_TRUE(plain.is_ok());
  EXPECT_FALSE(plain->activation_offload);
  json st = strategy_json();
  st["activation_offload"] = true;
  auto on = parse_plan_strategy(plan_text(st), "plan.json");
  ASSERT_TRUE(on.is_ok()) << on.status().to_string();
  EXPECT_TRUE(on->activation_offload);
  st["gradient_checkpointing"] = 0;
  auto bad = parse_plan_strategy(plan_text(st), "plan.json");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("activation_offload"), std::string::npos) << bad.status().message();
}

TEST(EventsTest, TheTerminalEventsExitCodeIsTheRunsExit) {
  using events::exit_from_events;
  // A runner that refused its input says so: bad input, not a crash to retry.
  EXPECT_EQ(exit_from_events({R"({"event":"start"})", R"({"event":"error","message":"x","exit_code":2})"}),
            RunnerExit::kBadInput);
  EXPECT_EQ(exit_from_events({R"({"event":"start"})", R"({"event":"error","message":"x","exit_code":1})"}),
            RunnerExit::kFailure);
  EXPECT_EQ(exit_from_events({R"({"event":"start"})", R"({"event":"oom","exit_code":3})"}), RunnerExit::kOutOfMemory);
  // Runners before the code was written: implied by the kind.
  EXPECT_EQ(exit_from_events({R"({"event":"start"})", R"({"event":"done"})"}), RunnerExit::kOk);
  EXPECT_EQ(exit_from_events({R"({"event":"start"})", R"({"event":"oom"})"}), RunnerExit::kOutOfMemory);
  EXPECT_EQ(exit_from_events({R"({"event":"cancelled"})"}), RunnerExit::kCancelled);
  // Killed: no terminal event after the last start or resume.
  EXPECT_EQ(exit_from_events({R"({"event":"start"})", R"({"event":"checkpoint"})"}), std::nullopt);
  EXPECT_EQ(exit_from_events({R"({"event":"done","exit_code":0})", R"({"event":"resume"})"}), std::nullopt);
  EXPECT_EQ(exit_from_events({R"({"event":"start"})", R"({"event":"checkpoint_error","message":"disk"})"}),
            std::nullopt);
  EXPECT_EQ(exit_from_events({}), std::nullopt);
  // tailord's launch line: the attempt after it has not spoken yet, whatever
  // the one before said.
  EXPECT_EQ(exit_from_events({R"({"event":"oom","exit_code":3})", R"({"event":"launch","attempt":2})"}), std::nullopt);
}

// Ranks that srun started (not the launcher) each leave their own events
// file; the one that decides is what tailord appends to events.jsonl.
TEST(EventsTest, TheMostTellingRankDecidesAndAskingAgainAddsNothing) {
  const std::string start = R"({"event":"start","time":1})";
  const std::string done = R"({"event":"done","time":9,"exit_code":0})";
  const std::string peer_gone = R"({"event":"error","time":5,"message":"rank 1 stopped","exit_code":1})";
  const std::string oom = R"({"event":"oom","time":4,"budget_bytes":100,"exit_code":3})";
  const std::string bad = R"({"event":"error","time":4,"message":"unreadable","exit_code":2})";
  using Lines = std::vector<std::vector<std::string>>;
  // Every rank finished: rank 0's done stands.
  EXPECT_FALSE(events::deciding_rank_event(Lines{{start, done}, {start, done}}));
  // One rank alone: nothing to decide.
  EXPECT_FALSE(events::deciding_rank_event(Lines{{start}}));
  // Rank 1 ran out of memory; rank 0 said its peer stopped: the OOM decides
  // (re-planned), with the rank that had it.
  auto d = events::deciding_rank_event(Lines{{start, peer_gone}, {start, oom}});
  ASSERT_TRUE(d);
  const json j = json::parse(*d);
  EXPECT_EQ(j["event"], "oom");
  EXPECT_EQ(j["rank"], 1);
  EXPECT_EQ(j["budget_bytes"], 100);
  // Applied: the answer is already there.
  EXPECT_FALSE(events::deciding_rank_event(Lines{{start, peer_gone, *d}, {start, oom}}));
  EXPECT_EQ(events::exit_from_events({start, peer_gone, *d}), RunnerExit::kOutOfMemory);
  // Rank 0 killed without a word (srun's --kill-on-bad-exit): rank 2's bad
  // input decides over rank 1's plain failure.
  d = events::deciding_rank_event(Lines{{start}, {start, peer_gone}, {start, bad}});
  ASSERT_TRUE(d);
  EXPECT_EQ(json::parse(*d)["rank"], 2);
  EXPECT_EQ(json::parse(*d)["exit_code"], 2);
  // Rank 0's own failure outweighs another rank's plain one.
  EXPECT_FALSE(events::deciding_rank_event(Lines{{start, peer_gone}, {start, peer_gone}}));
  // A rank whose run started again after its last word has not spoken yet.
  EXPECT_FALSE(events::deciding_rank_event(Lines{{start, done}, {start, oom, start}}));
}

TEST(ExitCodeTest, OnlyTheRunnersStatusesAreExits) {
  for (int c = 0; c <= 4; ++c) EXPECT_EQ(exit_status(*runner_exit_from_status(c)), c);
  EXPECT_EQ(runner_exit_from_status(127), std::nullopt);
  EXPECT_EQ(runner_exit_from_status(-1), std::nullopt);
}

TEST(CapabilitiesTest, EveryRungRunsAndOtherQuantisationsAreRefusedByName) {
  strategies::Strategy s;
  EXPECT_TRUE(check_executable(s).is_ok());
  s.zero_stage = 3;
  EXPECT_TRUE(check_executable(s).is_ok());
  s = {};
  s.zero_stage = 1;
  s.offload = dsl::Offload::kOptimizer;
  EXPECT_TRUE(check_executable(s).is_ok());
  s.zero_stage = 3;
  s.offload = dsl::Offload::kOptimizerAndParams;  // on one rank too
  EXPECT_TRUE(check_executable(s).is_ok());
  s = {};
  s.num_gpus = 2;  // data parallel and ZeRO-1 over rank processes (runner/dist)
  EXPECT_TRUE(check_executable(s).is_ok());
  s.zero_stage = 1;
  EXPECT_TRUE(check_executable(s).is_ok());
  s.zero_stage = 2;
  EXPECT_TRUE(check_executable(s).is_ok());
  s.zero_stage = 3;
  EXPECT_TRUE(check_executable(s).is_ok());
  s = {};
  s.adapter = dsl::Adapter::kQlora;
  s.quantization = strategies::Quantization::kNf4Double;
  EXPECT_TRUE(check_executable(s).is_ok());
  s.quantization = strategies::Quantization::kInt8;
  EXPECT_NE(check_executable(s).message().find("int8"), std::string::npos);
}

// A base quantisation the runner has no linears for is refused by name
// before anything runs; the planner still predicts it for other runtimes.
TEST(CapabilitiesTest, APinnedQuantisationTheRunnerLacksIsRefusedByName) {
  dsl::JobSpec spec;
  spec.strategy.quantization = dsl::Quantization::kNf4Double;
  EXPECT_TRUE(check_pins_executable(spec).is_ok());
  spec.strategy.quantization = dsl::Quantization::kInt8;
  const Status s = check_pins_executable(spec);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("strategy.quantization pins int8"), std::string::npos) << s.message();
}

TEST(CapabilitiesTest, EveryPinOfTheTreeIsExecutable) {
  EXPECT_TRUE(techniques_not_in_runner().empty());
  dsl::JobSpec spec;
  EXPECT_TRUE(check_pins_executable(spec).is_ok());
  for (int stage = 0; stage <= 3; ++stage) {
    spec.strategy.zero_stage = stage;
    for (dsl::Offload o : {dsl::Offload::kNone, dsl::Offload::kOptimizer, dsl::Offload::kOptimizerAndParams}) {
      spec.strategy.offload = o;
      EXPECT_TRUE(check_pins_executable(spec).is_ok()) << stage << " " << dsl::to_string(o);
    }
  }
}

dsl::JobSpec example(const std::string& name, std::vector<std::string> overrides = {}) {
  dsl::LoadOptions opts;
  opts.overrides = std::move(overrides);
  const auto loaded = dsl::load_job_spec(std::string(TAILOR_SOURCE_DIR) + "/configs/examples/" + name, opts);
  EXPECT_TRUE(loaded.ok()) << loaded.diagnostics.to_string();
  return *loaded.spec;
}

strategies::Hardware declared(const std::string& gpus, const std::string& host = "64GiB") {
  auto hw = strategies::resolve_hardware(example("tiny-cpu.yaml"), gpus + ",host=" + host, {}, std::nullopt,
                                         dsl::Catalog::builtin());
  EXPECT_TRUE(hw.is_ok()) << hw.status().to_string();
  return *hw;
}

// Planning through runner_plan_options() (what `tailor plan`, `tailor run`
// and tailord do) chooses only what the runner executes: every rung now.
TEST(CapabilitiesTest, PlansForTheRunnerAreExecutable) {
  const auto opts = runner_plan_options(nullptr);
  // One T4, QLoRA forbidden: LoRA with the parameters offloaded to the
  // host, which the runner executes: the same plan as the planner's own.
  const dsl::JobSpec lora = example("llama2-7b-qlora-24gb.yaml", {"strategy.forbid=[qlora]"});
  const strategies::Plan any = strategies::plan_job(lora, declared("1xT4"));
  ASSERT_TRUE(any.fits);
  const strategies::Plan tight = strategies::plan_job(lora, declared("1xT4"), opts);
  ASSERT_TRUE(tight.fits) << tight.no_fit_reason();
  EXPECT_EQ(tight.chosen.strategy, any.chosen.strategy);
  EXPECT_EQ(tight.chosen.strategy.offload, dsl::Offload::kOptimizerAndParams) << tight.chosen.strategy.describe();
  EXPECT_FALSE(tight.preferred_if_executable.has_value());
  for (const auto& a : tight.alternatives) {
    EXPECT_EQ(a.candidate.executable(), check_executable(a.candidate.strategy).is_ok());
  }

  const dsl::JobSpec llama = example("llama2-7b-qlora-24gb.yaml");
  const strategies::Plan t4 = strategies::plan_job(llama, declared("1xT4"), opts);
  ASSERT_TRUE(t4.fits);
  EXPECT_TRUE(check_executable(t4.chosen.strategy).is_ok()) << t4.chosen.strategy.describe();

  // Two GPUs: one rank each, the global batch shared between them.
  const strategies::Plan two = strategies::plan_job(llama, declared("2xA100-80GB"), opts);
  ASSERT_TRUE(two.fits);
  EXPECT_EQ(two.chosen.strategy.num_gpus, 2);
  EXPECT_EQ(two.chosen.strategy.micro_batch_size * two.chosen.strategy.grad_accumulation * 2,
            llama.training.global_batch_size);
  EXPECT_TRUE(check_executable(two.chosen.strategy).is_ok());
  // ZeRO-3 where only it fits: a full fine-tune of 70B on eight A100s.
  dsl::JobSpec seventy = example("llama2-70b-2xa6000.yaml", {"strategy.adapter=none"});
  const strategies::Plan eight = strategies::plan_job(seventy, declared("8xA100-80GB", "1TiB"), opts);
  ASSERT_TRUE(eight.fits) << eight.no_fit_reason();
  EXPECT_EQ(eight.chosen.strategy.zero_stage, 3);
  EXPECT_TRUE(check_executable(eight.chosen.strategy).is_ok());
  // On two A100s only parameter offload fits.
  const strategies::Plan big = strategies::plan_job(seventy, declared("2xA100-80GB", "1TiB"), opts);
  ASSERT_TRUE(big.fits) << big.no_fit_reason();
  EXPECT_EQ(big.chosen.strategy.offload, dsl::Offload::kOptimizerAndParams);
  EXPECT_TRUE(check_executable(big.chosen.strategy).is_ok());
  // Without host RAM for the offloaded bytes it does not fit.
  const strategies::Plan small_host = strategies::plan_job(seventy, declared("2xA100-80GB", "64GiB"), opts);
  ASSERT_FALSE(small_host.fits);
  EXPECT_NE(small_host.no_fit_reason().find(" per GPU"), std::string::npos) << small_host.no_fit_reason();
}

}  // namespace
}  // namespace tailor::runner
