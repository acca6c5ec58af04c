// What a job allows the planner to choose: its pinned knobs, its allow and
// forbid lists, the exact global batch, and what the hardware supports.
// Shared by the search and the decision tree.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dsl/job_spec.h"
#include "strategies/hardware.h"
#include "strategies/strategy.h"

namespace tailor::strategies {

class Constraints {
 public:
  Constraints(const dsl::JobSpec& spec, const Hardware& hw);

  // The techniques (dsl/technique.h) a strategy uses.
  static std::vector<dsl::Technique> techniques_of(const Strategy& s);

  // A technique the planner may add: not forbidden, and listed in allow
  // when allow is used. fp32 is the baseline and always allowed unless forbidden.
  bool allows(dsl::Technique technique) const;
  // The spec pins this knob (its techniques are then not the planner's choice).
  bool pinned(dsl::Knob knob) const;

  // The strategy respects every pin, bound and device limit.
  bool admits(const Strategy& s) const;
  // Why not (for messages); empty when admitted.
  std::string why_not(const Strategy& s) const;

  // The starting point of the decision tree: no technique, except pins.
  Strategy baseline() const;

  // Micro-batch sizes that keep the global batch exact (divisors of G/N).
  const std::vector<std::int64_t>& micro_batches() const { return micro_batches_; }
  // The same for `ranks` data-parallel ranks (divisors of G/ranks).
  std::vector<std::int64_t> micro_batches_for(std::int64_t ranks) const;
  // Rank counts a plan may use: every GPU, and one of them when there are
  // several (what a runner without rank processes can execute).
  std::vector<std::int64_t> rank_counts() const;
  std::int64_t num_gpus() const { return num_gpus_; }
  bool on_cpu() const { return on_cpu_; }
  const Device& device() const { return device_; }
  // A problem no strategy can solve (e.g. global batch not divisible by GPUs).
  const std::string& error() const { return error_; }

 private:
  // Why not, before it is a sentence: admits() asks for every candidate of
  // the search, and most are refused, so the refusal allocates nothing.
  struct Refusal {
    explicit Refusal(const char* why) : text(why) {}
    static Refusal pinned_knob(const char* label) {
      Refusal r(nullptr);
      r.pinned = label;
      return r;
    }
    static Refusal not_allowed(dsl::Technique t) {
      Refusal r(nullptr);
      r.technique = t;
      return r;
    }
    const char* text = nullptr;               // the reason, or
    const char* pinned = nullptr;             // "<this knob> is pinned", or
    std::optional<dsl::Technique> technique;  // "<this technique> is not allowed by the spec"
  };
  std::optional<Refusal> refusal(const Strategy& s) const;

  const dsl::JobSpec& spec_;
  const dsl::StrategySpec& pins_;
  const dsl::TrainingSpec& training_;
  std::int64_t num_gpus_ = 1;
  bool ranks_fixed_ = false;  // resources.ranks: exactly that many
  bool on_cpu_ = false;
  Device device_;
  std::vector<std::int64_t> micro_batches_;
  std::string error_;
};

}  // namespace tailor::strategies
