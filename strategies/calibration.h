// Plans calibrated by what this machine measured: each probe (strategy.probe)
// and each finished job leaves a sample of predicted against measured peak
// and speed in the calibration store (platform/calibration_store.h), keyed
// by machine, runtime and model family; later plans for the same key take
// the samples' medians as factors on their estimates. Pure: the store is
// read by the callers of plan_job.
#pragma once

#include <cstddef>
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
  // The share of the cores the run needed that other processes held while
  // its speed was measured (platform/cpu_contention.h); 0 when unknown.
  double contention = 0;
};

// A speed measured with more contention than this is left out of the speed
// factor (its peak still counts): a quarter of the cores it wanted went to
// other processes, so it says more about them than about this machine.
inline constexpr double kMaxSpeedContention = 0.25;
// The factors come from a key's newest samples only: a faster runner, driver
// or kernel makes older speeds stale.
inline constexpr std::size_t kCalibrationWindow = 20;

struct Calibration {
  std::string key;  // CalibrationKey::text()
  int runs = 0;     // samples behind the factors
  int busy = 0;     // of those, speeds left out as measured on a busy machine
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

// The factors of `samples`, oldest first: of the newest kCalibrationWindow,
// those with both figures of a kind count for it, and for speed only those
// measured with at most kMaxSpeedContention; runs = 0 when none counts.
Calibration fit_calibration(const std::string& key, const std::vector<CalibrationSample>& samples);

}  // namespace tailor::strategies
