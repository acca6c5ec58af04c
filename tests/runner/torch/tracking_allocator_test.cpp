// Tests of the tracking CPU allocator against real LibTorch allocations. The
// allocator is process-wide, so every test measures relative to the bytes in
// use when it starts and restores an unlimited budget when it ends.
#include "runner/torch/tracking_allocator.h"

#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <barrier>
#include <cstdint>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "core/units.h"
#include "runner/torch/host_tensor.h"

namespace tailor::runner {
namespace {

constexpr std::int64_t kKiB = 1024;
constexpr std::int64_t kMiB = 1024 * 1024;

// A float tensor of exactly `bytes` bytes (a multiple of 4).
torch::Tensor float_tensor_of(std::int64_t bytes) { return torch::empty({bytes / 4}, torch::kFloat32); }

class TrackingAllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    alloc_.set_budget(0);
    alloc_.clear_last_failure();
  }
  void TearDown() override { alloc_.set_budget(0); }

  TrackingAllocator& alloc_ = TrackingAllocator::install();
};

TEST_F(TrackingAllocatorTest, InstallIsIdempotentAndBecomesTheCpuAllocator) {
  TrackingAllocator& again = TrackingAllocator::install();
  EXPECT_EQ(&again, &alloc_);
  EXPECT_EQ(c10::GetCPUAllocator(), &alloc_);
  EXPECT_NE(alloc_.raw_deleter(), nullptr);
  EXPECT_EQ(alloc_.budget(), 0);
}

TEST_F(TrackingAllocatorTest, CountsTensorBytesAndReturnsAfterRelease) {
  const std::int64_t start = alloc_.current_bytes();
  const std::int64_t count = alloc_.allocation_count();
  {
    torch::Tensor a = float_tensor_of(4 * kMiB);
    torch::Tensor b = torch::empty({1000}, torch::kFloat64);  // 8000 B
    EXPECT_EQ(alloc_.current_bytes() - start, 4 * kMiB + 8000);
    EXPECT_GE(alloc_.peak_bytes(), start + 4 * kMiB + 8000);
    EXPECT_EQ(alloc_.allocation_count() - count, 2);
    // Kernels rely on LibTorch's 64-byte alignment; the header keeps it.
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.data_ptr()) % 64, 0u);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data_ptr()) % 64, 0u);
    a.fill_(1.0f);  // the whole block is writable
    EXPECT_EQ(a.sum().item<float>(), static_cast<float>(kMiB));
  }
  EXPECT_EQ(alloc_.current_bytes(), start);
}

TEST_F(TrackingAllocatorTest, RawAllocateKeepsDataEqualToContext) {
  // oneDNN allocates through raw_allocate(), which asserts data == context.
  const std::int64_t start = alloc_.current_bytes();
  void* p = alloc_.raw_allocate(1000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(alloc_.current_bytes() - start, 1000);
  alloc_.raw_deallocate(p);
  EXPECT_EQ(alloc_.current_bytes(), start);
}

TEST_F(TrackingAllocatorTest, ForeignBlockFreedThroughItGoesBackUncounted) {
  // What oneDNN does with a buffer it took before install(): it frees it
  // through whichever CPU allocator is installed now.
  const std::int64_t start = alloc_.current_bytes();
  void* p = c10::GetDefaultCPUAllocator()->raw_allocate(4096);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(alloc_.current_bytes(), start);
  alloc_.raw_deallocate(p);
  EXPECT_EQ(alloc_.current_bytes(), start);
}

TEST_F(TrackingAllocatorTest, ZeroByteAllocationsWork) {
  const std::int64_t start = alloc_.current_bytes();
  const std::int64_t count = alloc_.allocation_count();
  c10::DataPtr empty = alloc_.allocate(0);
  EXPECT_EQ(empty.get(), nullptr);
  torch::Tensor t = torch::empty({0}, torch::kFloat32);
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(alloc_.current_bytes(), start);
  EXPECT_EQ(alloc_.allocation_count() - count, 2);
  // Growing an empty tensor goes through the same allocator.
  t.resize_({256});
  EXPECT_EQ(alloc_.current_bytes() - start, 1024);
  t = torch::Tensor();
  EXPECT_EQ(alloc_.current_bytes(), start);
}

// Offloaded optimizer states: host memory, apart from the device's budget.
TEST_F(TrackingAllocatorTest, TheHostLedgerIsCountedApartAndOutsideTheBudget) {
  const std::int64_t device = alloc_.current_bytes(), host = alloc_.host_bytes();
  alloc_.set_budget(device + kMiB);
  {
    torch::Tensor h;
    {
      HostLedgerScope scope;
      h = float_tensor_of(4 * kMiB);  // over the budget, but on the host
    }
    EXPECT_EQ(alloc_.host_bytes() - host, 4 * kMiB);
    EXPECT_GE(alloc_.host_peak_bytes(), host + 4 * kMiB);
    EXPECT_EQ(alloc_.current_bytes(), device);
    // Outside the scope the budget holds again.
    EXPECT_THROW(float_tensor_of(2 * kMiB), c10::OutOfMemoryError);
    torch::Tensor d = float_tensor_of(kMiB / 2);
    EXPECT_EQ(alloc_.current_bytes() - device, kMiB / 2);
  }
  // Each block returns to the ledger it came from.
  EXPECT_EQ(alloc_.host_bytes(), host);
  EXPECT_EQ(alloc_.current_bytes(), device);
}

// host_copy: the offloaded buffers' copies land in the host ledger; a GPU
// tensor's is pinned memory, which has an allocator of its own.
TEST_F(TrackingAllocatorTest, HostCopiesOfCpuTensorsCountInTheHostLedger) {
  const torch::Tensor values = torch::arange(1024, torch::kFloat32);
  const std::int64_t device = alloc_.current_bytes(), host = alloc_.host_bytes();
  {
    torch::Tensor copy;
    {
      HostLedgerScope scope;
      copy = host_copy(values);
    }
    EXPECT_TRUE(torch::equal(copy, values));
    EXPECT_EQ(alloc_.host_bytes() - host, 4 * 1024);
    EXPECT_EQ(alloc_.current_bytes(), device);
  }
  EXPECT_EQ(alloc_.host_bytes(), host);
}

TEST_F(TrackingAllocatorTest, PinnedHostCopiesOfGpuTensorsCountInTheHostLedger) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  const torch::Tensor values = torch::arange(1 << 20, torch::TensorOptions().dtype(torch::kFloat32).device(torch::kCUDA, 0));
  const std::int64_t device = alloc_.current_bytes(), host = alloc_.host_bytes();
  const std::int64_t peak = alloc_.host_peak_bytes();
  {
    torch::Tensor copy = host_copy(values);  // no scope needed: pinned is host memory
    EXPECT_TRUE(copy.is_pinned());
    EXPECT_TRUE(torch::equal(copy, values.cpu()));
    EXPECT_EQ(alloc_.host_bytes() - host, 4 << 20);
    EXPECT_GE(alloc_.host_peak_bytes(), std::max(peak, host + (4 << 20)));
    EXPECT_EQ(alloc_.current_bytes(), device);
  }
  EXPECT_EQ(alloc_.host_bytes(), host);
}

TEST_F(TrackingAllocatorTest, PeakStaysAfterReleaseUntilReset) {
  const std::int64_t start = alloc_.current_bytes();
  alloc_.reset_peak();
  EXPECT_EQ(alloc_.peak_bytes(), start);
  { torch::Tensor t = float_tensor_of(8 * kMiB); }
  EXPECT_EQ(alloc_.current_bytes(), start);
  EXPECT_EQ(alloc_.peak_bytes(), start + 8 * kMiB);
  alloc_.reset_peak();
  EXPECT_EQ(alloc_.peak_bytes(), start);
}

TEST_F(TrackingAllocatorTest, PeakScopeMeasuresRelativeToItsStart) {
  torch::Tensor before = float_tensor_of(3 * kMiB);  // in use before the scope: not its increase
  PeakScope outer(alloc_);
  torch::Tensor kept = float_tensor_of(1 * kMiB);
  { torch::Tensor temporary = float_tensor_of(2 * kMiB); }
  EXPECT_EQ(outer.peak_increase(), 3 * kMiB);
  EXPECT_EQ(outer.current_increase(), 1 * kMiB);
  {
    PeakScope inner(alloc_);
    { torch::Tensor temporary = float_tensor_of(512 * kKiB); }
    EXPECT_EQ(inner.peak_increase(), 512 * kKiB);
    EXPECT_EQ(inner.current_increase(), 0);
  }
  // The inner scope reset the peak; its end restores the outer one's.
  EXPECT_EQ(outer.peak_increase(), 3 * kMiB);
  kept = torch::Tensor();
  EXPECT_EQ(outer.current_increase(), 0);
}

TEST_F(TrackingAllocatorTest, BudgetRefusesTooLargeEmptyAndLeavesCountersUnchanged) {
  const std::int64_t start = alloc_.current_bytes();
  alloc_.set_budget(start + 8 * kMiB);
  EXPECT_EQ(alloc_.budget(), start + 8 * kMiB);
  torch::Tensor fits = float_tensor_of(4 * kMiB);
  const std::int64_t in_use = alloc_.current_bytes();
  const std::int64_t count = alloc_.allocation_count();
  alloc_.reset_peak();

  std::string message;
  try {
    torch::Tensor too_large = float_tensor_of(12 * kMiB);
    ADD_FAILURE() << "a 12 MiB tensor fit in 4 MiB of headroom";
  } catch (const c10::OutOfMemoryError& e) {
    message = e.what_without_backtrace();
  }
  EXPECT_EQ(message.rfind("tailor: out of memory (budget): tried to allocate 12.0 MiB with ", 0), 0u) << message;
  EXPECT_NE(message.find(" of a " + Bytes(start + 8 * kMiB).to_string() + " budget in use"), std::string::npos)
      << message;
  EXPECT_EQ(alloc_.current_bytes(), in_use);
  EXPECT_EQ(alloc_.peak_bytes(), in_use);
  EXPECT_EQ(alloc_.allocation_count(), count);
  const auto failure = alloc_.last_failure();
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->requested, 12 * kMiB);
  EXPECT_EQ(failure->in_use, in_use);
  EXPECT_EQ(failure->budget, start + 8 * kMiB);

  // What still fits is still served; the same type CUDA's allocator throws
  // is also a c10::Error, so generic handlers see it too.
  EXPECT_NO_THROW(float_tensor_of(4 * kMiB));
  EXPECT_THROW(float_tensor_of(4 * kMiB + 4), c10::Error);
  alloc_.set_budget(0);
  EXPECT_NO_THROW(float_tensor_of(12 * kMiB));
}

TEST_F(TrackingAllocatorTest, ImpossibleRequestIsRefusedAsOutOfMemory) {
  const std::int64_t start = alloc_.current_bytes();
  EXPECT_THROW(alloc_.allocate(std::numeric_limits<size_t>::max()), c10::OutOfMemoryError);
  EXPECT_EQ(alloc_.current_bytes(), start);
  EXPECT_TRUE(alloc_.last_failure().has_value());
}

// Allocates 256 KiB, 512 KiB, 768 KiB, ... and keeps them all until the
// budget (`headroom` above the bytes in use now) refuses one; returns the
// index of the refused allocation, or -1.
int first_refused_growing_allocation(TrackingAllocator& alloc, std::int64_t headroom) {
  alloc.set_budget(alloc.current_bytes() + headroom);
  std::vector<torch::Tensor> kept;
  int refused = -1;
  for (int i = 0; i < 100 && refused < 0; ++i) {
    try {
      kept.push_back(torch::empty({(i + 1) * 256 * kKiB}, torch::kUInt8));
    } catch (const c10::OutOfMemoryError&) {
      refused = i;
    }
  }
  alloc.set_budget(0);
  return refused;
}

// Trains an nn::Linear on growing batches until the budget refuses an
// allocation; returns the step that failed, or -1.
int first_refused_training_step(TrackingAllocator& alloc, std::int64_t headroom) {
  torch::manual_seed(0);
  torch::nn::Linear linear(128, 256);
  alloc.set_budget(alloc.current_bytes() + headroom);
  int refused = -1;
  for (int step = 0; step < 100 && refused < 0; ++step) {
    try {
      torch::Tensor x = torch::randn({(step + 1) * 32, 128});
      torch::Tensor loss = linear(x).relu().square().mean();
      loss.backward();
    } catch (const c10::OutOfMemoryError&) {
      refused = step;
    }
  }
  alloc.set_budget(0);
  return refused;
}

TEST_F(TrackingAllocatorTest, BudgetFailureHappensAtTheSamePointEveryRun) {
  // 256 KiB * (1 + ... + 8) = 9 MiB fits in 10 MiB; the 9th (index 8) does not.
  EXPECT_EQ(first_refused_growing_allocation(alloc_, 10 * kMiB), 8);
  EXPECT_EQ(first_refused_growing_allocation(alloc_, 10 * kMiB), 8);
  const auto failure = alloc_.last_failure();
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->requested, 9 * 256 * kKiB);

  const int step = first_refused_training_step(alloc_, 4 * kMiB);
  EXPECT_GT(step, 0);
  EXPECT_EQ(first_refused_training_step(alloc_, 4 * kMiB), step);
}

TEST_F(TrackingAllocatorTest, CountsMatmulAndLinearBackward) {
  const std::int64_t start = alloc_.current_bytes();
  {
    torch::Tensor a = torch::randn({256, 512});
    torch::Tensor b = torch::randn({512, 128});
    PeakScope scope(alloc_);
    torch::Tensor c = torch::matmul(a, b);
    EXPECT_GE(scope.current_increase(), 256 * 128 * 4);
    // bf16 matmuls go through oneDNN on this CPU.
    torch::Tensor a16 = a.to(torch::kBFloat16);
    torch::Tensor b16 = b.to(torch::kBFloat16);
    torch::Tensor c16 = torch::matmul(a16, b16);
    EXPECT_GE(scope.current_increase(), 256 * 128 * 4 + (256 * 512 + 512 * 128 + 256 * 128) * 2);
    EXPECT_TRUE(torch::allclose(c, c16.to(torch::kFloat32), /*rtol=*/0.05, /*atol=*/0.5));
  }
  {
    const std::int64_t count = alloc_.allocation_count();
    torch::nn::Linear linear(256, 128);
    const std::int64_t param_bytes = (256 * 128 + 128) * 4;
    EXPECT_EQ(alloc_.current_bytes() - start, param_bytes);
    torch::Tensor x = torch::randn({64, 256});
    PeakScope scope(alloc_);
    torch::Tensor loss = linear(x).relu().square().mean();
    loss.backward();
    ASSERT_TRUE(linear->weight.grad().defined());
    ASSERT_TRUE(linear->bias.grad().defined());
    // Gradients stay; the (64, 128) activations lived at least until backward.
    EXPECT_GE(scope.current_increase(), param_bytes);
    EXPECT_GE(scope.peak_increase(), param_bytes + 64 * 128 * 4);
    EXPECT_GT(alloc_.allocation_count() - count, 5);
  }
  EXPECT_EQ(alloc_.current_bytes(), start);
}

TEST_F(TrackingAllocatorTest, ConcurrentAllocationKeepsCountsExact) {
  constexpr int kThreads = 4;
  constexpr int kIters = 2000;
  const std::int64_t start = alloc_.current_bytes();
  const std::int64_t count = alloc_.allocation_count();
  std::vector<std::vector<torch::Tensor>> kept(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&kept, t] {
      for (int i = 0; i < kIters; ++i) {
        torch::Tensor temporary = torch::empty({(i % 13 + 1) * 100}, torch::kUInt8);
        if (i % 4 == 0) kept[t].push_back(torch::empty({(i % 7 + 1) * 1000 + t}, torch::kUInt8));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  std::int64_t kept_bytes = 0;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kIters; i += 4) kept_bytes += (i % 7 + 1) * 1000 + t;
  }
  EXPECT_EQ(alloc_.current_bytes() - start, kept_bytes);
  EXPECT_EQ(alloc_.allocation_count() - count, kThreads * (kIters + kIters / 4));

  // Frees from several threads at once are exact too.
  threads.clear();
  for (int t = 0; t < kThreads; ++t) threads.emplace_back([&kept, t] { kept[t].clear(); });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(alloc_.current_bytes(), start);
}

TEST_F(TrackingAllocatorTest, ConcurrentAllocationNeverExceedsBudget) {
  // Four threads take 64 KiB blocks until refused. With no frees in between,
  // exactly as many blocks as fit must succeed: no two threads may both pass
  // the check and overshoot, and no refusal may happen while one still fits.
  constexpr int kThreads = 4;
  constexpr std::int64_t kBlock = 64 * kKiB;
  constexpr std::int64_t kBlocksThatFit = 100;
  const std::int64_t start = alloc_.current_bytes();
  alloc_.set_budget(start + kBlocksThatFit * kBlock + kBlock / 2);
  alloc_.reset_peak();
  std::vector<std::vector<torch::Tensor>> kept(kThreads);
  std::barrier go(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&kept, &go, t] {
      go.arrive_and_wait();
      while (true) {
        try {
          kept[t].push_back(torch::empty({kBlock}, torch::kUInt8));
        } catch (const c10::OutOfMemoryError&) {
          return;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  std::int64_t blocks = 0;
  for (const auto& k : kept) blocks += static_cast<std::int64_t>(k.size());
  EXPECT_EQ(blocks, kBlocksThatFit);
  EXPECT_EQ(alloc_.current_bytes(), start + kBlocksThatFit * kBlock);
  EXPECT_EQ(alloc_.peak_bytes(), start + kBlocksThatFit * kBlock);
  alloc_.set_budget(0);
  kept.clear();
  EXPECT_EQ(alloc_.current_bytes(), start);
}

}  // namespace
}  // namespace tailor::runner
