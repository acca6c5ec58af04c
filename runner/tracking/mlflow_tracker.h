// A run on an MLflow tracking server, over its REST API
// (https://mlflow.org/docs/latest/rest-api.html): the experiment found or
// created, one run per job (kept across the job's runners in a state file,
// so retries and re-plans continue it), the resolved spec and the plan as
// params, metrics through log-batch within its limits, the plan's current
// choices as tags (a re-plan changes them; params cannot change), and the
// final status with the model's path.
#pragma once

#include <map>
#include <string>

#include "runner/tracking/http_client.h"
#include "runner/tracking/tracker.h"

namespace tailor::runner::tracking {

struct MlflowRun {
  std::string uri;         // http(s)://host[:port][/prefix] of the tracking server
  std::string experiment;  // found or created by name
  std::string run_name;
  std::map<std::string, std::string> tags;       // the spec's and tailor.*
  std::map<std::string, std::string> params;     // logged once, when the run is created
  std::map<std::string, std::string> plan_tags;  // set by every runner (plan.* of its plan)
  std::string state_path;  // where the run's id is kept between runners
  std::string model_path;  // tag tailor.model_path at close
  HttpAuth auth;
};

// MLflow's log-batch limits (mlflow/utils/validation.py).
inline constexpr std::size_t kMlflowMaxMetrics = 1000;
inline constexpr std::size_t kMlflowMaxParams = 100;
inline constexpr std::size_t kMlflowMaxTags = 100;
inline constexpr std::size_t kMlflowMaxParamValue = 6000;
inline constexpr std::size_t kMlflowMaxTagValue = 8000;

class MlflowTracker : public Tracker {
 public:
  explicit MlflowTracker(MlflowRun run);
  const char* name() const override { return "mlflow"; }
  std::size_t max_scalars_per_write() const override { return kMlflowMaxMetrics; }
  Status open(const OpenContext& context) override;
  Status write(const std::vector<MetricRecord>& records) override;
  Status close(RunOutcome outcome) override;

  const std::string& run_id() const { return run_id_; }

 private:
  Result<std::string> experiment_id();
  Status create_run();
  Status log_batch(const std::string& body_fields);
  Status log_pairs(const std::map<std::string, std::string>& pairs, const char* kind, std::size_t per_call,
                   std::size_t max_value);
  Result<std::string> call(const std::string& path, const std::string& body);
  Status save_state() const;

  MlflowRun run_;
  HttpClient http_;
  std::string experiment_id_, run_id_;
  bool params_logged_ = false;
};

}  // namespace tailor::runner::tracking
