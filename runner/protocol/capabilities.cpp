#include "runner/protocol/capabilities.h"

#include <string>

#include "dsl/technique.h"
#include "strategies/constraints.h"

namespace tailor::runner {
namespace {

// The bases QLoRA's linears are built for (runner/torch/nf4.h).
bool quantization_runs(dsl::Quantization q) {
  return q == dsl::Quantization::kNone || q == dsl::Quantization::kNf4 || q == dsl::Quantization::kNf4Double;
}
constexpr const char* kQuantizationsThatRun = "none, nf4 and nf4-double-quant";

}  // namespace

std::span<const dsl::Technique> techniques_not_in_runner() {
  // Every technique of the tree runs; what a build could still lack is
  // listed here, so that plans and pins keep asking.
  return {};
}

Status check_pins_executable(const dsl::JobSpec& spec) {
  const dsl::StrategySpec& s = spec.strategy;
  if (s.quantization && !quantization_runs(*s.quantization)) {
    return Status::invalid_argument(std::string("strategy.quantization pins ") + dsl::to_string(*s.quantization) +
                                    ", which tailor-runner does not implement (" + kQuantizationsThatRun + " run)");
  }
  for (dsl::Technique t : dsl::techniques_used(dsl::pinned_knob_values(s))) {
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
  for (dsl::Technique t : strategies::Constraints::techniques_of(s)) {
    for (dsl::Technique missing : techniques_not_in_runner()) {
      if (t == missing) return std::string(dsl::to_string(t)) + " is not implemented yet";
    }
  }
  if (!quantization_runs(s.quantization)) {
    return std::string("base quantisation ") + dsl::to_string(s.quantization) + " is not implemented (" +
           kQuantizationsThatRun + " are)";
  }
  if (s.reference == dsl::Reference::kAdapterOff && s.adapter == dsl::Adapter::kNone) {
    return "the reference adapter_off needs adapters";
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
