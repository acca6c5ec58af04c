#include "strategies/calibration.h"

#include <algorithm>

namespace tailor::strategies {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

CalibrationKey calibration_key(const dsl::JobSpec& spec, const Hardware& hw) {
  CalibrationKey k;
  // A CPU's figures hold for that processor and thread count only.
  k.machine = !hw.cpu_only()         ? hw.gpus.front().name
              : hw.cpu.model.empty() ? std::string("cpu")
                                     : "cpu: " + hw.cpu.model;
  k.runtime = dsl::to_string(spec.planner.runtime);
  k.family = dsl::to_string(spec.model.arch.family);
  return k;
}

Calibration fit_calibration(const std::string& key, const std::vector<CalibrationSample>& samples) {
  Calibration c;
  c.key = key;
  std::vector<double> memory, speed;
  const std::size_t first = samples.size() > kCalibrationWindow ? samples.size() - kCalibrationWindow : 0;
  for (std::size_t i = first; i < samples.size(); ++i) {
    const CalibrationSample& s = samples[i];
    if (s.predicted_peak > 0 && s.measured_peak > 0) memory.push_back(s.measured_peak / s.predicted_peak);
    if (s.predicted_tokens_per_second > 0 && s.measured_tokens_per_second > 0) {
      if (s.contention > kMaxSpeedContention) {
        ++c.busy;
      } else {
        speed.push_back(s.measured_tokens_per_second / s.predicted_tokens_per_second);
      }
    }
  }
  c.runs = static_cast<int>(std::max(memory.size(), speed.size() + static_cast<std::size_t>(c.busy)));
  if (!memory.empty()) c.memory = std::clamp(median(memory), 1.0, kMaxMemoryFactor);
  if (!speed.empty()) c.speed = std::clamp(median(speed), kMinSpeedFactor, kMaxSpeedFactor);
  return c;
}

}  // namespace tailor::strategies
