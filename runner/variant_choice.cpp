#include "runner/variant_choice.h"

#include <cstdlib>
#include <string_view>

namespace tailor::runner {

Result<VariantChoice> choose_variant(const char* requested, const std::function<std::string()>& driver_error) {
  const std::string_view want = requested == nullptr ? "" : requested;
  VariantChoice c;
  if (want == "cuda") {
    c.variant = RunnerVariant::kCuda;
  } else if (want == "cpu") {
    c.no_cuda = std::string(kVariantEnv) + "=cpu runs the runner's CPU-only build";
  } else if (want.empty() || want == "auto") {
    if (const std::string why = driver_error(); why.empty()) {
      c.variant = RunnerVariant::kCuda;
    } else {
      c.no_cuda = "this machine has no NVIDIA driver (" + why + "), so tailor-runner runs its CPU-only build (" +
                  kVariantEnv + "=cuda runs the CUDA build)";
    }
  } else {
    return Status::invalid_argument(std::string(kVariantEnv) + ": expected auto, cuda or cpu, got '" +
                                    std::string(want) + "'");
  }
  return c;
}

const char* variant_program(RunnerVariant v) {
  return v == RunnerVariant::kCuda ? "tailor-runner-cuda" : "tailor-runner-cpu";
}

std::string no_cuda_path_reason() {
  if (const char* why = std::getenv(kNoCudaEnv); why != nullptr && *why != '\0') return why;
  return "this tailor-runner was built without its CUDA path (TAILOR_CUDA=OFF)";
}

}  // namespace tailor::runner
