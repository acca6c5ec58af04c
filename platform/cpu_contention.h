// How much of the processor other processes took while a run was timed, so
// that a speed measured on a busy machine does not calibrate later plans
// (strategies/calibration.h). From the machine's own counters: /proc/stat's
// busy time of the CPUs this process may run on (its affinity), less this
// process's CPU time (getrusage, all its threads), over the wall time between
// two readings. Linux; a CPU quota of a container is not seen.
#pragma once

namespace tailor::platform {

struct CpuTimes {
  double wall = 0;          // seconds, monotonic
  double machine_busy = 0;  // CPU-seconds every CPU spent outside idle and iowait
  double self = 0;          // CPU-seconds of this process (user and system)
  int cpus = 0;             // the CPUs this process may run on
  bool known = false;       // false where /proc/stat could not be read
};
CpuTimes read_cpu_times();

// The share of the `needed` cores (the run's threads; 1 for a GPU run's
// host thread) that other processes held between `a` and `b`: 0 when they
// left at least `needed` cores free on average, 1 when they kept every core
// busy. -1 when unknown (no counters, or no time between the readings).
double contention_between(const CpuTimes& a, const CpuTimes& b, int needed);

}  // namespace tailor::platform
