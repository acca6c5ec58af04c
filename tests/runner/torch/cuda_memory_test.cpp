// The CUDA memory meter. On a CPU-only LibTorch it must refuse to open with
// the reason; where LibTorch has CUDA, it must count, track peaks and enforce
// the budget like the tracking allocator does on the CPU.
#include "runner/torch/cuda_memory.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "runner/torch/tracking_allocator.h"

namespace tailor::runner {
namespace {

TEST(CudaMemoryTest, ReadsTheRequestedBytesOfOutOfMemoryMessages) {
  // c10's CUDA caching allocator (1.13) and the tracking allocator.
  EXPECT_EQ(requested_bytes_in_message("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79.15 GiB total "
                                       "capacity; 77.80 GiB already allocated)"),
            20 * 1024 * 1024);
  EXPECT_EQ(requested_bytes_in_message("CUDA out of memory. Tried to allocate 1.50 GiB (GPU 0)"),
            std::int64_t{3} << 29);
  EXPECT_EQ(requested_bytes_in_message("Tried to allocate 512 bytes"), 512);
  EXPECT_FALSE(requested_bytes_in_message("device-side assert triggered").has_value());

  TrackingAllocator& a = TrackingAllocator::install();
  a.set_budget(a.current_bytes() + 1024);
  try {
    (void)torch::empty({1 << 20}, torch::kUInt8);
    FAIL() << "the budget was not enforced";
  } catch (const c10::OutOfMemoryError& e) {
    EXPECT_EQ(requested_bytes_in_message(e.what_without_backtrace()), std::int64_t{1} << 20);
  }
  a.set_budget(0);
}

TEST(CudaMemoryTest, OpeningAMissingDeviceIsAnErrorNamingIt) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  auto meter = CudaMemoryMeter::open(0, 0);
  ASSERT_FALSE(meter.is_ok());
  EXPECT_NE(meter.status().message().find("no CUDA device 0"), std::string::npos) << meter.status().message();
}

TEST(CudaMemoryTest, CountsPeaksAndBudgetsOnAGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA device";
  auto meter = CudaMemoryMeter::open(0, 0);
  ASSERT_TRUE(meter.is_ok()) << meter.status().message();
  CudaMemoryMeter& m = **meter;
  EXPECT_EQ(m.device_name(), "cuda:0");
  EXPECT_GT(m.total_bytes(), 0);
  const auto on_gpu = torch::TensorOptions().device(torch::kCUDA, 0).dtype(torch::kUInt8);
  const std::int64_t before = m.current_bytes();
  {
    PeakScope scope(m);
    torch::Tensor t = torch::empty({64 << 20}, on_gpu);
    EXPECT_EQ(m.current_bytes() - before, 64 << 20);
    { torch::Tensor u = torch::empty({32 << 20}, on_gpu); }
    EXPECT_EQ(scope.peak_increase(), 96 << 20);
  }
  EXPECT_EQ(m.current_bytes(), before);
  EXPECT_GE(m.peak_bytes(), before + (96 << 20));

  // A budget below what one more tensor needs fails that allocation.
  m.set_budget(before + (16 << 20));
  try {
    (void)torch::empty({std::int64_t{1} << 30}, on_gpu);
    FAIL() << "the budget was not enforced";
  } catch (const c10::OutOfMemoryError& e) {
    EXPECT_EQ(m.last_failure(e.what_without_backtrace())->requested, std::int64_t{1} << 30);
  }
  m.set_budget(0);
}

}  // namespace
}  // namespace tailor::runner
