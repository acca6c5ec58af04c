// One strategy for a job on some hardware, estimated: its memory (the
// memory model through the runtime profile), its speed (the cost model),
// whether it fits the budgets and whether the runner executes it. The
// planner's search, the decision tree and calibration all call evaluate().
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "dsl/catalog.h"
#include "dsl/job_spec.h"
#include "strategies/calibration.h"
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
  // This machine's calibration (calibration.h) for the job's key: every
  // candidate's peak and speed estimates times its factors. Unset: none.
  std::optional<Calibration> calibration;
};

// Where a dpo job's reference log-probabilities come from under `s`: the
// spec's pin, else the adapters switched off when `s` trains adapters (no
// bytes, no pass before training) and precomputed when it trains every
// weight (no bytes either, where a frozen copy would need every weight
// once more; the same forwards, once per pair); kto's full fine-tune a
// separate copy (its KL rows cannot be scored ahead). kNone for the
// methods without a reference.
dsl::Reference reference_for(const dsl::JobSpec& spec, const Strategy& s);
// Whether the spec's micro-batches forward KL rows (kto, loss_type kto).
bool kl_rows_for(const dsl::JobSpec& spec);

// One evaluated strategy.
struct Candidate {
  Strategy strategy;
  MemoryEstimate memory;
  Throughput throughput;
  Bytes budget;          // device memory less the headroom of its kind (headroom.h) or the spec's
  Bytes host_budget;     // host RAM less the same headroom
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

// Estimates one strategy for `spec` on `hardware` (used by the planner, the
// tree and calibration).
Candidate evaluate(const dsl::JobSpec& spec, const Hardware& hardware, const Strategy& s, const PlanOptions& options);

}  // namespace tailor::strategies
