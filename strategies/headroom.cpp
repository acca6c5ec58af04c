#include "strategies/headroom.h"

#include <cstdio>
#include <iterator>
#include <string>

namespace tailor::strategies {
namespace {

using dsl::Runtime;

// From peak_corpus_test's "headroom by kind" table (the corpus of
// 2026-11-30: 289 points, 128 of them with every setting known, which are
// the ones counted here; estimates of 2026-12-03, with FSDP1's held
// reentrant checkpoints and Answer.AI's held output logits): each row the kind's 90th-percentile held-out
// under-estimate, rounded up to the next percent, at least the default, and
// the largest of them (to a tenth of a percent). A kind with fewer than 3
// such points takes its runtime's widest row.
constexpr HeadroomRow kRows[] = {
    // runtime, adapter, sharded, headroom, points, worst
    {Runtime::kHf, Adapter::kNone, false, 0.10, 4, 0.000},
    {Runtime::kHf, Adapter::kNone, true, 0.10, 8, 0.098},
    {Runtime::kHf, Adapter::kLora, false, 0.10, 7, 0.000},
    {Runtime::kHf, Adapter::kLora, true, 0.10, 23, 0.031},
    {Runtime::kHf, Adapter::kQlora, false, 0.10, 15, 0.116},
    {Runtime::kHf, Adapter::kQlora, true, 0.10, 38, 0.116},
    {Runtime::kTorchtune, Adapter::kNone, false, 0.10, 0, 0.000},
    {Runtime::kTorchtune, Adapter::kNone, true, 0.10, 0, 0.000},
    {Runtime::kTorchtune, Adapter::kLora, false, 0.10, 0, 0.000},
    {Runtime::kTorchtune, Adapter::kLora, true, 0.10, 0, 0.000},
    {Runtime::kTorchtune, Adapter::kQlora, false, 0.10, 0, 0.000},
    {Runtime::kTorchtune, Adapter::kQlora, true, 0.10, 0, 0.000},
    {Runtime::kLitgpt, Adapter::kNone, false, 0.10, 0, 0.000},
    {Runtime::kLitgpt, Adapter::kNone, true, 0.10, 0, 0.000},
    {Runtime::kLitgpt, Adapter::kLora, false, 0.10, 10, 0.071},
    {Runtime::kLitgpt, Adapter::kLora, true, 0.10, 10, 0.036},
    {Runtime::kLitgpt, Adapter::kQlora, false, 0.10, 12, 0.067},
    {Runtime::kLitgpt, Adapter::kQlora, true, 0.10, 0, 0.000},
    {Runtime::kTorchtitan, Adapter::kNone, false, 0.10, 0, 0.000},
    {Runtime::kTorchtitan, Adapter::kNone, true, 0.10, 1, 0.000},
    {Runtime::kTorchtitan, Adapter::kLora, false, 0.10, 0, 0.000},
    {Runtime::kTorchtitan, Adapter::kLora, true, 0.10, 0, 0.000},
    {Runtime::kTorchtitan, Adapter::kQlora, false, 0.10, 0, 0.000},
    {Runtime::kTorchtitan, Adapter::kQlora, true, 0.10, 0, 0.000},
};

// tailor-runner's: every kind measured against the runner itself.
constexpr HeadroomRow kTailor[] = {
    {Runtime::kTailor, Adapter::kNone, false, dsl::kDefaultHeadroom, 0},
};

}  // namespace

const HeadroomRow& kind_headroom(Runtime runtime, Adapter adapter, bool sharded) {
  for (const HeadroomRow& r : kRows) {
    if (r.runtime == runtime && r.adapter == adapter && r.sharded == sharded) return r;
  }
  return kTailor[0];
}

double headroom_for(const dsl::JobSpec& spec, const Strategy& s) {
  if (spec.strategy.headroom) return *spec.strategy.headroom;
  if (spec.resources.headroom) return *spec.resources.headroom;
  return kind_headroom(spec.planner.runtime, s.adapter, s.zero_stage >= 3 && s.num_gpus > 1).headroom;
}

std::string describe_headroom(const dsl::JobSpec& spec, const Strategy& s) {
  char buf[256];
  if (spec.strategy.headroom || spec.resources.headroom) {
    std::snprintf(buf, sizeof buf, "%.0f%% headroom (the spec's)", 100 * headroom_for(spec, s));
    return buf;
  }
  const bool sharded = s.zero_stage >= 3 && s.num_gpus > 1;
  const HeadroomRow& r = kind_headroom(spec.planner.runtime, s.adapter, sharded);
  if (spec.planner.runtime == Runtime::kTailor) {
    std::snprintf(buf, sizeof buf, "%.0f%% headroom (tailor-runner's measured error)", 100 * r.headroom);
    return buf;
  }
  std::string why = r.points >= 3 ? "the held-out under-estimates of " + std::to_string(r.points) + " published peaks"
                                  : std::string("too few published peaks of its own: its runtime's widest");
  if (r.points >= 3 && r.worst > r.headroom) {
    // A published run of this kind the model does not explain: said, not hidden in the margin.
    char worst[96];
    std::snprintf(worst, sizeof worst, "; the largest, %.1f%% over its estimate, exceeds it", 100 * r.worst);
    why += worst;
  }
  std::snprintf(buf, sizeof buf, "%.0f%% headroom (%s, %s, %s: %s)", 100 * r.headroom,
                dsl::to_string(spec.planner.runtime), dsl::to_string(s.adapter), sharded ? "sharded" : "unsharded",
                why.c_str());
  return buf;
}

}  // namespace tailor::strategies
