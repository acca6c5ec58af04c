#include "runner/torch/cuda_memory.h"

#include <torch/torch.h>

#include <cmath>
#include <regex>

#include "runner/variant_choice.h"

#if TAILOR_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace tailor::runner {
namespace {

#if TAILOR_CUDA
namespace alloc = c10::cuda::CUDACachingAllocator;
constexpr auto kAggregate = static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE);

c10::CachingDeviceAllocator::DeviceStats stats_of(int index) {
  return alloc::getDeviceStats(static_cast<c10::DeviceIndex>(index));
}
#endif

}  // namespace

Result<std::unique_ptr<CudaMemoryMeter>> CudaMemoryMeter::open(int index, std::int64_t fallback_total) {
#if TAILOR_CUDA
  try {
    if (!torch::cuda::is_available() || index < 0 || index >= static_cast<int>(torch::cuda::device_count())) {
      return Status::invalid_argument("no CUDA device " + std::to_string(index) + " (no driver, or none visible)");
    }
    // The allocator keeps statistics per device once CUDA is initialised on
    // it, which the first tensor there does.
    const auto device = static_cast<c10::DeviceIndex>(index);
    (void)torch::empty({1}, torch::TensorOptions().device(torch::kCUDA, device));
    std::int64_t total = fallback_total;
    std::size_t free_bytes = 0, total_bytes = 0;
    c10::cuda::CUDAGuard guard(device);
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess && total_bytes > 0) {
      total = static_cast<std::int64_t>(total_bytes);
    }
    if (total <= 0) return Status::unavailable("cannot tell the memory of CUDA device " + std::to_string(index));
    cudaDeviceProp prop{};
    std::string product = cudaGetDeviceProperties(&prop, index) == cudaSuccess ? std::string(prop.name) : "";
    return std::unique_ptr<CudaMemoryMeter>(new CudaMemoryMeter(index, total, std::move(product)));
  } catch (const c10::Error& e) {
    return Status::unavailable("CUDA device " + std::to_string(index) + ": " + e.what_without_backtrace());
  }
#else
  (void)fallback_total;
  return Status::unavailable("no CUDA device " + std::to_string(index) + ": " + no_cuda_path_reason());
#endif
}

std::string CudaMemoryMeter::device_name() const { return "cuda:" + std::to_string(index_); }

void CudaMemoryMeter::set_budget(std::int64_t bytes) {
  // The fraction caps what the allocator reserves from the device, cached
  // blocks included, so fragmentation counts against the budget as it would
  // against the device's memory.
  budget_ = std::max<std::int64_t>(0, bytes);
  const double fraction =
      budget_ == 0 ? 1.0 : std::min(1.0, static_cast<double>(budget_) / static_cast<double>(total_));
#if TAILOR_CUDA
  alloc::setMemoryFraction(fraction, static_cast<c10::DeviceIndex>(index_));
#else
  (void)fraction;
#endif
}

#if TAILOR_CUDA
std::int64_t CudaMemoryMeter::current_bytes() const { return stats_of(index_).allocated_bytes[kAggregate].current; }

std::int64_t CudaMemoryMeter::peak_bytes() const {
  return std::max(folded_peak_, stats_of(index_).allocated_bytes[kAggregate].peak);
}

std::int64_t CudaMemoryMeter::peak_reserved_bytes() const { return stats_of(index_).reserved_bytes[kAggregate].peak; }

void CudaMemoryMeter::reset_peak() {
  alloc::resetPeakStats(static_cast<c10::DeviceIndex>(index_));
  folded_peak_ = 0;
}
#else
// Never constructed without the CUDA path (open() refuses).
std::int64_t CudaMemoryMeter::current_bytes() const { return 0; }
std::int64_t CudaMemoryMeter::peak_bytes() const { return folded_peak_; }
std::int64_t CudaMemoryMeter::peak_reserved_bytes() const { return 0; }
void CudaMemoryMeter::reset_peak() { folded_peak_ = 0; }
#endif

void CudaMemoryMeter::raise_peak(std::int64_t bytes) { folded_peak_ = std::max(folded_peak_, bytes); }

std::optional<MemoryMeter::Failure> CudaMemoryMeter::last_failure(const std::string& message) const {
  Failure f;
  f.requested = requested_bytes_in_message(message).value_or(0);
  f.in_use = current_bytes();
  f.budget = budget_;
  return f;
}

void release_cached_device_memory() {
#if TAILOR_CUDA
  if (torch::cuda::is_available()) alloc::emptyCache();
#endif
}

std::optional<std::int64_t> requested_bytes_in_message(const std::string& message) {
  // c10's format_size: "N bytes", "N.NN KiB", "N.NN MiB", "N.NN GiB".
  static const std::regex re(R"([Tt]ried to allocate ([0-9]+(?:\.[0-9]+)?) ?(bytes|B|KiB|MiB|GiB|TiB))");
  std::smatch m;
  if (!std::regex_search(message, m, re)) return std::nullopt;
  const double value = std::stod(m[1].str());
  const std::string unit = m[2].str();
  double scale = 1;
  if (unit == "KiB") scale = 1024.0;
  if (unit == "MiB") scale = 1024.0 * 1024;
  if (unit == "GiB") scale = 1024.0 * 1024 * 1024;
  if (unit == "TiB") scale = 1024.0 * 1024 * 1024 * 1024;
  return static_cast<std::int64_t>(std::llround(value * scale));
}

}  // namespace tailor::runner
