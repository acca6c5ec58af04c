// Which build of the runner tailor-runner runs. A CUDA build installs two:
// tailor-runner-cuda (LibTorch with its CUDA libraries) and tailor-runner-cpu
// (LibTorch's CPU libraries only), and tailor-runner is a launcher that
// executes one of them. The CUDA build maps some 350 MB of CUDA libraries
// and takes 0.18 s longer to start on a machine that has no GPU to use them
// (docs/testing.md), so without an NVIDIA driver the CPU build runs: the
// same trainer, compiled from the same objects but for the sources that
// read TAILOR_CUDA (runner/CMakeLists.txt). Torch-free.
#pragma once

#include <functional>
#include <string>

#include "core/status.h"

namespace tailor::runner {

// "cuda", "cpu", or unset, empty or "auto": by whether the driver loads.
inline constexpr const char* kVariantEnv = "TAILOR_RUNNER_VARIANT";
// Set by the launcher for the CPU build: why this runner has no CUDA path,
// for its messages (no_cuda_path_reason).
inline constexpr const char* kNoCudaEnv = "TAILOR_RUNNER_NO_CUDA";
// The NVIDIA driver's library, as LibTorch's CUDA runtime loads it.
inline constexpr const char* kCudaDriverLibrary = "libcuda.so.1";

enum class RunnerVariant { kCuda, kCpu };

struct VariantChoice {
  RunnerVariant variant = RunnerVariant::kCpu;
  std::string no_cuda;  // the CPU build's reason (kNoCudaEnv); empty for kCuda
};

// `requested`: kVariantEnv as this process sees it (nullptr: unset).
// `driver_error`: asked only when the driver decides; empty when
// kCudaDriverLibrary loads, else why not (dlerror). A forced variant is run
// whatever the driver; a bad value is InvalidArgument naming the variable.
Result<VariantChoice> choose_variant(const char* requested, const std::function<std::string()>& driver_error);

// "tailor-runner-cuda" or "tailor-runner-cpu": the program beside the launcher.
const char* variant_program(RunnerVariant v);

// Why this runner has no CUDA path: kNoCudaEnv when the launcher chose the
// CPU build, else that it was built without one.
std::string no_cuda_path_reason();

}  // namespace tailor::runner
