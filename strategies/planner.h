// The planner: the fastest strategy that fits, and why.
//
//   plan_job(spec, hardware)
//     1. constraints: pinned knobs, allow/forbid, the global batch (kept exact
//        by micro-batch x accumulation x GPUs), what the device supports
//     2. decision tree (decision_tree.cpp): the OOM walk of the seed
//        documents, recorded question by question with byte figures
//     3. search: every candidate of precision x checkpointing x micro-batch x
//        adapter x optimizer x ZeRO stage x offload is estimated (memory
//        model + cost model); the fastest that fits wins
//     4. alternatives: the best plan of each other kind, with why it lost;
//        when nothing fits, the shortfall and the smallest catalog GPU that
//        would fit.
// Never throws; "nothing fits" is a Plan with fits == false.
#pragma once

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
};

// One evaluated strategy.
struct Candidate {
  Strategy strategy;
  MemoryEstimate memory;
  Throughput throughput;
  bool fits = false;     // device and host memory both within budget
  Bytes over_budget;     // device total minus budget (negative when it fits)
  Bytes host_over_budget;
};

struct Decision {
  std::string question;
  std::string answer;  // with the byte figures that decided it
  std::string action;  // what the planner did
};

struct Alternative {
  Candidate candidate;
  std::string why;  // "19% slower", "does not fit: needs 30.1 GiB of 21.6 GiB"
};

struct Plan {
  bool fits = false;
  Candidate chosen;     // when nothing fits: the candidate closest to fitting
  Hardware hardware;
  bool on_cpu = false;
  Bytes budget_per_device;  // device memory minus headroom
  Bytes host_budget;        // host RAM minus headroom
  double headroom = 0;
  std::int64_t seq_len = 0;
  std::int64_t global_batch = 0;
  std::vector<Decision> decisions;
  std::vector<Alternative> alternatives;
  Bytes shortfall;                   // when !fits: device bytes over budget of the closest candidate
  Bytes host_shortfall;              // when !fits: host bytes over budget of the closest candidate
  std::string smallest_fitting_gpu;  // when !fits: a catalog key, or empty
  int candidates_considered = 0;
  std::vector<std::string> errors;   // constraints that cannot be met at all (e.g. batch not divisible)
};

Plan plan_job(const dsl::JobSpec& spec, const Hardware& hardware, const PlanOptions& options = {});

// Estimates one strategy for `spec` on `hardware` (used by the planner, the
// tree and calibration).
Candidate evaluate(const dsl::JobSpec& spec, const Hardware& hardware, const Strategy& s, const PlanOptions& options);

}  // namespace tailor::strategies
