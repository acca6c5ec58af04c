#include "runner/variant_choice.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace tailor::runner {
namespace {

const std::string kNoDriver = "libcuda.so.1: cannot open shared object file: No such file or directory";
std::string loads() { return ""; }
std::string missing() { return kNoDriver; }
// A forced variant does not ask.
std::string unasked() {
  ADD_FAILURE() << "the driver was looked for";
  return "";
}

TEST(VariantChoiceTest, AutoRunsTheCudaBuildWhereTheDriverLoadsAndSaysWhyNotElsewhere) {
  for (const char* automatic : {static_cast<const char*>(nullptr), "", "auto"}) {
    auto with_driver = choose_variant(automatic, loads);
    ASSERT_TRUE(with_driver.is_ok());
    EXPECT_EQ(with_driver->variant, RunnerVariant::kCuda);
    EXPECT_EQ(with_driver->no_cuda, "");

    auto without = choose_variant(automatic, missing);
    ASSERT_TRUE(without.is_ok());
    EXPECT_EQ(without->variant, RunnerVariant::kCpu);
    EXPECT_NE(without->no_cuda.find("no NVIDIA driver (" + kNoDriver + ")"), std::string::npos) << without->no_cuda;
    EXPECT_NE(without->no_cuda.find("TAILOR_RUNNER_VARIANT=cuda"), std::string::npos) << without->no_cuda;
  }
}

TEST(VariantChoiceTest, AForcedBuildRunsWhateverTheDriver) {
  auto cuda = choose_variant("cuda", unasked);
  ASSERT_TRUE(cuda.is_ok());
  EXPECT_EQ(cuda->variant, RunnerVariant::kCuda);
  auto cpu = choose_variant("cpu", unasked);
  ASSERT_TRUE(cpu.is_ok());
  EXPECT_EQ(cpu->variant, RunnerVariant::kCpu);
  EXPECT_NE(cpu->no_cuda.find("TAILOR_RUNNER_VARIANT=cpu"), std::string::npos) << cpu->no_cuda;
  EXPECT_STREQ(variant_program(RunnerVariant::kCuda), "tailor-runner-cuda");
  EXPECT_STREQ(variant_program(RunnerVariant::kCpu), "tailor-runner-cpu");
}

TEST(VariantChoiceTest, AnotherValueIsRefusedByName) {
  auto bad = choose_variant("gpu", unasked);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "TAILOR_RUNNER_VARIANT: expected auto, cuda or cpu, got 'gpu'");
}

TEST(VariantChoiceTest, TheCpuBuildGivesTheLaunchersReasonElseItsOwn) {
  ::unsetenv(kNoCudaEnv);
  EXPECT_EQ(no_cuda_path_reason(), "this tailor-runner was built without its CUDA path (TAILOR_CUDA=OFF)");
  ::setenv(kNoCudaEnv, "this machine has no NVIDIA driver", 1);
  EXPECT_EQ(no_cuda_path_reason(), "this machine has no NVIDIA driver");
  ::unsetenv(kNoCudaEnv);
}

}  // namespace
}  // namespace tailor::runner
