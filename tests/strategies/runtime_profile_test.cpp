// planner.transformers onto the hf profile's quirks (runtime_profile.h).
#include "strategies/runtime_profile.h"

#include <gtest/gtest.h>

namespace tailor::strategies {
namespace {

MemoryInput hf_input(const std::string& transformers, dsl::Runtime runtime = dsl::Runtime::kHf) {
  dsl::PlannerSpec planner;
  planner.runtime = runtime;
  planner.transformers = transformers;
  MemoryInput in;
  apply(runtime_profile(runtime), in);
  apply_versions(planner, in);
  return in;
}

// transformers 4.x checkpoints reentrantly by default (checkpoints held
// under FSDP1 with adapters); 4.46-4.48 also copy the shifted logits; 5.x,
// or no version, is the profile as it is.
TEST(RuntimeProfileTest, TransformersFourKeepsWhatFiveDoesNot) {
  const RuntimeQuirks five = hf_input("").quirks;
  EXPECT_FALSE(five.held_checkpoints);
  EXPECT_FALSE(five.shifted_logits_copy);
  for (const char* v : {"5.0", "5.23.1"}) {
    EXPECT_FALSE(hf_input(v).quirks.held_checkpoints) << v;
    EXPECT_FALSE(hf_input(v).quirks.shifted_logits_copy) << v;
  }
  for (const char* v : {"4.46", "4.47.1", "4.48"}) {
    EXPECT_TRUE(hf_input(v).quirks.held_checkpoints) << v;
    EXPECT_TRUE(hf_input(v).quirks.shifted_logits_copy) << v;
  }
  for (const char* v : {"4.40", "4.45.2", "4.49", "4.57"}) {
    EXPECT_TRUE(hf_input(v).quirks.held_checkpoints) << v;
    EXPECT_FALSE(hf_input(v).quirks.shifted_logits_copy) << v;
  }
  // Everything else the profile decides stays.
  const RuntimeQuirks four = hf_input("4.47").quirks;
  EXPECT_EQ(four.lean_cross_entropy, five.lean_cross_entropy);
  EXPECT_EQ(four.quantized_linear_keeps_input, five.quantized_linear_keeps_input);
  EXPECT_EQ(four.root_unit_gathered, five.root_unit_gathered);
}

// The version is the hf stack's: under another runtime it changes nothing.
TEST(RuntimeProfileTest, AVersionUnderAnotherRuntimeChangesNothing) {
  for (dsl::Runtime r : {dsl::Runtime::kTailor, dsl::Runtime::kLitgpt, dsl::Runtime::kTorchtune}) {
    const RuntimeQuirks q = hf_input("4.47", r).quirks;
    EXPECT_FALSE(q.held_checkpoints);
    EXPECT_FALSE(q.shifted_logits_copy);
  }
}

}  // namespace
}  // namespace tailor::strategies
