// The knobs a spec pins and a strategy decides, as one list of rows: each
// names the knob (dsl::Knob; its spec path is dsl::knob_path), the words
// of its "is pinned" line, where a spec pins it and where a strategy holds
// it. Pins, why-not lines, the baseline, unpinning for advice and comparing
// two strategies are loops over these rows (constraints.cpp, planner.cpp),
// and the search enumerates each enum knob's values from its name table
// (dsl/technique.h), so a new value is planned without touching either.
#pragma once

#include <cstdint>
#include <optional>
#include <tuple>

#include "dsl/job_spec.h"
#include "strategies/strategy.h"

namespace tailor::strategies {

template <class Part, class T>
struct KnobRow {
  dsl::Knob knob;
  const char* label;                 // "precision": "precision is pinned"
  Part dsl::JobSpec::*part;          // the spec section that pins it
  std::optional<T> Part::*pin;       // the pin in that section; unset: the planner's choice
  T Strategy::*value;                // the strategy's decision

  const std::optional<T>& pinned_in(const dsl::JobSpec& spec) const { return spec.*part.*pin; }
  std::optional<T>& pinned_in(dsl::JobSpec& spec) const { return spec.*part.*pin; }
};

// In the order why-not lines are checked.
inline const auto kKnobRows = std::make_tuple(
    KnobRow<dsl::StrategySpec, Precision>{dsl::Knob::kPrecision, "precision", &dsl::JobSpec::strategy,
                                          &dsl::StrategySpec::precision, &Strategy::precision},
    KnobRow<dsl::StrategySpec, std::int64_t>{dsl::Knob::kCheckpointing, "checkpointing", &dsl::JobSpec::strategy,
                                             &dsl::StrategySpec::gradient_checkpointing, &Strategy::checkpoint_every},
    KnobRow<dsl::StrategySpec, Adapter>{dsl::Knob::kAdapter, "adapter", &dsl::JobSpec::strategy,
                                        &dsl::StrategySpec::adapter, &Strategy::adapter},
    KnobRow<dsl::StrategySpec, Quantization>{dsl::Knob::kQuantization, "quantization", &dsl::JobSpec::strategy,
                                             &dsl::StrategySpec::quantization, &Strategy::quantization},
    KnobRow<dsl::StrategySpec, Optimizer>{dsl::Knob::kOptimizer, "optimizer", &dsl::JobSpec::strategy,
                                          &dsl::StrategySpec::optimizer, &Strategy::optimizer},
    KnobRow<dsl::StrategySpec, std::int64_t>{dsl::Knob::kZeroStage, "zero_stage", &dsl::JobSpec::strategy,
                                             &dsl::StrategySpec::zero_stage, &Strategy::zero_stage},
    KnobRow<dsl::StrategySpec, Offload>{dsl::Knob::kOffload, "offload", &dsl::JobSpec::strategy,
                                        &dsl::StrategySpec::offload, &Strategy::offload},
    KnobRow<dsl::TrainingSpec, std::int64_t>{dsl::Knob::kMicroBatch, "micro-batch", &dsl::JobSpec::training,
                                             &dsl::TrainingSpec::micro_batch_size, &Strategy::micro_batch_size});

// Calls f(row) for each row, in kKnobRows' order.
template <class F>
void for_each_knob(F&& f) {
  std::apply([&](const auto&... row) { (f(row), ...); }, kKnobRows);
}

// The values a search tries for an enum knob: every name it has.
template <class E>
std::vector<E> every_value() {
  std::vector<E> out;
  for (const auto& [v, name] : dsl::enum_names<E>()) out.push_back(v);
  return out;
}

}  // namespace tailor::strategies
