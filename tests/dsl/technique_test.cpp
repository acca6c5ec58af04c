#include <gtest/gtest.h>

#include <set>
#include <string>

#include "dsl/job_spec.h"
#include "dsl/technique.h"

namespace tailor::dsl {
namespace {

TEST(TechniqueTest, EveryTechniqueHasOneNameThatReadsBack) {
  std::set<std::string> names;
  for (const TechniqueInfo& t : techniques()) {
    EXPECT_TRUE(names.insert(t.name).second) << t.name;
    EXPECT_EQ(technique_from_name(t.name), t.id) << t.name;
    EXPECT_STREQ(to_string(t.id), t.name);
  }
  EXPECT_EQ(names.size(), technique_names().size());
  EXPECT_EQ(technique_from_name("zero4"), std::nullopt);
}

TEST(TechniqueTest, EachPrecisionIsTheTechniqueOfTheSameName) {
  for (const auto& [p, name] : enum_names<Precision>()) {
    const auto t = technique_from_name(name);
    ASSERT_TRUE(t) << name;
    EXPECT_EQ(knob_of(*t), Knob::kPrecision);
    EXPECT_EQ(enum_from_name<Precision>(name), p);
  }
}

// What lets a new adapter or optimizer be a row of the name tables: the
// technique it uses is the one of its name, found by techniques_used().
TEST(TechniqueTest, EachAdapterAndOptimizerButTheDefaultsIsTheTechniqueOfTheSameName) {
  for (const auto& [a, name] : enum_names<Adapter>()) {
    KnobValues v;
    v.adapter = a;
    const auto used = techniques_used(v);
    if (a == Adapter::kNone) {
      EXPECT_TRUE(used.empty()) << name;
      continue;
    }
    ASSERT_TRUE(technique_from_name(name)) << name;
    EXPECT_EQ(knob_of(*technique_from_name(name)), Knob::kAdapter);
    EXPECT_TRUE(contains(used, *technique_from_name(name))) << name;
    EXPECT_TRUE(contains(used, Technique::kAdapters)) << name;
  }
  for (const auto& [o, name] : enum_names<Optimizer>()) {
    KnobValues v;
    v.optimizer = o;
    const auto used = techniques_used(v);
    if (o == Optimizer::kAdamw) {
      EXPECT_TRUE(used.empty()) << name;
      continue;
    }
    ASSERT_TRUE(technique_from_name(name)) << name;
    EXPECT_EQ(knob_of(*technique_from_name(name)), Knob::kOptimizer);
    EXPECT_EQ(used, std::vector<Technique>{*technique_from_name(name)}) << name;
  }
}

TEST(TechniqueTest, KnobValuesListTheirTechniquesOnce) {
  KnobValues v;
  v.precision = Precision::kBf16;
  v.checkpoint_every = 2;
  v.grad_accumulation = 4;
  v.adapter = Adapter::kQlora;
  v.optimizer = Optimizer::kAdamw8bit;
  v.zero_stage = 3;
  v.offload = Offload::kOptimizerAndParams;
  EXPECT_EQ(techniques_used(v),
            (std::vector<Technique>{Technique::kBf16, Technique::kGradientCheckpointing,
                                    Technique::kGradientAccumulation, Technique::kQlora, Technique::kAdapters,
                                    Technique::kAdamw8bit, Technique::kZero3, Technique::kOffloadOptimizer,
                                    Technique::kOffloadParams}));
  EXPECT_TRUE(techniques_used(KnobValues{}).empty());
  KnobValues plain;
  plain.adapter = Adapter::kNone;
  plain.optimizer = Optimizer::kAdamw;
  plain.offload = Offload::kNone;
  EXPECT_TRUE(techniques_used(plain).empty());
}

// A pinned quantisation is QLoRA's base, so it uses qlora (which allow and
// forbid then judge) even where the adapter is left to the planner.
TEST(TechniqueTest, AQuantisedBaseUsesQlora) {
  KnobValues v;
  v.quantization = Quantization::kNf4;
  EXPECT_EQ(techniques_used(v), (std::vector<Technique>{Technique::kQlora, Technique::kAdapters}));
  v.quantization = Quantization::kNone;
  EXPECT_TRUE(techniques_used(v).empty());
  for (const auto& [q, name] : enum_names<Quantization>())
    EXPECT_EQ(enum_from_name<Quantization>(name), q);
}

// A spec's pins reach the techniques through one conversion: what is
// unset stays unset, and a pinned base brings QLoRA with it.
TEST(TechniqueTest, ASpecsPinsAreItsKnobValues) {
  StrategySpec s;
  EXPECT_TRUE(techniques_used(pinned_knob_values(s)).empty());
  s.gradient_checkpointing = 2;
  s.quantization = Quantization::kNf4;
  s.zero_stage = 3;
  s.offload = Offload::kOptimizerAndParams;
  const KnobValues v = pinned_knob_values(s);
  EXPECT_EQ(v.checkpoint_every, 2);
  EXPECT_EQ(v.quantization, Quantization::kNf4);
  EXPECT_FALSE(v.precision.has_value());
  EXPECT_EQ(techniques_used(v),
            (std::vector<Technique>{Technique::kGradientCheckpointing, Technique::kQlora, Technique::kAdapters,
                                    Technique::kZero3, Technique::kOffloadOptimizer, Technique::kOffloadParams}));
}

TEST(TechniqueTest, KnobPathsAreSpecKeys) {
  EXPECT_STREQ(knob_path(knob_of(Technique::kZero2)), "strategy.zero_stage");
  EXPECT_STREQ(knob_path(knob_of(Technique::kGradientAccumulation)), "training.micro_batch_size");
  EXPECT_STREQ(knob_path(knob_of(Technique::kOffloadParams)), "strategy.offload");
}

// The knob values a user pins to get technique t (and what it includes).
KnobValues using_only(Technique t) {
  KnobValues v;
  switch (t) {
    case Technique::kFp32:
    case Technique::kBf16:
    case Technique::kFp16:
    case Technique::kPureBf16: v.precision = enum_from_name<Precision>(to_string(t)); break;
    case Technique::kGradientCheckpointing: v.checkpoint_every = 1; break;
    case Technique::kGradientAccumulation: v.grad_accumulation = 4; break;
    case Technique::kLora:
    case Technique::kAdapters: v.adapter = Adapter::kLora; break;
    case Technique::kQlora: v.adapter = Adapter::kQlora; break;
    case Technique::kAdamw8bit:
    case Technique::kSgd:
    case Technique::kLion: v.optimizer = enum_from_name<Optimizer>(to_string(t)); break;
    case Technique::kZero1: v.zero_stage = 1; break;
    case Technique::kZero2: v.zero_stage = 2; break;
    case Technique::kZero3: v.zero_stage = 3; break;
    case Technique::kOffloadOptimizer: v.offload = Offload::kOptimizer; break;
    case Technique::kOffloadParams: v.offload = Offload::kOptimizerAndParams; break;
  }
  return v;
}

// `allow: [lora]` once forbade LoRA, because a LoRA plan also uses
// "adapters": an allow list admits each technique it names with what that
// technique includes.
TEST(TechniqueTest, AnAllowListNamingATechniqueAdmitsEverythingItUses) {
  for (const TechniqueInfo& t : techniques()) {
    const std::vector<Technique> used = techniques_used(using_only(t.id));
    ASSERT_TRUE(contains(used, t.id) || t.id == Technique::kAdapters) << t.name;
    for (Technique u : used) {
      EXPECT_TRUE(allow_list_admits({t.id}, u)) << "allow: [" << t.name << "] refuses " << to_string(u);
    }
  }
  EXPECT_TRUE(allow_list_admits({Technique::kAdapters}, Technique::kLora));
  EXPECT_TRUE(allow_list_admits({Technique::kAdapters}, Technique::kQlora));
  EXPECT_TRUE(allow_list_admits({}, Technique::kZero3));
}

TEST(TechniqueTest, AnAllowListAdmitsNothingItDoesNotInclude) {
  EXPECT_FALSE(allow_list_admits({Technique::kLora}, Technique::kQlora));
  EXPECT_FALSE(allow_list_admits({Technique::kQlora}, Technique::kLora));
  EXPECT_FALSE(allow_list_admits({Technique::kOffloadOptimizer}, Technique::kOffloadParams));
  EXPECT_FALSE(allow_list_admits({Technique::kZero3}, Technique::kZero2));
  EXPECT_FALSE(allow_list_admits({Technique::kBf16}, Technique::kPureBf16));
}

}  // namespace
}  // namespace tailor::dsl
