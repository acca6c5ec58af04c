#include "strategies/replan.h"

namespace tailor::strategies {

Result<Replan> replan_after_oom(dsl::JobSpec spec, const OomReport& oom, const DetectedHardware& detected,
                                const PlanOptions& options) {
  const dsl::Catalog& catalog = options.catalog ? *options.catalog : dsl::Catalog::builtin();
  const Strategy& failed = oom.failed;
  // What the device really offers is what the runner was allowed: plan for
  // it as the device memory, headroom included (budget = memory * (1 - headroom)).
  const double keep = 1.0 - spec.resources.headroom;
  const Bytes memory(static_cast<std::int64_t>(static_cast<double>(oom.budget.count()) / keep));
  if (failed.num_gpus >= 1 && !detected.gpus.empty()) {
    spec.resources.gpu_memory = memory;
  } else {
    spec.resources.host_memory = memory;
  }
  spec.strategy.precision = failed.precision;
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
