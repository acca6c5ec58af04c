// What the trackers send, read from the run's own files: each line of
// metrics.jsonl as a step's scalars (every number in it, named by where it
// sits, so a figure added to the line reaches every tracker), and the plan
// document's choices and estimates. Torch-free.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tailor::runner::tracking {

struct Scalar {
  std::string tag;  // "train/loss", "eval/loss", "memory/activations_bytes", "rank1/peak_bytes"
  double value = 0;
};

struct MetricRecord {
  std::int64_t step = 0;
  double time = 0;  // seconds since the epoch
  std::vector<Scalar> scalars;
};

// One metrics.jsonl line. Tags: eval_X -> eval/X; memory.X -> memory/X;
// host.X -> memory_host/X; ranks[i].X -> rank<i>/X; any other number or
// boolean X -> train/X (an object's members under its key). Lines without
// "time" (written before it was) take `fallback_time`. nullopt for a line
// that is not an object with an integer "step".
std::optional<MetricRecord> parse_metrics_line(std::string_view line, double fallback_time);

// The plan document (strategies/plan_document.h) as a step-0 record: its
// estimated memory per device (memory_estimated/<component>_bytes) and
// predicted speed (plan/step_seconds, plan/tokens_per_second).
MetricRecord plan_estimates(const nlohmann::json& plan, double time);

// Parameters: the resolved spec (spec.<key path>, lists as JSON text) and
// the plan's choices (plan.<knob>, plan.summary).
std::map<std::string, std::string> spec_params(const nlohmann::json& plan);
std::map<std::string, std::string> plan_params(const nlohmann::json& plan);

// The plan's decisions as Markdown: the summary, then each question with
// its answer and action (TensorBoard's text dashboard renders it).
std::string plan_markdown(const nlohmann::json& plan);

}  // namespace tailor::runner::tracking
