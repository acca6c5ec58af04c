// The headroom a plan keeps free of each device when the spec sets none
// (strategy.headroom): room for the memory model's measured error on that
// kind of job, so that a kind the model knows less well is planned with
// more to spare instead of a guess.
//  - tailor-runner (planner.runtime: tailor): kDefaultHeadroom, which its
//    own accuracy tests cover (docs/planner.md, "How accurate the
//    estimates are").
//  - another stack: the 90th percentile of the corpus' leave-one-source-out
//    under-estimates of its runtime, adapter and sharding, on the points
//    whose settings are all known (tests/strategies/data/peak_corpus.yaml),
//    never below the default;
//    tests/strategies/peak_corpus_test.cpp checks every row against the
//    corpus.
#pragma once

#include <string>

#include "dsl/job_spec.h"
#include "strategies/strategy.h"

namespace tailor::strategies {

struct HeadroomRow {
  dsl::Runtime runtime;
  Adapter adapter;
  bool sharded;     // parameters sharded over several GPUs (ZeRO-3, FSDP)
  double headroom;  // the fraction kept free
  int points;       // corpus points with every setting known (fewer than 3: its runtime's widest row)
  double worst = 0;  // the largest of their held-out under-estimates (0 without points)
};

// The headroom of a kind of job when the spec sets none.
const HeadroomRow& kind_headroom(dsl::Runtime runtime, Adapter adapter, bool sharded);

// The spec's headroom (strategy.headroom, or the older resources.headroom)
// when it sets one, else its kind's under strategy `s`.
double headroom_for(const dsl::JobSpec& spec, const Strategy& s);

// "18% headroom (hf, qlora, sharded: the held-out under-estimates of 38
// published peaks; the largest, 21.4% over its estimate, exceeds it)", for
// explanations: a plan says where published runs of its kind went beyond
// the margin it keeps.
std::string describe_headroom(const dsl::JobSpec& spec, const Strategy& s);

}  // namespace tailor::strategies
