// Probing (strategy.probe): the planner's top plans measured on this
// machine before training. The plan document asks (its "probe" object:
// strategies/plan_document.cpp); tailor-runner measures each candidate a
// few steps on the longest batches (runner/torch/probe_plans.h) and writes
// the plan again with what it measured and the strategy it chose; `tailor
// plan --probe`, `tailor run`, tailord and the calibration store read the
// result here. Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "strategies/strategy.h"

namespace tailor::runner {

// What one candidate measured.
struct ProbeMeasurement {
  enum class Outcome {
    kFits,         // ran its steps within the budget
    kOutOfMemory,  // the budget (or the device) refused an allocation: a measured "does not fit"
    kFailed,       // another error (message says which)
  };
  Outcome outcome = Outcome::kFailed;
  double tokens_per_second = 0;     // over the timed steps
  double step_seconds = 0;          // mean of the timed steps
  std::int64_t peak_bytes = 0;      // allocated: the tracking allocator's, or torch.cuda's max_memory_allocated
  std::int64_t reserved_bytes = 0;  // the caching allocator's reserved peak on a GPU; 0 on the CPU
  std::int64_t budget_bytes = 0;    // the budget it ran under
  double seconds = 0;               // the whole probe of this candidate, loading included
  // The share of the cores the timed steps needed that other processes
  // held (platform/cpu_contention.h); -1 when not measured. A speed measured
  // on a busy machine still ranks the candidates (all alike), but does not
  // calibrate later plans.
  double contention = -1;
  std::string message;              // why it failed or ran out of memory
};
const char* to_string(ProbeMeasurement::Outcome o);  // "fits", "out_of_memory", "failed"

struct ProbeCandidate {
  strategies::Strategy strategy;
  std::string summary;
  std::int64_t predicted_peak = 0;      // the plan's per-device total
  std::int64_t predicted_reserved = 0;  // on a GPU
  double predicted_tokens_per_second = 0;
  // Measured speeds are ranked times this: 1 / (1 + margin x the plan's
  // departures from exact training), as the planner ranks estimates.
  double fidelity_factor = 1.0;
  std::optional<ProbeMeasurement> measured;
};

struct ProbeTable {
  std::int64_t requested = 0;
  std::int64_t warmup_steps = 0;
  std::int64_t timed_steps = 0;  // at least; on until min_timed_seconds, at most max_timed_steps
  double min_timed_seconds = 0;
  std::int64_t max_timed_steps = 0;
  double tie_band = 0;  // measured scores this close to the best are a tie
  std::string limited;  // why fewer candidates than requested
  std::vector<ProbeCandidate> candidates;
  int chosen = -1;     // after probing: the index trained (-1: none fitted; the plan's own stays)
  double seconds = 0;  // the whole probe
  bool measured() const { return !candidates.empty() && candidates.front().measured.has_value(); }
};

// One measurement as a JSON object (a plan's candidate's "measured", a
// rank's file) and back; InvalidArgument naming `name` when malformed.
std::string measurement_json_text(const ProbeMeasurement& m);
Result<ProbeMeasurement> parse_measurement(const std::string& text, const std::string& name);

// A plan of several ranks is probed by its ranks together (the launcher
// starts them for each candidate): rank R of candidate I writes what it
// measured to this file of the job's folder.
std::string probe_rank_file(const std::string& out_dir, std::size_t candidate, int rank);

// One candidate's measurement from its ranks' (nullopt: a rank that left
// none, stopped by the launcher once another failed). All fit: the job's
// step is the slowest rank's and its speed that rank's (each rank counts the
// global batch's tokens, summed over the ranks, over its own step time); its
// peak is the largest rank's, the one that must fit. A rank out of memory
// makes the candidate a measured "does not fit", saying which rank; anything
// else is a failure, with `ended` (how the ranks ended) where no rank said
// why. `seconds` is the caller's (launching included).
ProbeMeasurement combine_rank_measurements(const std::vector<std::optional<ProbeMeasurement>>& ranks,
                                           const std::string& ended);

// The candidate to train: of those that fit, the fastest measured (its
// speed times its fidelity factor), a tie within `tie_band` going to the
// earlier candidate (the planner's order); -1 when none fitted.
int choose_probed(const std::vector<ProbeCandidate>& candidates, double tie_band);

// The plan document `plan_json` with each candidate's measurement, the
// choice and, when a candidate was chosen, its strategy, summary, memory
// and throughput in the plan's own places, so that the document describes
// the plan that trains. InvalidArgument when the document has no probe or
// the counts differ.
Result<std::string> probed_plan_json(const std::string& plan_json, const ProbeTable& measured);

// The probe table, measured or not, of a plan document; nullopt when the
// plan asked for none.
Result<std::optional<ProbeTable>> parse_probe(const std::string& plan_json, const std::string& name);

// Whether two tables probe the same candidates in the same order (a
// resumed run keeps the choice its probe made).
bool same_candidates(const ProbeTable& a, const ProbeTable& b);

// The table as text, one line a candidate:
//   #  plan                                   predicted            measured
//   1* bf16, micro-batch 16, ...   7305 tok/s 122.6 MiB   7012 tok/s 118.0 MiB
std::string format_probe_table(const ProbeTable& t, bool on_gpu);

}  // namespace tailor::runner
