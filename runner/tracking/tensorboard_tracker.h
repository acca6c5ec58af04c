// Event files for TensorBoard (and anything that reads them: `wandb sync`),
// written with the project's own writer (tensorboard_format.h): every
// scalar of every metrics line, the plan's estimates at step 0, and the
// resolved spec and the plan as text. Each runner process of the job
// starts a file of its own, named as TensorBoard's writers name theirs.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "runner/tracking/tracker.h"

namespace tailor::runner::tracking {

struct TensorboardRun {
  std::string dir;        // where the event files go
  std::string spec_yaml;  // text summary "spec"
  std::string plan_markdown;  // text summary "plan"
};

class TensorboardTracker : public Tracker {
 public:
  explicit TensorboardTracker(TensorboardRun run) : run_(std::move(run)) {}
  ~TensorboardTracker() override;
  const char* name() const override { return "tensorboard"; }
  Status open(const OpenContext& context) override;
  Status write(const std::vector<MetricRecord>& records) override;
  Status close(RunOutcome outcome) override;

  const std::string& path() const { return path_; }

 private:
  Status append(const std::string& records);

  TensorboardRun run_;
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace tailor::runner::tracking
