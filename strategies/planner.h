// The planner: the fastest strategy that fits, and why.
//
//   plan_job(spec, hardware)
//     1. constraints: pinned knobs, allow/forbid, the global batch (kept exact
//        by micro-batch x accumulation x ranks), what the device supports
//     2. search: every candidate of ranks x precision x checkpointing x
//        micro-batch x adapter x optimizer x ZeRO stage x offload is
//        estimated (memory model + cost model) and asked whether the runner
//        can execute it; of those that fit and run, the fastest wins, unless
//        one within the cost model's error keeps more memory free, avoids
//        offload or uses fewer techniques (the policy below)
//     3. decision tree (decision_tree.cpp): the OOM walk of the seed
//        documents from the spec as written to the plan chosen, question by
//        question with byte figures, as data (Decision)
//     4. alternatives: the best plan of each other kind, with why it lost,
//        and the plan it would choose if the runner executed more; when
//        nothing fits, the shortfall and the smallest catalog GPU that would.
// Never throws; "nothing fits" is a Plan with fits == false.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dsl/catalog.h"
#include "dsl/job_spec.h"
#include "strategies/cost_model.h"
#include "strategies/hardware.h"
#include "strategies/memory_model.h"

namespace tailor::strategies {

struct PlanOptions {
  MemoryConstants memory = MemoryConstants::defaults();
  CostConstants cost;
  Attention attention = Attention::kMemoryEfficient;  // on GPUs; CPU plans search it
  int max_alternatives = 4;
  // When nothing fits, try every catalog GPU (same count) to name the
  // smallest that would. Costs one search per catalog entry.
  bool find_smallest_gpu = true;
  const dsl::Catalog* catalog = nullptr;  // nullptr = Catalog::builtin()
  // Why the runner that will execute the plan cannot run a strategy (empty:
  // it can). Unset, every strategy counts as executable: what-if planning
  // and the planner's own tests. `tailor plan`, `tailor run` and tailord all
  // take it from runner/protocol/capabilities.h, so they agree.
  std::function<std::string(const Strategy&)> why_not_executable;
  // The ranking policy. Estimated speeds closer than `small_gain` are a tie
  // (the cost model is not better than that); a tie goes to the plan
  // without offload, then to one that leaves `comfortable_spare` of the
  // budget free, then to fewer techniques, then to speed.
  double small_gain = 0.05;
  double comfortable_spare = 0.05;
  // Plan again with each pinned knob left to the planner, and say which pin
  // excludes a better plan (Plan::advice). One search per pinned knob.
  bool advise_unpinning = true;
};

// One evaluated strategy.
struct Candidate {
  Strategy strategy;
  MemoryEstimate memory;
  Throughput throughput;
  bool fits = false;     // device and host memory both within budget
  Bytes over_budget;     // device total minus budget (negative when it fits)
  Bytes host_over_budget;
  std::string not_executable;  // why the runner cannot run it; empty when it can
  // The peak the GPU caching allocator reserves (fragmentation of the
  // runtime profile, strategies/runtime_profile.h); 0 on the CPU. The
  // budget check uses the allocated total: headroom covers the rest.
  Bytes reserved;

  bool executable() const { return not_executable.empty(); }
  // Device budget left free (negative when over).
  Bytes spare() const { return Bytes(0) - over_budget; }
};

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
                         // optimizer_8bit, lora, qlora, zero_3, offload_optimizer, offload_params, attention, search
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

  // Why the job cannot run when !fits, in one line for `tailor run`, tailord
  // and `tailor plan`: "does not fit 1x NVIDIA T4 (16.0 GiB), host ...; short
  // by 1.2 GiB; ...". Empty when it fits.
  std::string no_fit_reason() const;
};

Plan plan_job(const dsl::JobSpec& spec, const Hardware& hardware, const PlanOptions& options = {});

// Estimates one strategy for `spec` on `hardware` (used by the planner, the
// tree and calibration).
Candidate evaluate(const dsl::JobSpec& spec, const Hardware& hardware, const Strategy& s, const PlanOptions& options);

}  // namespace tailor::strategies
