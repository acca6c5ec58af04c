#include "runner/torch/memory_meter.h"

#include <algorithm>

namespace tailor::runner {

PeakScope::PeakScope(MemoryMeter& meter) : meter_(meter), start_bytes_(0), peak_before_(meter.peak_bytes()) {
  meter_.reset_peak();
  start_bytes_ = meter_.current_bytes();
}

PeakScope::~PeakScope() { meter_.raise_peak(peak_before_); }

std::int64_t PeakScope::peak_increase() const { return std::max<std::int64_t>(0, meter_.peak_bytes() - start_bytes_); }

std::int64_t PeakScope::current_increase() const { return meter_.current_bytes() - start_bytes_; }

}  // namespace tailor::runner
