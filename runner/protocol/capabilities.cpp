#include "runner/protocol/capabilities.h"

#include <string>

#include "dsl/technique.h"

namespace tailor::runner {

std::span<const dsl::Technique> techniques_not_in_runner() {
  // Every technique of the tree runs; what a build could still lack is
  // listed here, so that plans and pins keep asking.
  return {};
}

Status check_pins_executable(const dsl::JobSpec& spec) {
  const dsl::StrategySpec& s = spec.strategy;
  dsl::KnobValues pins;
  pins.zero_stage = s.zero_stage.value_or(0);
  pins.offload = s.offload;
  for (dsl::Technique t : dsl::techniques_used(pins)) {
    for (dsl::Technique missing : techniques_not_in_runner()) {
      if (t == missing) {
        return Status::invalid_argument(std::string(dsl::knob_path(dsl::knob_of(t))) + " pins " + dsl::to_string(t) +
                                        ", which tailor-runner does not implement yet");
      }
    }
  }
  return Status::ok();
}

std::string why_not_executable(const strategies::Strategy& s) {
  dsl::KnobValues v;
  v.zero_stage = s.zero_stage;
  v.offload = s.offload;
  for (dsl::Technique t : dsl::techniques_used(v)) {
    for (dsl::Technique missing : techniques_not_in_runner()) {
      if (t == missing) return std::string(dsl::to_string(t)) + " is not implemented yet";
    }
  }
  if (s.quantization != strategies::Quantization::kNone && s.quantization != strategies::Quantization::kNf4Double) {
    return std::string("base quantisation ") + strategies::to_string(s.quantization) +
           " is not implemented (NF4 with double quantisation is)";
  }
  if (s.reference == dsl::Reference::kAdapterOff && s.adapter == dsl::Adapter::kNone) {
    return "the reference adapter_off needs adapters";
  }
  if (s.reference == dsl::Reference::kSeparate && (s.adapter != dsl::Adapter::kNone || s.zero_stage == 3)) {
    return "a separate reference is built for full fine-tuning below ZeRO-3 only (precomputed works everywhere)";
  }
  return {};
}

strategies::PlanOptions runner_plan_options(const dsl::Catalog* catalog) {
  strategies::PlanOptions o;
  o.catalog = catalog;
  o.why_not_executable = why_not_executable;
  return o;
}

Status check_executable(const strategies::Strategy& s) {
  const std::string why = why_not_executable(s);
  return why.empty() ? Status::ok() : Status::invalid_argument(why);
}

}  // namespace tailor::runner
