// runner/io/logp_cache.h: a pair's key from its rows alone (not the batch
// around it), the file read back as written, and every damaged or foreign
// file detected and reported, never used.
#include "runner/io/logp_cache.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "runner/data/batcher.h"
#include "tests/testing/temp_dir.h"

namespace tailor::runner::io {
namespace {

using tailor::testing::TempDir;
namespace fs = std::filesystem;

// Pairs of short documents: BOS, a prompt token (untrained), completion tokens, EOS.
std::vector<data::Example> pairs(int n) {
  std::vector<data::Example> out;
  for (int p = 0; p < n; ++p) {
    for (int which = 0; which < 2; ++which) {
      data::Example e;
      e.tokens = {1, 10 + p};
      for (int t = 0; t <= p % 3 + which; ++t) e.tokens.push_back(100 + 7 * p + t + 50 * which);
      e.tokens.push_back(2);
      e.trained.assign(e.tokens.size(), 1);
      e.trained[0] = e.trained[1] = 0;
      out.push_back(e);
    }
  }
  return out;
}

data::Batcher pair_batcher(int n, std::int64_t micro, std::uint64_t seed) {
  return data::Batcher(data::TokenStore::from_examples(pairs(n)), 16, dsl::Packing::kNone, dsl::LongExample::kTruncate,
                       micro, seed, /*pad_id=*/0, /*pairs=*/true);
}

// Keys of every pair a pass yields, by the pair's first token after its prompt.
std::map<std::int32_t, std::uint64_t> keys_of(data::Batcher& b) {
  std::map<std::int32_t, std::uint64_t> out;
  for (std::int64_t k = 0; k < b.batches_per_epoch(); ++k) {
    const data::Batch batch = b.pass_batch(k);
    for (std::int64_t p = 0; p < batch.rows / 2; ++p) {
      out[batch.inputs[static_cast<std::size_t>(p * batch.seq_len + 1)]] = pair_key(batch, p);
    }
  }
  return out;
}

// The same pair in batches of other sizes, padded to other lengths and in
// another order, has the same key; different pairs have different keys.
TEST(LogpCacheTest, APairsKeyDependsOnItsRowsNotOnTheBatch) {
  data::Batcher ones = pair_batcher(9, 1, 1), fours = pair_batcher(9, 4, 2);
  const auto a = keys_of(ones), b = keys_of(fours);
  ASSERT_EQ(a.size(), 9u);
  EXPECT_EQ(a, b);
  std::set<std::uint64_t> distinct;
  for (const auto& [first, key] : a) distinct.insert(key);
  EXPECT_EQ(distinct.size(), 9u);
  // A training batch (shuffled, spanning epochs) gives the same keys.
  data::Batcher train = pair_batcher(9, 4, 3);
  for (int i = 0; i < 5; ++i) {
    const data::Batch batch = train.next();
    for (std::int64_t p = 0; p < batch.rows / 2; ++p) {
      EXPECT_EQ(pair_key(batch, p), a.at(batch.inputs[static_cast<std::size_t>(p * batch.seq_len + 1)]));
    }
  }
  // Swapping chosen and rejected makes another pair.
  data::Batch batch = ones.pass_batch(0);
  data::Batch swapped = batch;
  const std::size_t T = static_cast<std::size_t>(batch.seq_len);
  for (auto* v : {&swapped.inputs, &swapped.targets, &swapped.positions, &swapped.segment_ids}) {
    std::swap_ranges(v->begin(), v->begin() + static_cast<std::ptrdiff_t>(T), v->begin() + static_cast<std::ptrdiff_t>(T));
  }
  EXPECT_NE(pair_key(swapped, 0), pair_key(batch, 0));
}

LogpTable some_table() {
  LogpTable t;
  for (std::uint64_t k = 0; k < 100; ++k) t[k * 0x9e3779b97f4a7c15ULL] = {-1.5f * static_cast<float>(k), -0.25f - k};
  t[7] = {-0.0f, -1e-30f};
  return t;
}

TEST(LogpCacheTest, AFileReadsBackAsWrittenAndAMissingOneIsEmpty) {
  TempDir dir;
  const std::string identity = "weights 0123\nfamily llama\n";
  const std::string file = logp_cache_file(dir.file("cache"), identity);
  EXPECT_EQ(fs::path(file).parent_path(), fs::path(dir.file("cache")));
  EXPECT_NE(file, logp_cache_file(dir.file("cache"), identity + "dtype bf16\n"));
  const LoadedLogps missing = read_logp_cache(file, identity);
  EXPECT_TRUE(missing.table.empty());
  EXPECT_EQ(missing.problem, "");
  const LogpTable t = some_table();
  ASSERT_TRUE(write_logp_cache(file, identity, t).is_ok());  // creates the folder
  const LoadedLogps back = read_logp_cache(file, identity);
  EXPECT_EQ(back.problem, "");
  EXPECT_EQ(back.table, t);
  EXPECT_EQ(fs::file_size(file), 64u + 32u + 16u * t.size());
  // Nothing but the file is left in the folder.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.file("cache")), fs::directory_iterator()), 1);
  // Rewritten with more pairs: the new file whole.
  LogpTable more = t;
  more[12345] = {-3.0f, -4.0f};
  ASSERT_TRUE(write_logp_cache(file, identity, more).is_ok());
  EXPECT_EQ(read_logp_cache(file, identity).table, more);
}

std::string bytes_of(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void put(const std::string& file, const std::string& bytes) {
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
}

// Cut at every length, one byte flipped anywhere, another reference's key:
// each is reported and nothing of it is used.
TEST(LogpCacheTest, DamagedOrForeignFilesAreReportedAndNeverUsed) {
  TempDir dir;
  const std::string identity = "weights abcd\n";
  const std::string file = dir.file("r.logps");
  ASSERT_TRUE(write_logp_cache(file, identity, some_table()).is_ok());
  const std::string good = bytes_of(file);
  for (std::size_t n = 0; n < good.size(); n += (n < 80 ? 1 : 13)) {
    put(file, good.substr(0, n));
    const LoadedLogps got = read_logp_cache(file, identity);
    EXPECT_TRUE(got.table.empty()) << "cut at " << n;
    EXPECT_NE(got.problem, "") << "cut at " << n;
  }
  for (std::size_t at = 0; at < good.size(); at += (at < 80 ? 1 : 29)) {
    if (at >= 48 && at < 56) continue;  // the reserved word is not read
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x10);
    put(file, bad);
    const LoadedLogps got = read_logp_cache(file, identity);
    EXPECT_TRUE(got.table.empty()) << "byte " << at;
    EXPECT_NE(got.problem, "") << "byte " << at;
  }
  put(file, good + "x");
  EXPECT_NE(read_logp_cache(file, identity).problem.find("truncated or extended"), std::string::npos);
  put(file, good);
  const LoadedLogps foreign = read_logp_cache(file, "weights abce\n");
  EXPECT_TRUE(foreign.table.empty());
  EXPECT_EQ(foreign.problem, "written for another reference (its key differs)");
  EXPECT_TRUE(read_logp_cache(file, "weights abcd").table.empty());  // a prefix of the key is another key
  EXPECT_EQ(read_logp_cache(file, identity).table, some_table());
}

TEST(LogpCacheTest, AFolderThatCannotBeMadeIsAnErrorNamingIt) {
  TempDir dir;
  put(dir.file("plain"), "a file, not a folder");
  const Status s = write_logp_cache(dir.file("plain") + "/r.logps", "k", some_table());
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find(dir.file("plain")), std::string::npos) << s.message();
}

}  // namespace
}  // namespace tailor::runner::io
