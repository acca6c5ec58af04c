// ProcessGroupNCCL is compiled and linked in every build with the CUDA path
// (TAILOR_CUDA), for rank processes on GPUs: without a GPU it refuses with
// the reason; with one, a single-rank all-reduce runs.
#include <gtest/gtest.h>

#if TAILOR_CUDA
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "tests/testing/temp_dir.h"

namespace tailor::runner {
namespace {

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

TEST(NcclTest, OneRankAllReducesOnAGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  tailor::testing::TempDir dir;
  auto store = c10::make_intrusive<c10d::FileStore>(dir.file("store"), 1);
  auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, 0, 1);
  std::vector<at::Tensor> t = {torch::full({1024}, 3.0, torch::TensorOptions().device(torch::kCUDA, 0))};
  pg->allreduce(t)->wait();
  EXPECT_EQ(t[0].sum().item<double>(), 3.0 * 1024);
}
#endif

}  // namespace
}  // namespace tailor::runner
