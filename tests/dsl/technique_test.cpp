#include <gtest/gtest.h>

#include <set>
#include <string>

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

TEST(TechniqueTest, KnobPathsAreSpecKeys) {
  EXPECT_STREQ(knob_path(knob_of(Technique::kZero2)), "strategy.zero_stage");
  EXPECT_STREQ(knob_path(knob_of(Technique::kGradientAccumulation)), "training.micro_batch_size");
  EXPECT_STREQ(knob_path(knob_of(Technique::kOffloadParams)), "strategy.offload");
}

}  // namespace
}  // namespace tailor::dsl
