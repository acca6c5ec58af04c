// Which of the runner's own CUDA kernels (cuda/kernels.h) run. A kernel
// that no GPU run has checked against ATen stays off unless named in
// TAILOR_CUDA_KERNELS; runner/README.md records each verification (GPU,
// date, test). Torch-free.
#pragma once

#include <bitset>
#include <cstddef>
#include <string>
#include <string_view>

#include "core/status.h"

namespace tailor::runner {

// The operations with a fused kernel of the project's own. On the CPU
// (kernels.h) all but GeGLU and NF4 dequantisation have one; on CUDA all.
enum class FusedKernel { kRmsNorm, kRope, kSwiglu, kGeglu, kCrossEntropy, kAdamw, kNf4Dequantize };
inline constexpr std::size_t kFusedKernelCount = 7;
using KernelSet = std::bitset<kFusedKernelCount>;

// "rms_norm", "rope", "swiglu", "geglu", "cross_entropy", "adamw",
// "nf4_dequantize": the names TAILOR_CUDA_KERNELS takes.
std::string_view fused_kernel_name(FusedKernel k);

// The CUDA kernels a GPU run has verified, the default selection. Empty
// until one has: the kernels are built and tested wherever a GPU is, but
// none has run on one yet.
KernelSet verified_cuda_kernels();

// TAILOR_CUDA_KERNELS: unset, empty or "verified" (the verified kernels),
// "none" (ATen's operations everywhere), "all", or names separated by
// commas ("rms_norm,swiglu"). InvalidArgument names a bad entry and the
// choices.
inline constexpr const char* kCudaKernelsEnv = "TAILOR_CUDA_KERNELS";
Result<KernelSet> parse_cuda_kernels(std::string_view value);

// The set's names in enum order, comma-separated; "none" when empty.
std::string describe_kernels(const KernelSet& s);

}  // namespace tailor::runner
