// Re-planning after the runner ran out of memory: the next plan for the
// same job, from what the failed attempt taught. Pure (no I/O): tailord's
// supervisor calls it with the job's spec and the runner's oom report.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/units.h"
#include "dsl/catalog.h"
#include "dsl/job_spec.h"
#include "strategies/hardware.h"
#include "strategies/planner.h"
#include "strategies/strategy.h"

namespace tailor::strategies {

struct OomReport {
  Strategy failed;                         // the strategy that ran out
  Bytes budget;                            // the byte budget the runner had (memory minus headroom)
  std::optional<MemoryBreakdown> measured; // what the runner measured, when it reported it
};

// The machine the job was planned for: its detected GPUs and host memory.
struct DetectedHardware {
  std::vector<Device> gpus;
  std::optional<Bytes> host_memory;
};

struct Replan {
  dsl::JobSpec spec;  // the spec planned, with what the re-plan pinned
  Plan plan;
  std::string story;  // what was done, for the job's events
};

// The next plan after `oom`: the learned budget taken as the device memory
// (headroom included) and the memory model calibrated by the measured
// breakdown when it covers weights, optimizer states and activations. Then,
// in order: the failed strategy with the largest smaller micro-batch that
// fits (every other knob kept, the global batch kept by accumulation); else
// a new plan keeping the optimizer when one fits (the checkpoint holds its
// states); else any new plan; and when the planner would pick the failed
// strategy again, the next step of the decision tree pinned (halve the
// micro-batch, then gradient checkpointing on every layer). The precision
// always stays (the run resumes from its checkpoint). ResourceExhausted when
// nothing smaller is left.
Result<Replan> replan_after_oom(dsl::JobSpec spec, const OomReport& oom, const DetectedHardware& detected,
                                const PlanOptions& options);

}  // namespace tailor::strategies
