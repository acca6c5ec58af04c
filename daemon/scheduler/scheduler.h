// The scheduling decision, as a pure function: which queued jobs start now.
// Jobs are taken by priority, then submission order. A job starts when the
// GPUs (or, for CPU jobs, the host memory budget) its plan needs are free;
// several jobs share the machine when their plans fit together. The first
// job that does not fit blocks those behind it (no backfilling past it, so
// a large job is never starved by a stream of small ones); a job waiting
// out a retry backoff does not block anyone.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tailor::daemon {

struct QueuedJob {
  std::string id;
  std::int64_t gpus_needed = 0;   // 0: a CPU job, runs on the host budget
  std::int64_t bytes_needed = 0;  // host bytes for a CPU job
  std::optional<double> not_before;
};

struct Capacity {
  std::int64_t host_total_bytes = 0;
  std::int64_t host_free_bytes = 0;
  int gpu_total = 0;
  std::vector<int> free_gpus;  // device indices
};

struct Placement {
  // kWait: an executor that places its own jobs cannot take it now
  // (schedule() never says it).
  enum class Action { kStart, kWait, kNeverFits };
  std::string id;
  Action action = Action::kStart;
  std::vector<int> gpus;        // kStart on GPUs
  std::int64_t bytes = 0;       // kStart on the host
  std::string reason;           // kWait, kNeverFits: why
};

std::vector<Placement> schedule(const std::vector<QueuedJob>& ordered, Capacity capacity, double now);

}  // namespace tailor::daemon
