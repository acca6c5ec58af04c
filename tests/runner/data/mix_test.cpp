// Several training datasets mixed into one store (runner/data/mix.h): the
// counts each weight asks for, the shares over batches, pairs kept whole,
// and the same mix for the same seed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runner/data/batcher.h"
#include "runner/data/byte_tokenizer.h"
#include "runner/data/mix.h"

namespace tailor::runner::data {
namespace {

using ::testing::HasSubstr;

// n documents whose first content byte names the dataset ('a' + dataset)
// and whose second and third its index, so a batch row says where it came from.
TokenStore dataset(int which, int n) {
  std::vector<Example> docs;
  for (int i = 0; i < n; ++i) {
    Example ex{{ByteTokenizer::kBos, 'a' + which, 32 + i / 90, 32 + i % 90, ByteTokenizer::kEos}, {0, 1, 1, 1, 1}};
    docs.push_back(ex);
  }
  return TokenStore::from_examples(docs);
}

std::pair<int, int> origin(const TokenStore& s, std::size_t doc) {
  const auto t = s.tokens(doc);
  return {t[1] - 'a', (t[2] - 32) * 90 + (t[3] - 32)};
}

std::vector<MixInput> inputs(std::vector<std::pair<int, double>> sizes_and_weights) {
  std::vector<MixInput> out;
  for (std::size_t i = 0; i < sizes_and_weights.size(); ++i) {
    out.push_back({"d" + std::to_string(i), sizes_and_weights[i].second,
                   dataset(static_cast<int>(i), sizes_and_weights[i].first)});
  }
  return out;
}

TEST(MixTest, ConcatTakesEachDatasetWeightTimesWholeCopiesFirst) {
  const auto in = inputs({{100, 2.0}, {40, 0.5}, {10, 1.0}});
  auto mixed = mix_datasets(in, dsl::DataMix::kConcat, 7, false);
  ASSERT_TRUE(mixed.is_ok()) << mixed.status().message();
  EXPECT_EQ(mixed->taken, (std::vector<std::int64_t>{200, 20, 10}));
  ASSERT_EQ(mixed->store.documents(), 230u);
  std::map<int, std::map<int, int>> seen;  // dataset -> record -> times
  for (std::size_t d = 0; d < mixed->store.documents(); ++d) {
    const auto [which, record] = origin(mixed->store, d);
    EXPECT_EQ(which, static_cast<int>(mixed->source[d]));
    EXPECT_EQ(record, mixed->record[d]);
    ++seen[which][record];
  }
  ASSERT_EQ(seen[0].size(), 100u);
  for (const auto& [record, times] : seen[0])
    EXPECT_EQ(times, 2) << record;
  EXPECT_EQ(seen[1].size(), 20u);  // a seeded half, each once
  for (const auto& [record, times] : seen[1])
    EXPECT_EQ(times, 1) << record;
  EXPECT_EQ(seen[2].size(), 10u);
  // The kept half is a seeded choice, not the first 20.
  int beyond_first_half = 0;
  for (const auto& [record, times] : seen[1])
    beyond_first_half += record >= 20 ? 1 : 0;
  EXPECT_GT(beyond_first_half, 0);
}

TEST(MixTest, InterleaveTakesEveryDatasetWholeInTheWeightsProportion) {
  // 1,000 and 300 examples at 1:1: the epoch ends once the larger is taken
  // whole, so the smaller is repeated to match it.
  const auto in = inputs({{1000, 1.0}, {300, 1.0}, {500, 2.0}});
  auto mixed = mix_datasets(in, dsl::DataMix::kInterleave, 7, false);
  ASSERT_TRUE(mixed.is_ok()) << mixed.status().message();
  EXPECT_EQ(mixed->taken, (std::vector<std::int64_t>{1000, 1000, 2000}));
  std::map<int, std::map<int, int>> seen;
  for (std::size_t d = 0; d < mixed->store.documents(); ++d) {
    const auto [which, record] = origin(mixed->store, d);
    ++seen[which][record];
  }
  EXPECT_EQ(seen[0].size(), 1000u);
  EXPECT_EQ(seen[1].size(), 300u);  // each taken 3 or 4 times: whole passes, then part of one
  for (const auto& [record, times] : seen[1])
    EXPECT_TRUE(times == 3 || times == 4) << record << ": " << times;
  EXPECT_EQ(seen[2].size(), 500u);
  for (const auto& [record, times] : seen[2])
    EXPECT_EQ(times, 4) << record;
  // Alternating in proportion along the mix: every window of 100 holds
  // the datasets at 1:1:2 within a few examples.
  for (std::size_t start = 0; start + 100 <= mixed->store.documents(); start += 100) {
    int counts[3] = {0, 0, 0};
    for (std::size_t d = start; d < start + 100; ++d)
      ++counts[mixed->source[d]];
    EXPECT_NEAR(counts[0], 25, 2) << start;
    EXPECT_NEAR(counts[1], 25, 2) << start;
    EXPECT_NEAR(counts[2], 50, 2) << start;
  }
}

// What training sees: 10,000 rows drawn by the batcher from an
// interleaved mix hold each dataset within 1% of its weight's share.
TEST(MixTest, InterleavedSharesHoldWithinOnePercentOverTenThousandSamples) {
  const auto in = inputs({{3000, 0.2}, {2000, 0.3}, {4000, 0.5}});
  auto mixed = mix_datasets(in, dsl::DataMix::kInterleave, 11, false);
  ASSERT_TRUE(mixed.is_ok()) << mixed.status().message();
  Batcher batcher(mixed->store, 8, dsl::Packing::kNone, dsl::LongExample::kTruncate, 16, 11, ByteTokenizer::kPad);
  std::int64_t counts[3] = {0, 0, 0}, samples = 0;
  while (samples < 10000) {
    const Batch b = batcher.next();
    for (std::int64_t r = 0; r < b.rows; ++r, ++samples) {
      ++counts[b.inputs[static_cast<std::size_t>(r * b.seq_len + 1)] - 'a'];
    }
  }
  const double shares[3] = {0.2, 0.3, 0.5};
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(static_cast<double>(counts[i]) / static_cast<double>(samples), shares[i], 0.01) << "dataset " << i;
  }
}

TEST(MixTest, TheSameSeedGivesTheSameMixAndAnotherSeedAnother) {
  const auto in = inputs({{50, 0.5}, {80, 1.5}});
  for (const auto mix : {dsl::DataMix::kConcat, dsl::DataMix::kInterleave}) {
    auto a = mix_datasets(in, mix, 1, false), b = mix_datasets(in, mix, 1, false), c = mix_datasets(in, mix, 2, false);
    ASSERT_TRUE(a.is_ok() && b.is_ok() && c.is_ok());
    EXPECT_TRUE(same_documents(a->store, b->store));
    EXPECT_FALSE(same_documents(a->store, c->store));
  }
}

TEST(MixTest, PairsStayTogetherChosenThenRejected) {
  // Documents 2p and 2p + 1 are a pair: both carry the pair's index.
  std::vector<MixInput> in;
  for (int which = 0; which < 2; ++which) {
    std::vector<Example> docs;
    for (int p = 0; p < 30; ++p) {
      for (int side = 0; side < 2; ++side) {
        docs.push_back({{ByteTokenizer::kBos, 'a' + which, 32 + p, 'c' + side * ('r' - 'c'), ByteTokenizer::kEos},
                        {0, 1, 1, 1, 1}});
      }
    }
    in.push_back({"p" + std::to_string(which), which == 0 ? 0.5 : 2.0, TokenStore::from_examples(docs)});
  }
  for (const auto mix : {dsl::DataMix::kConcat, dsl::DataMix::kInterleave}) {
    auto mixed = mix_datasets(in, mix, 3, /*pairs=*/true);
    ASSERT_TRUE(mixed.is_ok());
    ASSERT_EQ(mixed->store.documents() % 2, 0u);
    ASSERT_EQ(mixed->source.size() * 2, mixed->store.documents());
    for (std::size_t d = 0; d < mixed->store.documents(); d += 2) {
      const auto chosen = mixed->store.tokens(d), rejected = mixed->store.tokens(d + 1);
      EXPECT_EQ(chosen[1], rejected[1]);
      EXPECT_EQ(chosen[2], rejected[2]);
      EXPECT_EQ(chosen[3], 'c');
      EXPECT_EQ(rejected[3], 'r');
    }
  }
}

// Each document's value (a reward pair's margin, a kto label) goes with it
// into the mix; a dataset without values gives 0s.
TEST(MixTest, ValuesTravelWithTheirDocuments) {
  std::vector<MixInput> in = inputs({{30, 1.0}, {20, 1.5}});
  {
    const TokenStore& s = in[0].store;
    std::vector<float> values(s.documents());
    for (std::size_t d = 0; d < values.size(); ++d)
      values[d] = 1.0f + static_cast<float>(d);
    const auto tokens = s.all_tokens();
    const auto trained = s.all_trained();
    const auto offsets = s.offsets();
    in[0].store = TokenStore::from_vectors({tokens.begin(), tokens.end()}, {trained.begin(), trained.end()},
                                           {offsets.begin(), offsets.end()}, std::move(values));
  }
  for (const auto mix : {dsl::DataMix::kConcat, dsl::DataMix::kInterleave}) {
    auto mixed = mix_datasets(in, mix, 5, false);
    ASSERT_TRUE(mixed.is_ok());
    ASSERT_TRUE(mixed->store.has_values());
    for (std::size_t d = 0; d < mixed->store.documents(); ++d) {
      const auto [which, index] = origin(mixed->store, d);
      EXPECT_EQ(mixed->store.value(d), which == 0 ? 1.0f + static_cast<float>(index) : 0.0f) << d;
    }
  }
  // Without values anywhere, none.
  EXPECT_FALSE(mix_datasets(inputs({{3, 1.0}, {2, 1.0}}), dsl::DataMix::kConcat, 5, false)->store.has_values());
}

TEST(MixTest, AWeightThatTakesNothingIsAnErrorNamingTheDataset) {
  const auto in = inputs({{100, 1.0}, {3, 0.1}});
  auto mixed = mix_datasets(in, dsl::DataMix::kConcat, 1, false);
  ASSERT_FALSE(mixed.is_ok());
  EXPECT_THAT(mixed.status().message(), HasSubstr("data.train[1] (d1): weight 0.1"));
  EXPECT_THAT(mixed.status().message(), HasSubstr("takes none"));
  EXPECT_THAT(describe(*mix_datasets(inputs({{100, 1.0}, {50, 2.0}}), dsl::DataMix::kConcat, 1, false),
                       inputs({{100, 1.0}, {50, 2.0}})),
              HasSubstr("d1: 50 examples -> 100 (50.0%)"));
}

}  // namespace
}  // namespace tailor::runner::data
