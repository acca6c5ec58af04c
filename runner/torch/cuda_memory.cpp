#include "runner/torch/cuda_memory.h"

#include <dlfcn.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <regex>

namespace tailor::runner {
namespace {

// c10::cuda::CUDACachingAllocator::Stat and ::DeviceStats of LibTorch 1.13,
// field for field (both trivially copyable, so a function returning one
// returns it the same way as this copy).
struct Stat {
  std::int64_t current = 0, peak = 0, allocated = 0, freed = 0;
};
using StatArray = std::array<Stat, 3>;  // aggregate, small pool, large pool
struct DeviceStats {
  StatArray allocation, segment, active, inactive_split;
  StatArray allocated_bytes, reserved_bytes, active_bytes, inactive_split_bytes;
  std::int64_t num_alloc_retries = 0, num_ooms = 0;
  Stat oversize_allocations, oversize_segments;
  std::int64_t max_split_size = 0;
};
constexpr std::size_t kAggregate = 0;

constexpr bool kKnownTorch = TORCH_VERSION_MAJOR == 1 && TORCH_VERSION_MINOR == 13;

template <typename F>
F lookup(const char* symbol) {
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, symbol));
}

}  // namespace

struct CudaMemoryMeter::Api {
  DeviceStats (*get_stats)(int) = nullptr;
  void (*reset_peak)(int) = nullptr;
  void (*set_fraction)(double, int) = nullptr;
  // The CUDA runtime, for the device's total memory (optional).
  int (*set_device)(int) = nullptr;
  int (*mem_get_info)(std::size_t*, std::size_t*) = nullptr;

  static const Api& get() {
    static const Api api = [] {
      Api a;
      a.get_stats = lookup<decltype(a.get_stats)>("_ZN3c104cuda20CUDACachingAllocator14getDeviceStatsEi");
      a.reset_peak = lookup<decltype(a.reset_peak)>("_ZN3c104cuda20CUDACachingAllocator14resetPeakStatsEi");
      a.set_fraction = lookup<decltype(a.set_fraction)>("_ZN3c104cuda20CUDACachingAllocator17setMemoryFractionEdi");
      a.set_device = lookup<decltype(a.set_device)>("cudaSetDevice");
      a.mem_get_info = lookup<decltype(a.mem_get_info)>("cudaMemGetInfo");
      return a;
    }();
    return api;
  }
};

Result<std::unique_ptr<CudaMemoryMeter>> CudaMemoryMeter::open(int index, std::int64_t fallback_total) {
  if (!kKnownTorch) {
    return Status::unavailable("CUDA memory accounting reads LibTorch 1.13's caching allocator; this LibTorch is " +
                               std::string(TORCH_VERSION));
  }
  if (!torch::cuda::is_available() || index < 0 || index >= static_cast<int>(torch::cuda::device_count())) {
    return Status::invalid_argument("no CUDA device " + std::to_string(index) + " in this LibTorch build");
  }
  const Api& api = Api::get();
  if (api.get_stats == nullptr || api.reset_peak == nullptr || api.set_fraction == nullptr) {
    return Status::unavailable("LibTorch's CUDA caching allocator is not loaded in this process");
  }
  // The allocator keeps statistics per device once CUDA is initialised on
  // it, which the first tensor there does.
  (void)torch::empty({1}, torch::TensorOptions().device(torch::kCUDA, static_cast<c10::DeviceIndex>(index)));
  std::int64_t total = fallback_total;
  std::size_t free_bytes = 0, total_bytes = 0;
  if (api.set_device != nullptr && api.mem_get_info != nullptr && api.set_device(index) == 0 &&
      api.mem_get_info(&free_bytes, &total_bytes) == 0 && total_bytes > 0) {
    total = static_cast<std::int64_t>(total_bytes);
  }
  if (total <= 0) return Status::unavailable("cannot tell the memory of CUDA device " + std::to_string(index));
  return std::unique_ptr<CudaMemoryMeter>(new CudaMemoryMeter(&api, index, total));
}

std::string CudaMemoryMeter::device_name() const { return "cuda:" + std::to_string(index_); }

void CudaMemoryMeter::set_budget(std::int64_t bytes) {
  // The fraction caps what the allocator reserves from the device, cached
  // blocks included, so fragmentation counts against the budget as it would
  // against the device's memory.
  budget_ = std::max<std::int64_t>(0, bytes);
  const double fraction =
      budget_ == 0 ? 1.0 : std::min(1.0, static_cast<double>(budget_) / static_cast<double>(total_));
  api_->set_fraction(fraction, index_);
}

std::int64_t CudaMemoryMeter::current_bytes() const {
  return api_->get_stats(index_).allocated_bytes[kAggregate].current;
}

std::int64_t CudaMemoryMeter::peak_bytes() const {
  return std::max(folded_peak_, api_->get_stats(index_).allocated_bytes[kAggregate].peak);
}

void CudaMemoryMeter::reset_peak() {
  api_->reset_peak(index_);
  folded_peak_ = 0;
}

void CudaMemoryMeter::raise_peak(std::int64_t bytes) { folded_peak_ = std::max(folded_peak_, bytes); }

std::optional<MemoryMeter::Failure> CudaMemoryMeter::last_failure(const std::string& message) const {
  Failure f;
  f.requested = requested_bytes_in_message(message).value_or(0);
  f.in_use = current_bytes();
  f.budget = budget_;
  return f;
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
