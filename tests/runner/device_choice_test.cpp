#include "runner/device_choice.h"

#include <gtest/gtest.h>

namespace tailor::runner {
namespace {

constexpr dsl::TrainDevice kAuto = dsl::TrainDevice::kAuto;
constexpr dsl::TrainDevice kCpu = dsl::TrainDevice::kCpu;

TEST(DeviceChoiceTest, AutoFollowsThePlanAndWhatLibTorchSees) {
  auto gpu_plan_with_cuda = choose_device("auto", kAuto, /*plan_for_gpus=*/true, 2);
  ASSERT_TRUE(gpu_plan_with_cuda.is_ok());
  EXPECT_TRUE(gpu_plan_with_cuda->cuda);
  EXPECT_EQ(gpu_plan_with_cuda->name(), "cuda:0");

  // A CPU plan stays on the CPU even where a GPU is there.
  auto cpu_plan = choose_device("", kAuto, false, 1);
  ASSERT_TRUE(cpu_plan.is_ok());
  EXPECT_EQ(cpu_plan->name(), "cpu");
}

// A GPU plan on a machine without CUDA trained on the CPU before, with only
// an event saying so: now it is bad input naming why and the way out.
TEST(DeviceChoiceTest, AutoGpuPlanWithoutCudaIsBadInputSayingWhy) {
  const auto no_driver = choose_device("auto", kAuto, true, 0);
  ASSERT_FALSE(no_driver.is_ok());
  EXPECT_EQ(no_driver.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = no_driver.status().message();
  EXPECT_NE(m.find("the plan is for GPUs but LibTorch sees no CUDA device: no NVIDIA driver"), std::string::npos) << m;
  EXPECT_NE(m.find("set resources.device: cpu in the spec (or --device cpu)"), std::string::npos) << m;

  const auto hidden = choose_device("", kAuto, true, 0, /*cuda_built=*/true, /*cuda_visible=*/"");
  ASSERT_FALSE(hidden.is_ok());
  EXPECT_NE(hidden.status().message().find("CUDA_VISIBLE_DEVICES='' hides them"), std::string::npos)
      << hidden.status().message();

  // A build without the CUDA path says so, whatever the driver shows.
  const auto unbuilt = choose_device("auto", kAuto, true, 1, /*cuda_built=*/false);
  ASSERT_FALSE(unbuilt.is_ok());
  EXPECT_EQ(unbuilt.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unbuilt.status().message().find("built without its CUDA path"), std::string::npos)
      << unbuilt.status().message();
}

TEST(DeviceChoiceTest, SpecDeviceCpuTrainsAGpuPlanOnTheCpu) {
  for (int cuda_devices : {0, 2}) {
    const auto d = choose_device("auto", kCpu, true, cuda_devices);
    ASSERT_TRUE(d.is_ok()) << d.status().to_string();
    EXPECT_EQ(d->name(), "cpu");
    EXPECT_NE(d->reason.find("resources.device: cpu"), std::string::npos) << d->reason;
  }
  EXPECT_EQ(choose_device("auto", kCpu, true, 0, /*cuda_built=*/false)->name(), "cpu");
  // The command line's explicit device wins over the spec's.
  EXPECT_EQ(choose_device("cuda", kCpu, true, 1)->name(), "cuda:0");
}

TEST(DeviceChoiceTest, ExplicitDevices) {
  EXPECT_EQ(choose_device("cpu", kAuto, true, 4)->name(), "cpu");
  EXPECT_EQ(choose_device("cpu", kAuto, true, 0, /*cuda_built=*/false)->name(), "cpu");
  EXPECT_EQ(choose_device("cuda", kAuto, false, 1)->name(), "cuda:0");
  EXPECT_EQ(choose_device("cuda:3", kAuto, true, 4)->name(), "cuda:3");
}

TEST(DeviceChoiceTest, CudaThatIsNotThereIsBadInputNamingWhy) {
  const auto none = choose_device("cuda", kAuto, true, 0);
  ASSERT_FALSE(none.is_ok());
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("no CUDA"), std::string::npos);

  // A build without the CUDA path says so, whatever the driver shows.
  const auto unbuilt = choose_device("cuda", kAuto, true, 1, /*cuda_built=*/false);
  ASSERT_FALSE(unbuilt.is_ok());
  EXPECT_NE(unbuilt.status().message().find("built without its CUDA path"), std::string::npos);

  const auto past = choose_device("cuda:2", kAuto, true, 2);
  ASSERT_FALSE(past.is_ok());
  EXPECT_NE(past.status().message().find("sees 2 CUDA devices"), std::string::npos);

  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda0", "cuda:1x"}) {
    const auto r = choose_device(bad, kAuto, true, 8);
    EXPECT_FALSE(r.is_ok()) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace tailor::runner
