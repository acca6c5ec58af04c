// What the planner returns: the chosen candidate, the budgets, the decision
// trace as data (Decision: its prose is derived), the alternatives and the
// advice about pins. Built by plan_job (planner.h); read by the CLI, the
// plan document, tailord and the web UI.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dsl/technique.h"
#include "strategies/candidate.h"

namespace tailor::strategies {

// What one step of the decision trace found.
enum class Verdict {
  kFits,           // the job as written fits
  kDoesNotFit,     // the job as written (or the end of the walk) does not fit
  kApplied,        // the chosen plan takes this step
  kAlready,        // the spec pins it already
  kNotNeeded,      // the plan fits without it
  kNotChosen,      // it would save memory, but the chosen plan does without it
  kNotAllowed,     // pinned otherwise, forbidden, or the device lacks it
  kNotExecutable,  // this build's runner cannot run it
  kChosen,         // the search's choice
  kNoneFits,       // nothing fits
};
const char* to_string(Verdict v);  // "fits", "applied", "not_executable", ...

// One step of the decision trace, as data; the prose is derived from it.
struct Decision {
  std::string step;      // stable key: as_written, ranks, precision, checkpointing, micro_batch, zero_1_2,
                         // optimizer_8bit, lora, qlora, zero_3, offload_optimizer, offload_params, attention, reference, search
  std::string question;
  Verdict verdict = Verdict::kNotNeeded;
  bool fits = false;     // after the step (or with it, when not taken)
  Bytes needed;          // per device, after the step (or with it)
  Bytes budget;          // per device
  Bytes saved;           // by the step (negative: it costs memory)
  Bytes host_needed;     // host RAM for offload (0 when none)
  Bytes host_budget;
  std::string change;    // what the step does to the plan ("use bf16 mixed precision")
  std::string reason;    // why (not): a pin, a forbid, the runner, the ranking

  std::string answer() const;  // "yes: needs 15.0 GiB of a 21.6 GiB budget (saves 49.7 GiB)"
  std::string action() const;  // what the planner did: the change, "keep it", "none"
};

struct Alternative {
  Candidate candidate;
  std::string why;  // "19% slower", "does not fit: needs 30.1 GiB of 21.6 GiB"
};

// A pinned knob that keeps the planner from a better plan: the plan it
// would choose with the knob free, and the advice in one line, e.g. "qlora
// ... fits without offload at 17.9 GiB per device (2,310 tokens/s): unpin
// strategy.adapter".
struct PinAdvice {
  dsl::Knob knob;
  Candidate candidate;
  std::string text;
};

// A probe's steps on each candidate: warm-up steps (allocator caches,
// kernels' first calls) are not timed; the timed steps give tokens/s.
// The timed steps go on past kProbeTimedSteps until they have taken
// kProbeMinTimedSeconds (short CPU steps are noisy), at most
// kProbeMaxTimedSteps.
inline constexpr std::int64_t kProbeWarmupSteps = 2;
inline constexpr std::int64_t kProbeTimedSteps = 2;
inline constexpr double kProbeMinTimedSeconds = 1.0;
inline constexpr std::int64_t kProbeMaxTimedSteps = 50;
// Measured speeds this close to the fastest are a tie, which goes to the
// planner's order (it prefers less offload, more spare memory, fewer
// techniques): a band narrower than the cost model's own
// (PlanOptions::small_gain), as these are measurements of the same steps
// side by side, not estimates.
inline constexpr double kProbeTieBand = 0.02;

struct Plan {
  bool fits = false;    // the chosen strategy fits and the runner executes it
  Candidate chosen;     // when nothing fits: the executable candidate closest to fitting
  Hardware hardware;
  bool on_cpu = false;
  Bytes budget_per_device;  // device memory minus headroom
  Bytes host_budget;        // host RAM minus headroom
  double headroom = 0;
  std::int64_t seq_len = 0;
  std::int64_t global_batch = 0;
  std::vector<Decision> decisions;
  std::vector<Alternative> alternatives;
  // The plan the policy would choose if the runner executed every strategy,
  // when that is not the chosen one; `why` says what the runner lacks.
  std::optional<Alternative> preferred_if_executable;
  // The fastest plan by estimate when the policy chose another within the
  // cost model's error (PlanOptions::small_gain); `why` says why.
  std::optional<Alternative> fastest_by_estimate;
  // When nothing fits on GPUs and the spec leaves strategy.activation_offload
  // to the planner (which does not choose it on its own yet): the plan it
  // would choose with the pin, where that fits; `why` says how to get it.
  std::optional<Alternative> with_activation_offload;
  Bytes shortfall;                   // when !fits: device bytes over budget of the closest candidate
  Bytes host_shortfall;              // when !fits: host bytes over budget of the closest candidate
  std::string smallest_fitting_gpu;  // when !fits: a catalog key, or empty
  int candidates_considered = 0;
  std::vector<std::string> errors;   // constraints that cannot be met at all (e.g. batch not divisible)
  // Pins that exclude a plan that fits where this one does not, needs no
  // offload where this one does, or is faster beyond the cost model's error
  // (the adapter pin only for the first two: an adapter changes what is
  // trained). Empty without pins.
  std::vector<PinAdvice> advice;
  // The calibration applied to every estimate (PlanOptions::calibration).
  std::optional<Calibration> calibration;
  // strategy.probe K: the plans to measure before training, in the policy's
  // order (the chosen one first, then each next choice without the ones
  // before), all fitting and executable in one process; fewer than K when
  // fewer qualify, and `probe_limited` says why.
  std::int64_t probe_requested = 0;
  std::vector<Candidate> probe_candidates;
  std::string probe_limited;
  // How the measurements are ranked, as the estimates are: each departure
  // from exact training discounts a speed by the fidelity margin
  // (CostConstants); ties (kProbeTieBand) go to the planner's order.
  double probe_fidelity_margin = 0;

  // Why the job cannot run when !fits, in one line for `tailor run`, tailord
  // and `tailor plan`: "does not fit 1x NVIDIA T4 (16.0 GiB), host ...; short
  // by 1.2 GiB; ...". Empty when it fits.
  std::string no_fit_reason() const;
};

}  // namespace tailor::strategies
