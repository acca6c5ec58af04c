// What this machine's LibTorch can do: version, devices, threads and a
// measured matmul rate. Torch-free header: the runner's torch code lives in
// runner/torch/ and nothing outside runner/ includes LibTorch.
#pragma once

#include <string>

#include "core/status.h"

namespace tailor::runner {

struct TorchProbe {
  std::string torch_version;   // e.g. "2.11.0+cu130"
  bool cuda_build = false;     // tailor-runner built with its CUDA path (TAILOR_CUDA)
  std::string cuda_version;    // the CUDA LibTorch was built for, e.g. "13.0"; empty without
  bool cuda_available = false;
  int cuda_devices = 0;
  int threads = 0;             // intra-op threads
  double fp32_matmul_gflops = 0;  // 512x512 fp32 matmul, best of a few runs
  double bf16_matmul_gflops = 0;  // same in bf16 (oneDNN on CPU, through fp32 without bf16 in hardware)

  std::string to_json() const;
};

// Runs the probe on the default device. Never throws.
Result<TorchProbe> probe_torch();

// Whether this tailor-runner has its CUDA path (TAILOR_CUDA): read here, in
// a source compiled once per variant, so that its callers need not be.
bool cuda_path_built();

}  // namespace tailor::runner
