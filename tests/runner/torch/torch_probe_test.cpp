#include "runner/torch_probe.h"

#include <gtest/gtest.h>

namespace tailor::runner {
namespace {

TEST(TorchProbeTest, ReportsVersionAndMeasuresMatmul) {
  auto probe = probe_torch();
  ASSERT_TRUE(probe.is_ok()) << probe.status().to_string();
  // The wheel in .venv (scripts/python/requirements.txt): LibTorch 2.x.
  EXPECT_EQ(probe->torch_version.rfind("2.", 0), 0u) << probe->torch_version;
  EXPECT_GE(probe->threads, 1);
  EXPECT_GT(probe->fp32_matmul_gflops, 0.0);
  EXPECT_GT(probe->bf16_matmul_gflops, 0.0);
  EXPECT_NE(probe->to_json().find("\"cuda_available\": "), std::string::npos);
}

}  // namespace
}  // namespace tailor::runner
