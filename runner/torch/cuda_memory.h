// CudaMemoryMeter: the MemoryMeter of a CUDA device, read from LibTorch's
// caching allocator (the figures torch.cuda.memory_allocated() and
// max_memory_allocated() report), with the budget enforced as the caching
// allocator's memory fraction, so an allocation past it throws
// c10::OutOfMemoryError like the device running out.
//
// Compiled against c10/cuda's public API where the build has its CUDA path
// (TAILOR_CUDA=1); in a build without it, open() says so. Torch-free header.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "core/status.h"
#include "runner/torch/memory_meter.h"

namespace tailor::runner {

class CudaMemoryMeter final : public MemoryMeter {
 public:
  // The meter of CUDA device `index`; initialises CUDA on it. `fallback_total`
  // is the device's memory when the CUDA runtime cannot be asked (the plan's
  // figure), used to turn a byte budget into a fraction.
  static Result<std::unique_ptr<CudaMemoryMeter>> open(int index, std::int64_t fallback_total);

  std::string device_name() const override;
  void set_budget(std::int64_t bytes) override;
  std::int64_t budget() const override { return budget_; }
  std::int64_t current_bytes() const override;
  std::int64_t peak_bytes() const override;
  std::int64_t peak_reserved_bytes() const override;
  void reset_peak() override;
  void raise_peak(std::int64_t bytes) override;
  std::optional<Failure> last_failure(const std::string& message) const override;

  // The device's total memory in bytes.
  std::int64_t total_bytes() const { return total_; }
  // Its product name as the CUDA runtime reports it ("NVIDIA H200"); empty
  // when the runtime cannot say.
  const std::string& product_name() const { return product_; }

 private:
  CudaMemoryMeter(int index, std::int64_t total, std::string product)
      : index_(index), total_(total), product_(std::move(product)) {}

  int index_;
  std::int64_t total_;
  std::string product_;
  std::int64_t budget_ = 0;
  std::int64_t folded_peak_ = 0;  // raise_peak(): peaks from before a reset
};

// Hands the CUDA caching allocator's unused cached blocks back to the
// devices, so that what one probe candidate left cached is not the next
// one's reserved peak. Nothing without the CUDA path or a device.
void release_cached_device_memory();

// The bytes an out-of-memory message says were requested ("Tried to
// allocate 20.00 MiB"), if it says; how CUDA and the tracking allocator
// report a failing request.
std::optional<std::int64_t> requested_bytes_in_message(const std::string& message);

}  // namespace tailor::runner
