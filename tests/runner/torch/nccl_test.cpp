// NCCL is compiled and linked in every build with the CUDA path
// (TAILOR_CUDA), for rank processes on GPUs: without a GPU it refuses with
// the reason; with one, a single rank's collectives run. (NCCL takes one
// rank per GPU, so more ranks need more GPUs than the lent machines have.)
#include <gtest/gtest.h>

#include <torch/torch.h>

#if TAILOR_CUDA
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "runner/dist/communicator.h"
#include "runner/dist/launcher.h"
#include "runner/torch/nccl_group.h"
#include "tests/testing/temp_dir.h"

namespace tailor::runner {
namespace {

// A world of one: rank 0 alone, listening on a free loopback port.
std::unique_ptr<dist::Communicator> lone_rank() {
  dist::RankEnv env;
  env.present = true;
  env.master_addr = "127.0.0.1";
  env.master_port = dist::free_loopback_port();
  auto comm = dist::Communicator::connect(env);
  EXPECT_TRUE(comm.is_ok()) << comm.status().message();
  return comm.is_ok() ? std::move(comm).value() : nullptr;
}

TEST(NcclGroupTest, SegmentsAreTheRingsParts) {
  auto comm = lone_rank();
  ASSERT_NE(comm, nullptr);
  const Segments s = segments_of(*comm, 1000, 64);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0], std::make_pair(std::int64_t{0}, std::int64_t{1000}));
}

TEST(NcclGroupTest, RefusesWithoutAGpuSayingWhy) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is present";
  auto comm = lone_rank();
  ASSERT_NE(comm, nullptr);
  auto group = NcclGroup::connect(*comm, "127.0.0.1", 0, std::chrono::seconds(30));
  ASSERT_FALSE(group.is_ok());
  EXPECT_EQ(group.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(group.status().message().find("CUDA"), std::string::npos) << group.status().message();
}

TEST(NcclGroupTest, OneRanksCollectivesRunOnAGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  auto comm = lone_rank();
  ASSERT_NE(comm, nullptr);
  auto group = NcclGroup::connect(*comm, "127.0.0.1", 0, std::chrono::seconds(60));
  ASSERT_TRUE(group.is_ok()) << group.status().message();
  NcclGroup& g = **group;
  EXPECT_EQ(g.world(), 1);
  const auto gpu = torch::TensorOptions().device(torch::kCUDA, 0);
  const torch::Tensor values = torch::arange(1000, gpu.dtype(torch::kFloat32));
  // A world of one sums, gathers and scatters to what it holds.
  torch::Tensor t = values.clone();
  ASSERT_TRUE(g.all_reduce_sum(t).is_ok());
  ASSERT_TRUE(g.reduce_sum(t, 0).is_ok());
  ASSERT_TRUE(g.broadcast(t, 0).is_ok());
  ASSERT_TRUE(g.reduce_scatter_sum(t, segments_of(*comm, 1000, 64)).is_ok());
  EXPECT_TRUE(torch::equal(t, values));
  // Bytes of any dtype gather (NF4 codes are uint8).
  torch::Tensor codes = torch::arange(256, gpu.dtype(torch::kInt32)).to(torch::kUInt8);
  ASSERT_TRUE(g.all_gather(codes, segments_of(*comm, 256, 1)).is_ok());
  EXPECT_EQ(codes.to(torch::kInt32).sum().item<std::int64_t>(), 255 * 256 / 2);
  // A tensor off the GPU is refused, naming where it is.
  const Status on_cpu = g.all_reduce_sum(torch::ones({4}));
  EXPECT_EQ(on_cpu.code(), StatusCode::kInternal);
  EXPECT_NE(on_cpu.message().find("cpu"), std::string::npos) << on_cpu.message();
}

#if TAILOR_CUDA
TEST(NcclTest, ProcessGroupRefusesWithoutAGpu) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is present";
  tailor::testing::TempDir dir;
  auto store = c10::make_intrusive<c10d::FileStore>(dir.file("store"), 1);
  try {
    auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, 0, 1);
    FAIL() << "ProcessGroupNCCL started without a GPU";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("GPU"), std::string::npos) << e.what_without_backtrace();
  }
}
#endif

}  // namespace
}  // namespace tailor::runner
