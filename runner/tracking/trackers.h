// A run's trackers, as its spec's tracking section asks: one TrackerWorker
// each (tracker_worker.h), fed from metrics.jsonl. Rank 0 of a run owns
// them; their state reaches the job as `tracker` events.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "dsl/job_spec.h"
#include "runner/tracking/http_client.h"
#include "runner/tracking/tracker_worker.h"

namespace tailor::runner::tracking {

struct RunInfo {
  std::string out_dir;       // the job's output folder (metrics.jsonl, tracking/)
  std::string spec_yaml;     // the resolved spec
  std::string plan_json;     // the plan document's text
  std::string model_path;    // where the run leaves its model (adapter/ or model/)
  bool resume = false;       // false: a new run; earlier trackers' state in out_dir is dropped
};

// The environment MLflow's clients read credentials from.
HttpAuth mlflow_auth_from_environment();

class Trackers {
 public:
  // Starts the spec's trackers (none: an empty set). Never fails: a tracker
  // that cannot start reports `down` and keeps trying.
  Trackers(const dsl::JobSpec& spec, const RunInfo& run, StateSink sink);
  bool empty() const { return workers_.empty(); }
  void notify();
  // Finishes every tracker within `timeout` in all; false when one is left behind.
  bool finish(RunOutcome outcome, std::chrono::milliseconds timeout);

 private:
  std::vector<std::unique_ptr<TrackerWorker>> workers_;
};

}  // namespace tailor::runner::tracking
