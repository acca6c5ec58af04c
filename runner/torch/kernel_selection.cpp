#include "runner/torch/kernel_selection.h"

#include <array>

#include "core/text.h"

namespace tailor::runner {
namespace {

constexpr std::array<std::string_view, kFusedKernelCount> kNames = {
    "rms_norm", "rope", "swiglu", "geglu", "cross_entropy", "adamw", "nf4_dequantize",
};

std::string choices() {
  std::string s = "verified, none, all";
  for (std::string_view n : kNames)
    s += ", " + std::string(n);
  return s;
}

}  // namespace

std::string_view fused_kernel_name(FusedKernel k) { return kNames[static_cast<std::size_t>(k)]; }

KernelSet verified_cuda_kernels() { return KernelSet(); }

Result<KernelSet> parse_cuda_kernels(std::string_view value) {
  value = trim(value);
  if (value.empty() || value == "verified") return verified_cuda_kernels();
  if (value == "none") return KernelSet();
  if (value == "all") return KernelSet().set();
  KernelSet out;
  while (!value.empty()) {
    const std::size_t comma = value.find(',');
    const std::string_view entry = trim(value.substr(0, comma));
    value = comma == std::string_view::npos ? std::string_view() : value.substr(comma + 1);
    std::size_t i = 0;
    while (i < kNames.size() && kNames[i] != entry)
      ++i;
    if (i == kNames.size()) {
      return Status::invalid_argument(std::string(kCudaKernelsEnv) + ": unknown kernel \"" + std::string(entry) +
                                      "\" (choices: " + choices() + ")");
    }
    out.set(i);
  }
  return out;
}

std::string describe_kernels(const KernelSet& s) {
  std::string out;
  for (std::size_t i = 0; i < kNames.size(); ++i) {
    if (s.test(i)) out += (out.empty() ? "" : ",") + std::string(kNames[i]);
  }
  return out.empty() ? "none" : out;
}

}  // namespace tailor::runner
