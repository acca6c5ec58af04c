#include "runner/device_choice.h"

#include <gtest/gtest.h>

namespace tailor::runner {
namespace {

TEST(DeviceChoiceTest, AutoFollowsThePlanAndWhatLibTorchSees) {
  auto gpu_plan_with_cuda = choose_device("auto", /*plan_for_gpus=*/true, 2);
  ASSERT_TRUE(gpu_plan_with_cuda.is_ok());
  EXPECT_TRUE(gpu_plan_with_cuda->cuda);
  EXPECT_EQ(gpu_plan_with_cuda->name(), "cuda:0");

  auto gpu_plan_cpu_only = choose_device("auto", true, 0);
  ASSERT_TRUE(gpu_plan_cpu_only.is_ok());
  EXPECT_FALSE(gpu_plan_cpu_only->cuda);
  EXPECT_NE(gpu_plan_cpu_only->reason.find("no CUDA"), std::string::npos);

  // A CPU plan stays on the CPU even where a GPU is there.
  auto cpu_plan = choose_device("", false, 1);
  ASSERT_TRUE(cpu_plan.is_ok());
  EXPECT_EQ(cpu_plan->name(), "cpu");
}

TEST(DeviceChoiceTest, ExplicitDevices) {
  EXPECT_EQ(choose_device("cpu", true, 4)->name(), "cpu");
  EXPECT_EQ(choose_device("cuda", false, 1)->name(), "cuda:0");
  EXPECT_EQ(choose_device("cuda:3", true, 4)->name(), "cuda:3");
}

TEST(DeviceChoiceTest, CudaThatIsNotThereIsBadInputNamingWhy) {
  const auto none = choose_device("cuda", true, 0);
  ASSERT_FALSE(none.is_ok());
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("no CUDA"), std::string::npos);

  // A build without the CUDA path says so, whatever the driver shows.
  const auto unbuilt = choose_device("cuda", true, 1, /*cuda_built=*/false);
  ASSERT_FALSE(unbuilt.is_ok());
  EXPECT_NE(unbuilt.status().message().find("built without its CUDA path"), std::string::npos);
  EXPECT_FALSE(choose_device("auto", true, 1, /*cuda_built=*/false)->cuda);

  const auto past = choose_device("cuda:2", true, 2);
  ASSERT_FALSE(past.is_ok());
  EXPECT_NE(past.status().message().find("sees 2 CUDA devices"), std::string::npos);

  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda0", "cuda:1x"}) {
    const auto r = choose_device(bad, true, 8);
    EXPECT_FALSE(r.is_ok()) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace tailor::runner
