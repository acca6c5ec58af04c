#include "strategies/candidate.h"

#include <algorithm>

#include "strategies/headroom.h"
#include "strategies/runtime_profile.h"

namespace tailor::strategies {

dsl::Reference reference_for(const dsl::JobSpec& spec, const Strategy& s) {
  if (!dsl::needs_reference(spec.training.method)) return dsl::Reference::kNone;
  if (spec.strategy.reference) return *spec.strategy.reference;
  // The model the job starts from: the base under fresh adapters (they
  // start at zero), the base with model.adapter's adapters frozen (a copy
  // the adapters' size) when it starts from a folder.
  if (s.adapter != Adapter::kNone) {
    return spec.model.adapter.empty() ? dsl::Reference::kAdapterOff : dsl::Reference::kSeparate;
  }
  // kto's KL rows change with each epoch's order: no pass before training
  // can score them.
  return spec.training.method == dsl::TrainingMethod::kKto ? dsl::Reference::kSeparate : dsl::Reference::kPrecomputed;
}

bool kl_rows_for(const dsl::JobSpec& spec) {
  return spec.training.method == dsl::TrainingMethod::kKto && dsl::has_loss(spec.training, dsl::PreferenceLoss::kKto);
}

Candidate evaluate(const dsl::JobSpec& spec, const Hardware& hw, const Strategy& strategy, const PlanOptions& o) {
  Strategy s = strategy;
  s.pairs = dsl::trains_on_pairs(spec.training.method);
  s.reference = reference_for(spec, s);
  s.kl_rows = kl_rows_for(spec);
  s.unpaired = dsl::is_labelled(spec.data);
  s.head_pass = spec.training.method == dsl::TrainingMethod::kDpo && spec.training.use_weighting;
  const bool on_cpu = hw.cpu_only();
  const Device dev = rank_device(spec, hw);
  MemoryInput in;
  in.arch = &spec.model.arch;
  in.batch = {s.micro_batch_size, spec.data.seq_len};
  in.strategy = s;
  in.lora_targets = spec.strategy.lora.targets;
  in.lora_dropout = spec.strategy.lora.dropout;
  in.on_gpu = !on_cpu;
  in.prompt_nll = spec.training.method == dsl::TrainingMethod::kOrpo;
  in.score_head = dsl::scores_sequences(spec.training.method);
  in.whole_modules = dsl::whole_modules(spec.model.arch, spec.strategy.lora.modules_to_save);
  // What the stack that will run it keeps (planner.runtime): tailor-runner
  // by default, another framework to predict its users' runs.
  const RuntimeProfile& profile = runtime_profile(spec.planner.runtime);
  apply(profile, in);
  apply_versions(spec.planner, in);
  // tailor-runner's fused kernels cover fp32 and bf16 on the CPU.
  in.fused_kernels = on_cpu && s.precision != Precision::kFp16 && spec.planner.runtime == dsl::Runtime::kTailor;
  Candidate c;
  c.strategy = s;
  c.memory = estimate_memory(in, o.memory);
  if (o.calibration && o.calibration->runs > 0 && o.calibration->memory > 1.0) {
    const double total = static_cast<double>(c.memory.per_device.total().count());
    c.memory.calibrated = Bytes(static_cast<std::int64_t>(total * (o.calibration->memory - 1.0)));
    c.memory.per_device.overhead += c.memory.calibrated;
  }
  if (!on_cpu) {
    c.reserved = reserved_peak(profile, c.memory.per_device.total(), o.memory.gpu_context_overhead,
                               s.zero_stage >= 3 && s.num_gpus > 1);
  }
  // Offloaded bytes live on every node's host, a share of the ranks each.
  if (s.num_gpus > 1 && hw.nodes > 1) c.memory.host = Bytes(c.memory.host.count() / hw.nodes);
  Device link = dev;
  if (hw.nodes > 1 && s.num_gpus > hw.gpus_per_node()) {
    link.interconnect_gbps = std::min(link.interconnect_gbps, o.cost.inter_node_gbps);
  }
  CostConstants cost = o.cost;
  if (spec.planner.runtime == dsl::Runtime::kTailor) {
    // tailor-runner's ranks on GPUs of their own move gradients and
    // parameters through NCCL (runner/torch/nccl_group.h) at the
    // interconnect's speed; on the CPU over its TCP ring at loopback speed.
    // Either way each collective is queued in the compute stream's order
    // (ZeRO-2's inside backward), so nothing hides the time.
    if (on_cpu) link.interconnect_gbps = std::min(link.interconnect_gbps, kCpuLoopbackGBps);
    cost.comm_overlap = 0;
  }
  c.throughput = estimate_throughput(spec.model.arch, s, spec.data.seq_len, spec.training.global_batch_size, link, cost);
  if (o.calibration && o.calibration->runs > 0) {
    const double f = o.calibration->speed;
    Throughput& t = c.throughput;
    for (double* seconds : {&t.compute_seconds, &t.comm_seconds, &t.offload_seconds, &t.optimizer_seconds,
                            &t.reference_seconds, &t.reference_pass_seconds, &t.step_seconds}) {
      *seconds /= f;
    }
    t.tokens_per_second *= f;
  }
  // The headroom of this kind of job (headroom.h), unless the spec sets one.
  const double keep = 1.0 - headroom_for(spec, s);
  c.budget = Bytes(static_cast<std::int64_t>(static_cast<double>(dev.memory.count()) * keep));
  // On the CPU the model and the host share one budget.
  c.host_budget = Bytes(static_cast<std::int64_t>(static_cast<double>(hw.host_memory.count()) * keep));
  c.over_budget = c.memory.per_device.total() - c.budget;
  c.host_over_budget = on_cpu ? Bytes(-1) : c.memory.host - c.host_budget;
  c.fits = c.over_budget.count() <= 0 && c.host_over_budget.count() <= 0;
  if (o.why_not_executable) c.not_executable = o.why_not_executable(s);
  return c;
}

}  // namespace tailor::strategies
