// Plans calibrated by what this machine measured: each probe (strategy.probe)
// and each finished job leaves a sample of predicted against measured peak
// and speed in the calibration store (platform/calibration_store.h), keyed
// by machine, runtime and model family; later plans for the same key take
// the samples' medians as factors on their estimates. Pure: the store is
// read by the callers of plan_job.
#pragma once

#include <string>
#include <vector>

#include "dsl/job_spec.h"
#include "strategies/hardware.h"

namespace tailor::strategies {

struct CalibrationKey {
  std::string machine;  // the GPU's name, or "cpu" and the detected processor ("cpu: AMD EPYC 7B13, 2 threads")
  std::string runtime;  // planner.runtime
  std::string family;   // the model's family
  std::string text() const { return machine + " / " + runtime + " / " + family; }
};
CalibrationKey calibration_key(const dsl::JobSpec& spec, const Hardware& hw);

struct CalibrationSample {
  double predicted_peak = 0, measured_peak = 0;  // bytes per device
  double predicted_tokens_per_second = 0, measured_tokens_per_second = 0;
};

struct Calibration {
  std::string key;  // CalibrationKey::text()
  int runs = 0;     // samples behind the factors
  // Estimates of peak memory times `memory`: the median of measured over
  // predicted, never below 1 (an over-estimate costs some speed, an
  // under-estimate an out-of-memory) and at most kMaxMemoryFactor.
  double memory = 1.0;
  // Estimated speeds times `speed`: the median of measured over predicted,
  // within [kMinSpeedFactor, kMaxSpeedFactor].
  double speed = 1.0;
};
inline constexpr double kMaxMemoryFactor = 1.5;
inline constexpr double kMinSpeedFactor = 0.2;
inline constexpr double kMaxSpeedFactor = 5.0;

// The factors of `samples` (those with both figures of a kind count for
// it); runs = 0 when there are none.
Calibration fit_calibration(const std::string& key, const std::vector<CalibrationSample>& samples);

}  // namespace tailor::strategies
