#include "runner/torch_probe.h"

#include <chrono>
#include <cstdio>

#include "runner/torch/half_matmul.h"

#if TAILOR_CUDA
#include <cuda.h>  // CUDA_VERSION
#endif

namespace tailor::runner {
namespace {

double matmul_gflops(torch::Dtype dtype) {
  constexpr int64_t n = 512;
  auto a = torch::randn({n, n}).to(dtype);
  auto b = torch::randn({n, n}).to(dtype);
  // The runner's own product (half_matmul.h): bf16 through fp32 where the
  // CPU lacks it in hardware, LibTorch's elsewhere.
  auto c = matmul_2d(a, b);  // warm-up: first call loads kernels
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    c = matmul_2d(a, b);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) best = std::max(best, 2.0 * n * n * n / s / 1e9);
  }
  return best;
}

}  // namespace

std::string TorchProbe::to_json() const {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"torch_version\": \"%s\", \"cuda_build\": %s, \"cuda_version\": \"%s\", "
                "\"cuda_available\": %s, \"cuda_devices\": %d, \"threads\": %d, "
                "\"fp32_matmul_gflops\": %.1f, \"bf16_matmul_gflops\": %.1f}",
                torch_version.c_str(), cuda_build ? "true" : "false", cuda_version.c_str(), cuda_available ? "true" : "false", cuda_devices, threads, fp32_matmul_gflops,
                bf16_matmul_gflops);
  return buf;
}

Result<TorchProbe> probe_torch() {
  try {
    TorchProbe p;
    p.torch_version = TORCH_VERSION;
    p.cuda_build = TAILOR_CUDA != 0;
#if TAILOR_CUDA
    p.cuda_version = std::to_string(CUDA_VERSION / 1000) + "." + std::to_string(CUDA_VERSION % 1000 / 10);
#endif
    p.cuda_available = torch::cuda::is_available();
    p.cuda_devices = p.cuda_available ? static_cast<int>(torch::cuda::device_count()) : 0;
    p.threads = at::get_num_threads();
    p.fp32_matmul_gflops = matmul_gflops(torch::kFloat32);
    p.bf16_matmul_gflops = matmul_gflops(torch::kBFloat16);
    return p;
  } catch (const c10::Error& e) {
    return Status::internal(std::string("LibTorch probe failed: ") + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Status::internal(std::string("LibTorch probe failed: ") + e.what());
  }
}

bool cuda_path_built() { return TAILOR_CUDA != 0; }

}  // namespace tailor::runner
