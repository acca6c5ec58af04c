// One destination for a run's metrics (TensorBoard files, an MLflow
// server). A TrackerWorker (tracker_worker.h) drives it from its own
// thread: open until it succeeds, then writes of consecutive records, then
// close. Every call may fail and is retried with the same arguments, so a
// tracker keeps no state that a failed call leaves half-changed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "runner/tracking/metric_records.h"

namespace tailor::runner::tracking {

// How the run ended, in the words trackers know (MLflow's run statuses).
enum class RunOutcome { kFinished, kFailed, kKilled };
const char* to_string(RunOutcome o);  // FINISHED, FAILED, KILLED

struct OpenContext {
  bool fresh = true;        // nothing of this run was sent before (no earlier process)
  std::int64_t step = 0;    // the last step sent before (0 when fresh)
};

class Tracker {
 public:
  virtual ~Tracker() = default;
  virtual const char* name() const = 0;  // "tensorboard", "mlflow": also its state file's name
  // The most scalars one write() takes (MLflow's log-batch takes 1000).
  virtual std::size_t max_scalars_per_write() const { return 1u << 20; }

  // Unavailable: retried later (a server down, a timeout, 5xx, 429).
  // InvalidArgument: the destination refuses these records; they are
  // skipped (and reported) rather than retried for ever.
  virtual Status open(const OpenContext& context) = 0;
  virtual Status write(const std::vector<MetricRecord>& records) = 0;
  virtual Status close(RunOutcome outcome) = 0;
};

}  // namespace tailor::runner::tracking
