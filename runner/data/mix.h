// Several training datasets (data.train as a list) made into the one store
// the batcher reads, as data.mix says. Decided once from the datasets'
// examples, the weights and a seed, so every run (and every resume) of the
// same data builds the same mix, and the batcher's (epoch, row) position is
// the whole data position.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "dsl/job_spec.h"
#include "runner/data/token_store.h"

namespace tailor::runner::data {

struct MixInput {
  std::string path;  // for errors and reports
  double weight = 1;
  TokenStore store;  // its examples: documents, or pairs of documents (pairs = true)
};

struct MixedData {
  TokenStore store;  // the mix's examples, in the mix's order
  // Per dataset: its examples, and how many the mix holds (an epoch's).
  std::vector<std::int64_t> examples, taken;
  // Per example of the mix: the dataset it comes from and its index there.
  std::vector<std::uint32_t> source;
  std::vector<std::int64_t> record;
};

// concat: dataset i's examples weight_i times (floor(weight) whole copies,
// then round(fraction x examples) of a seeded order), one dataset after
// another. interleave: each dataset taken whole at least once (Hugging Face's
// stopping_strategy "all_exhausted") in the proportion of the weights,
// counted exactly (largest remainders), each dataset's examples in seeded
// orders, a new one per pass, and the datasets alternating in proportion.
// An example is a document, or a pair of documents (chosen, rejected) with
// `pairs`, never split; each document keeps its store value (0 from a
// dataset without values, when another has them). InvalidArgument when a dataset would contribute
// nothing (a weight too small for its size), naming it.
Result<MixedData> mix_datasets(const std::vector<MixInput>& inputs, dsl::DataMix mix, std::uint64_t seed, bool pairs);

// "a.jsonl: 1,000 examples x 2 = 2,000 (66.7%); b.parquet: ..." for logs.
std::string describe(const MixedData& mixed, const std::vector<MixInput>& inputs);

}  // namespace tailor::runner::data
