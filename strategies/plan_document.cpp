#include "strategies/plan_document.h"

#include "core/json_writer.h"
#include "dsl/spec_fields.h"
#include "dsl/yaml_tree.h"

namespace tailor::strategies {
namespace {

void write_strategy(JsonWriter& w, const Strategy& s) {
  w.begin_object();
  w.field("precision", dsl::to_string(s.precision));
  w.field("gradient_checkpointing", s.checkpoint_every);
  w.field("micro_batch_size", s.micro_batch_size);
  w.field("gradient_accumulation_steps", s.grad_accumulation);
  w.field("adapter", dsl::to_string(s.adapter));
  w.field("lora_rank", s.lora_rank);
  w.field("quantization", to_string(s.quantization));
  w.field("optimizer", dsl::to_string(s.optimizer));
  w.field("zero_stage", s.zero_stage);
  w.field("offload", dsl::to_string(s.offload));
  w.field("num_gpus", s.num_gpus);
  w.field("attention", to_string(s.attention));
  w.field("cross_entropy", to_string(s.cross_entropy));
  if (s.pairs) w.field("pairs", true);
  if (s.reference != Reference::kNone) w.field("reference", dsl::to_string(s.reference));
  if (s.kl_rows) w.field("kl_rows", true);
  if (s.unpaired) w.field("unpaired", true);
  if (s.head_pass) w.field("head_pass", true);
  if (s.activation_offload) w.field("activation_offload", true);
  w.end_object();
}

}  // namespace

void write_memory_breakdown(JsonWriter& w, const MemoryBreakdown& m) {
  for (const MemoryComponent& c : kMemoryComponents) w.field(c.key, (m.*c.member).count());
  w.field("overlap", m.overlap.count());
  w.field("total", m.total().count());
}

namespace {

void write_throughput(JsonWriter& w, const Throughput& t) {
  w.begin_object();
  w.field("step_seconds", t.step_seconds);
  w.field("tokens_per_second", t.tokens_per_second);
  w.field("flops_per_token", t.flops_per_token);
  w.field("model_flops_per_token", t.model_flops_per_token);
  w.field("compute_seconds", t.compute_seconds);
  w.field("comm_seconds", t.comm_seconds);
  w.field("offload_seconds", t.offload_seconds);
  w.field("optimizer_seconds", t.optimizer_seconds);
  if (t.reference_seconds > 0) w.field("reference_seconds", t.reference_seconds);
  if (t.reference_pass_seconds > 0) w.field("reference_pass_seconds", t.reference_pass_seconds);
  w.end_object();
}

void write_alternative(JsonWriter& w, const Alternative& a) {
  w.begin_object();
  w.field("summary", a.candidate.strategy.describe());
  w.key("strategy");
  write_strategy(w, a.candidate.strategy);
  w.field("fits", a.candidate.fits);
  w.field("executable", a.candidate.executable());
  if (!a.candidate.executable()) w.field("not_executable", a.candidate.not_executable);
  w.field("total_per_gpu", a.candidate.memory.per_device.total().count());
  w.field("spare_per_gpu", a.candidate.spare().count());
  w.field("host_total", a.candidate.memory.host.count());
  w.field("tokens_per_second", a.candidate.throughput.tokens_per_second);
  w.field("step_seconds", a.candidate.throughput.step_seconds);
  w.field("why", a.why);
  w.end_object();
}

// strategy.probe: what to measure, each candidate with what the plan
// predicts for it (the runner adds what it measured: runner/protocol/probe.h).
void write_probe_request(JsonWriter& w, const Plan& plan) {
  w.key("probe").begin_object();
  w.field("requested", plan.probe_requested);
  w.field("warmup_steps", kProbeWarmupSteps);
  w.field("timed_steps", kProbeTimedSteps);
  w.field("min_timed_seconds", kProbeMinTimedSeconds);
  w.field("max_timed_steps", kProbeMaxTimedSteps);
  w.field("tie_band", kProbeTieBand);
  if (!plan.probe_limited.empty()) w.field("limited", plan.probe_limited);
  w.key("candidates").begin_array();
  for (const Candidate& c : plan.probe_candidates) {
    w.begin_object();
    w.field("summary", c.strategy.describe());
    w.key("strategy");
    write_strategy(w, c.strategy);
    w.field("fidelity_factor", 1.0 / (1.0 + plan.probe_fidelity_margin * fidelity_cost(c.strategy)));
    w.key("per_gpu").begin_object();
    write_memory_breakdown(w, c.memory.per_device);
    w.end_object();
    w.field("spare_per_gpu", c.spare().count());
    w.field("reserved_per_gpu", c.reserved.count());
    w.field("host_total", c.memory.host.count());
    w.key("throughput");
    write_throughput(w, c.throughput);
    w.end_object();
  }
  w.end_array();
  w.end_object();
}

}  // namespace

std::string plan_to_json(const Plan& plan, const dsl::JobSpec& spec) {
  JsonWriter w;
  w.begin_object();
  w.field("schema_version", kPlanSchemaVersion);
  w.field("fits", plan.fits);
  w.key("job").begin_object();
  w.field("name", spec.name);
  w.field("spec_file", spec.source_file);
  w.field("model", spec.model.preset.empty() ? spec.model.path : spec.model.preset);
  w.field("parameters", spec.model.arch.parameter_count());
  w.field("seq_len", plan.seq_len);
  w.field("global_batch_size", plan.global_batch);
  const dsl::Packing packing = dsl::packing_of(spec.data);
  w.field("packing", dsl::to_string(packing));
  w.field("packing_description", dsl::describe(packing));
  w.field("on_long_example", dsl::to_string(spec.data.on_long_example));
  w.end_object();
  w.key("hardware").begin_object();
  w.field("source", plan.hardware.source);
  w.field("device", plan.on_cpu ? std::string("cpu") : plan.hardware.gpus.front().name);
  w.field("num_gpus", plan.hardware.gpu_count());
  w.field("nodes", plan.hardware.nodes);
  w.field("memory_per_device", (plan.on_cpu ? plan.hardware.host_memory : plan.hardware.gpus.front().memory).count());
  w.field("host_memory", plan.hardware.host_memory.count());
  w.end_object();
  // Where this plan's measurements calibrate later plans (calibration.h).
  const CalibrationKey machine = calibration_key(spec, plan.hardware);
  w.key("calibration_key").begin_object();
  w.field("machine", machine.machine).field("runtime", machine.runtime).field("family", machine.family);
  w.end_object();
  w.key("errors").begin_array();
  for (const std::string& e : plan.errors) w.value(e);
  w.end_array();
  if (!plan.errors.empty()) {
    w.end_object();
    return w.str() + "\n";
  }
  w.field("summary", plan.chosen.strategy.describe());
  w.key("strategy");
  write_strategy(w, plan.chosen.strategy);
  w.key("memory").begin_object();
  w.key("per_gpu").begin_object();
  write_memory_breakdown(w, plan.chosen.memory.per_device);
  w.end_object();
  w.field("budget_per_gpu", plan.budget_per_device.count());
  w.field("spare_per_gpu", plan.chosen.spare().count());
  w.field("reserved_per_gpu", plan.chosen.reserved.count());
  w.field("runtime", dsl::to_string(spec.planner.runtime));
  if (!spec.planner.transformers.empty()) w.field("transformers", spec.planner.transformers);
  w.field("headroom", plan.headroom);
  w.field("host_total", plan.chosen.memory.host.count());
  w.field("host_budget", plan.host_budget.count());
  w.field("trainable_parameters", plan.chosen.memory.trainable_parameters);
  // Another stack's ZeRO-3 as FSDP1 runs it: its root unit, in the overhead.
  if (plan.chosen.memory.root_unit.count() > 0)
    w.field("fsdp1_root_unit_per_gpu", plan.chosen.memory.root_unit.count());
  // The components' keys and words in order, so readers (the web UI) need
  // no list of their own.
  w.key("components").begin_array();
  for (const MemoryComponent& c : kMemoryComponents) w.begin_object().field("key", c.key).field("label", c.label).end_object();
  w.end_array();
  // The terms whose size rests on measurement (measured_corrections.h).
  w.key("corrections").begin_array();
  for (const CorrectionTerm& t : plan.chosen.memory.corrections) {
    const CorrectionInfo& info = correction_info(t.id);
    w.begin_object();
    w.field("key", info.key);
    w.field("component", info.component);
    w.field("bytes", t.bytes.count());
    w.field("source", info.source);
    w.end_object();
  }
  w.end_array();
  w.end_object();
  w.key("throughput");
  write_throughput(w, plan.chosen.throughput);
  w.key("decisions").begin_array();
  for (const Decision& d : plan.decisions) {
    w.begin_object();
    w.field("step", d.step);
    w.field("question", d.question);
    w.field("verdict", to_string(d.verdict));
    w.field("fits", d.fits);
    w.field("bytes_needed", d.needed.count());
    w.field("budget", d.budget.count());
    w.field("saved", d.saved.count());
    if (d.host_budget.count() > 0) {
      w.field("host_bytes_needed", d.host_needed.count());
      w.field("host_budget", d.host_budget.count());
    }
    w.field("change", d.change);
    w.field("reason", d.reason);
    w.field("answer", d.answer());
    w.field("action", d.action());
    w.end_object();
  }
  w.end_array();
  w.key("alternatives").begin_array();
  for (const Alternative& a : plan.alternatives) write_alternative(w, a);
  w.end_array();
  for (const auto& [key, alt] : {std::pair{"preferred_if_executable", &plan.preferred_if_executable},
                                 std::pair{"fastest_by_estimate", &plan.fastest_by_estimate},
                                 std::pair{"with_activation_offload", &plan.with_activation_offload}}) {
    w.key(key);
    if (*alt) {
      write_alternative(w, **alt);
    } else {
      w.null();
    }
  }
  w.key("advice").begin_array();
  for (const PinAdvice& a : plan.advice) {
    w.begin_object();
    w.field("unpin", dsl::knob_path(a.knob));
    w.field("summary", a.candidate.strategy.describe());
    w.field("bytes_per_gpu", a.candidate.memory.per_device.total().count());
    w.field("tokens_per_second", a.candidate.throughput.tokens_per_second);
    w.field("fits", a.candidate.fits);
    w.field("text", a.text);
    w.end_object();
  }
  w.end_array();
  if (!plan.fits) {
    w.field("reason", plan.no_fit_reason());
    w.field("shortfall_bytes", plan.shortfall.count());
    w.field("host_shortfall_bytes", plan.host_shortfall.count());
    if (plan.smallest_fitting_gpu.empty()) {
      w.key("smallest_fitting_gpus").null();
    } else {
      w.field("smallest_fitting_gpus", plan.smallest_fitting_gpu);
    }
  }
  if (plan.probe_requested > 0) write_probe_request(w, plan);
  if (plan.calibration) {
    w.key("calibration").begin_object();
    w.field("key", plan.calibration->key);
    w.field("runs", static_cast<std::int64_t>(plan.calibration->runs));
    w.field("busy_runs", static_cast<std::int64_t>(plan.calibration->busy));
    w.field("memory_factor", plan.calibration->memory);
    w.field("speed_factor", plan.calibration->speed);
    w.field("calibrated_bytes", plan.chosen.memory.calibrated.count());
    w.end_object();
  }
  w.key("spec");
  w.raw(dsl::emit_json(dsl::write_job_spec(spec), 0));
  w.end_object();
  return w.str() + "\n";
}

}  // namespace tailor::strategies
