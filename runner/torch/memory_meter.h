// MemoryMeter: the training device's memory as the runner reads it, whatever
// the device. On the CPU it is the tracking allocator (tracking_allocator.h),
// which counts every tensor and enforces the budget itself; on a CUDA GPU it
// is the caching allocator's own statistics (cuda_memory.h), with the budget
// enforced as the caching allocator's memory fraction. Either way an
// allocation over the budget throws c10::OutOfMemoryError.
//
// Byte figures are what LibTorch asked for (the caching allocator's
// "allocated bytes"), not what the device has reserved, so CPU and GPU runs
// compare with the planner's estimate the same way.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tailor::runner {

class MemoryMeter {
 public:
  virtual ~MemoryMeter() = default;

  // Where the bytes live, for messages: "cpu", "cuda:0".
  virtual std::string device_name() const = 0;

  // Byte budget on current_bytes(); 0 = unlimited.
  virtual void set_budget(std::int64_t bytes) = 0;
  virtual std::int64_t budget() const = 0;

  // Bytes of live tensors on the device, and the highest figure since the
  // last reset_peak().
  virtual std::int64_t current_bytes() const = 0;
  virtual std::int64_t peak_bytes() const = 0;
  // What the device's caching allocator reserved at most since the last
  // reset_peak() (cached blocks included); 0 where there is no such cache
  // (the CPU).
  virtual std::int64_t peak_reserved_bytes() const { return 0; }
  // Sets the peak to current_bytes().
  virtual void reset_peak() = 0;
  // Makes peak_bytes() at least `bytes` (PeakScope folds an outer peak back).
  virtual void raise_peak(std::int64_t bytes) = 0;

  // The allocation that was refused last: the requested bytes, the bytes in
  // use then and the budget then in force (0 when unlimited).
  struct Failure {
    std::int64_t requested = 0;
    std::int64_t in_use = 0;
    std::int64_t budget = 0;
  };
  // `message` is the out-of-memory error's text, which is all a GPU's
  // allocator says of the failing request.
  virtual std::optional<Failure> last_failure(const std::string& message) const = 0;
};

// Measures the peak of a region relative to its start. Construction resets
// the meter's peak to the current usage; destruction folds the peak seen
// before the scope back in, so the meter's peak_bytes() (and an outer scope,
// once the inner one ends) still see the higher of the two. While an inner
// scope is alive, an outer one's peak_increase() only covers the time since
// the inner one began. Not for concurrent scopes on several threads: they
// share one peak.
class PeakScope {
 public:
  explicit PeakScope(MemoryMeter& meter);
  ~PeakScope();
  PeakScope(const PeakScope&) = delete;
  PeakScope& operator=(const PeakScope&) = delete;

  // peak_bytes() - current_bytes() at construction: the extra memory the region
  // needed at its highest point.
  std::int64_t peak_increase() const;
  // current_bytes() now - current_bytes() at construction (negative when the
  // region freed more than it kept).
  std::int64_t current_increase() const;
  std::int64_t start_bytes() const { return start_bytes_; }

 private:
  MemoryMeter& meter_;
  std::int64_t start_bytes_;
  std::int64_t peak_before_;
};

}  // namespace tailor::runner
