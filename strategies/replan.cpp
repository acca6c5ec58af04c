#include "strategies/replan.h"

#include "strategies/constraints.h"
#include "strategies/headroom.h"

namespace tailor::strategies {
namespace {

// The largest micro-batch below the failed one that fits with every other
// knob of the failed strategy pinned; nullopt when none does.
std::optional<Replan> same_knobs_smaller_micro_batch(const dsl::JobSpec& spec, const Hardware& hw,
                                                     const Strategy& failed, const PlanOptions& o) {
  const Constraints c(spec, hw);
  if (!c.error().empty()) return std::nullopt;
  const std::vector<std::int64_t> sizes = c.micro_batches_for(failed.num_gpus);
  for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) {
    if (*it >= failed.micro_batch_size) continue;
    dsl::JobSpec pinned = spec;
    pinned.training.micro_batch_size = *it;
    pinned.strategy.precision = failed.precision;
    pinned.strategy.gradient_checkpointing = failed.checkpoint_every;
    pinned.strategy.adapter = failed.adapter;
    pinned.strategy.optimizer = failed.optimizer;
    pinned.strategy.zero_stage = failed.zero_stage;
    pinned.strategy.offload = failed.offload;
    Plan plan = plan_job(pinned, hw, o);
    if (plan.errors.empty() && plan.fits && plan.chosen.strategy.num_gpus == failed.num_gpus) {
      return Replan{std::move(pinned), std::move(plan), {}};
    }
  }
  return std::nullopt;
}

}  // namespace

Result<Replan> replan_after_oom(dsl::JobSpec spec, const OomReport& oom, const DetectedHardware& detected,
                                const PlanOptions& options) {
  const dsl::Catalog& catalog = options.catalog ? *options.catalog : dsl::Catalog::builtin();
  const Strategy& failed = oom.failed;
  // What the device really offers is what the runner was allowed: plan for
  // it as the device memory, headroom included (budget = memory * (1 - headroom)).
  const double keep = 1.0 - headroom_for(spec, failed);
  const Bytes memory(static_cast<std::int64_t>(static_cast<double>(oom.budget.count()) / keep));
  if (failed.num_gpus >= 1 && !detected.gpus.empty()) {
    spec.resources.gpu_memory = memory;
  } else {
    spec.resources.host_memory = memory;
  }
  spec.strategy.precision = failed.precision;
  // The re-plan trains what it chose: a probe's candidates were measured
  // under the budget that just ran out.
  spec.strategy.probe = 0;
  TAILOR_ASSIGN_OR_RETURN(Hardware hw,
                          resolve_hardware(spec, std::nullopt, detected.gpus, detected.host_memory, catalog));
  PlanOptions popts = options;
  std::string story = "re-planned for the measured budget of " + oom.budget.to_string();
  if (const auto& m = oom.measured;
      m && m->activations.count() > 0 && m->weights.count() > 0 && m->optimizer_states.count() > 0) {
    const Candidate est = evaluate(spec, hw, failed, popts);
    popts.memory = calibrate(popts.memory, est.memory.per_device, *m);
    story += ", memory model calibrated by the last measured step";
  }
  // First the same plan with a smaller micro-batch (the global batch kept
  // by accumulation): every other knob stays, so the checkpoint's optimizer
  // states and the run's numerics carry over.
  if (auto kept = same_knobs_smaller_micro_batch(spec, hw, failed, popts)) {
    story += "; kept every knob, micro-batch " + std::to_string(failed.micro_batch_size) + " -> " +
             std::to_string(kept->plan.chosen.strategy.micro_batch_size) + " (global batch kept by accumulation)";
    story += ": " + failed.describe() + " -> " + kept->plan.chosen.strategy.describe();
    kept->story = std::move(story);
    return std::move(*kept);
  }
  // Then a new plan that keeps the optimizer when one fits with it.
  if (!spec.strategy.optimizer) {
    dsl::JobSpec same_optimizer = spec;
    same_optimizer.strategy.optimizer = failed.optimizer;
    if (const Plan p = plan_job(same_optimizer, hw, popts); p.errors.empty() && p.fits && p.chosen.strategy != failed) {
      spec = std::move(same_optimizer);
      story += "; kept the optimizer (" + std::string(dsl::to_string(failed.optimizer)) + ")";
    }
  }
  Plan plan = plan_job(spec, hw, popts);
  // The estimate said the failed strategy fits but it did not: walk the
  // decision tree one step further by pinning it.
  for (int guard = 0; guard < 16 && plan.errors.empty() && (!plan.fits || plan.chosen.strategy == failed); ++guard) {
    const Strategy& cur = plan.chosen.strategy;
    if (cur.micro_batch_size > 1) {
      spec.training.micro_batch_size = cur.micro_batch_size / 2;
      story += "; pinned micro-batch " + std::to_string(cur.micro_batch_size / 2) + " (global batch kept by accumulation)";
    } else if (cur.checkpoint_every != 1) {
      spec.strategy.gradient_checkpointing = 1;
      story += "; pinned gradient checkpointing on every layer";
    } else {
      break;
    }
    plan = plan_job(spec, hw, popts);
  }
  if (!plan.errors.empty()) {
    std::string all;
    for (const auto& e : plan.errors) all += (all.empty() ? "" : "; ") + e;
    return Status::resource_exhausted("re-planning after out-of-memory: " + all);
  }
  if (!plan.fits || plan.chosen.strategy == failed) {
    return Status::resource_exhausted("out of memory with " + failed.describe() + " under a budget of " +
                                      oom.budget.to_string() + ", and no smaller strategy fits (" + story + ")");
  }
  story += ": " + failed.describe() + " -> " + plan.chosen.strategy.describe();
  return Replan{std::move(spec), std::move(plan), std::move(story)};
}

}  // namespace tailor::strategies
