#include "runner/protocol/capabilities.h"

#include <string>

#include "dsl/technique.h"

namespace tailor::runner {

std::span<const dsl::Technique> techniques_not_in_runner() {
  static constexpr dsl::Technique kList[] = {dsl::Technique::kZero1, dsl::Technique::kZero2, dsl::Technique::kZero3,
                                             dsl::Technique::kOffloadOptimizer, dsl::Technique::kOffloadParams};
  return kList;
}

void forbid_unexecutable(dsl::JobSpec& spec) {
  for (dsl::Technique t : techniques_not_in_runner()) {
    if (!dsl::contains(spec.strategy.forbid, t)) spec.strategy.forbid.push_back(t);
  }
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

Status check_executable(const strategies::Strategy& s) {
  dsl::KnobValues v;
  v.zero_stage = s.zero_stage;
  v.offload = s.offload;
  for (dsl::Technique t : dsl::techniques_used(v)) {
    for (dsl::Technique missing : techniques_not_in_runner()) {
      if (t == missing) return Status::invalid_argument(std::string(dsl::to_string(t)) + " is not implemented yet");
    }
  }
  if (s.num_gpus > 1) return Status::invalid_argument("several GPUs (ranks) are not implemented yet");
  if (s.quantization != strategies::Quantization::kNone && s.quantization != strategies::Quantization::kNf4Double) {
    return Status::invalid_argument(std::string("base quantisation ") + strategies::to_string(s.quantization) +
                                    " is not implemented (NF4 with double quantisation is)");
  }
  return Status::ok();
}

}  // namespace tailor::runner
