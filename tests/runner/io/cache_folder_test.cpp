// runner/io/cache_folder.h: a real cache folder, filled by the token cache
// and the reference cache as jobs fill it, listed with what each entry
// holds, and pruned least recently used first by each rule, removing only
// Tailor's files and never a writer's file still in use.
#include "runner/io/cache_folder.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <set>
#include <string>

#include "runner/data/byte_tokenizer.h"
#include "runner/data/token_cache.h"
#include "runner/io/logp_cache.h"
#include "tests/testing/temp_dir.h"

namespace tailor::runner::io {
namespace {

using tailor::testing::TempDir;
namespace fs = std::filesystem;

constexpr std::int64_t kSecond = 1'000'000'000, kDay = 86400 * kSecond;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Sets `file`'s modification time `ago_ns` before now.
void used_ago(const std::string& file, std::int64_t ago_ns) {
  const std::int64_t t = now_ns() - ago_ns;
  const timespec times[2] = {{t / kSecond, t % kSecond}, {t / kSecond, t % kSecond}};
  ASSERT_EQ(::utimensat(AT_FDCWD, file.c_str(), times, 0), 0) << file;
}

dsl::DataSpec text_spec() {
  dsl::DataSpec spec;
  spec.format = dsl::DataFormat::kText;
  return spec;
}

// A cache as jobs leave it: two data files tokenized (`big` holds more
// documents), a reference's pairs, a damaged entry, a writer's file of
// now and one of two hours ago, and a file of someone else's.
struct Folder {
  TempDir dir;
  std::string cache, big, small, big_entry, small_entry, reference, damaged, fresh_part, stale_part, foreign;

  Folder() {
    cache = dir.file("cache");
    std::string text;
    for (int i = 0; i < 50; ++i)
      text += "document number " + std::to_string(i) + " of the larger file\n\n";
    big = dir.write("big.txt", text);
    small = dir.write("small.txt", "one short document\n");
    big_entry = tokenize(big);
    small_entry = tokenize(small);
    reference = logp_cache_file(cache, "tailor reference log-probabilities\nweights 0123456789abcdef\ndtype float\n");
    LogpTable table;
    for (std::uint64_t k = 1; k <= 7; ++k)
      table[k] = {-1.0f * static_cast<float>(k), -2.0f};
    EXPECT_TRUE(write_logp_cache(reference,
                                 "tailor reference log-probabilities\nweights 0123456789abcdef\ndtype "
                                 "float\n",
                                 table)
                    .is_ok());
    damaged = dir.write("cache/tokens-00000000deadbeef.bin",
                        "not an entry at all, but long enough to have a header "
                        "of sixty-four bytes and then some more\n");
    fresh_part = dir.write("cache/tokens-0000000000000001.bin.tmp-Ab12Cd", "half written");
    stale_part = dir.write("cache/reference-0000000000000002.logps.part-4242", "left behind");
    foreign = dir.write("cache/notes.txt", "the user's own file");
    used_ago(fresh_part, 10 * kSecond);
    used_ago(stale_part, 2 * 3600 * kSecond);
  }

  std::string tokenize(const std::string& path) {
    auto r = data::load_tokenized(path, text_spec(), data::ByteTokenizer(), cache);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r->source, data::TokenizedData::Source::kTokenized);
    return r->cache_file;
  }

  const CacheEntry* find(const std::vector<CacheEntry>& entries, const std::string& file) const {
    for (const auto& e : entries) {
      if (e.file == file) return &e;
    }
    return nullptr;
  }
};

std::set<std::string> files_of(const std::vector<PrunedEntry>& removed) {
  std::set<std::string> out;
  for (const auto& r : removed)
    out.insert(r.entry.file);
  return out;
}

TEST(CacheFolderTest, ListsWhatEachEntryHoldsMostRecentlyUsedFirst) {
  Folder f;
  used_ago(f.big_entry, 3 * kDay);
  used_ago(f.small_entry, 2 * kDay);
  used_ago(f.reference, 1 * kDay);
  used_ago(f.damaged, 4 * kDay);
  auto entries = list_cache(f.cache);
  ASSERT_TRUE(entries.is_ok()) << entries.status().message();
  ASSERT_EQ(entries->size(), 6u);  // not notes.txt
  EXPECT_EQ(f.find(*entries, f.foreign), nullptr);

  const CacheEntry* big = f.find(*entries, f.big_entry);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->kind, CacheEntryKind::kTokens);
  EXPECT_EQ(big->data_path, fs::absolute(f.big).string());
  EXPECT_FALSE(big->data_missing);
  EXPECT_EQ(big->documents, 50u);
  EXPECT_EQ(big->bytes, fs::file_size(f.big_entry));
  EXPECT_TRUE(big->problem.empty()) << big->problem;
  auto loaded = data::load_tokenized(f.big, text_spec(), data::ByteTokenizer(), "");
  ASSERT_TRUE(loaded.is_ok());
  EXPECT_EQ(big->tokens, static_cast<std::uint64_t>(loaded->store.total_tokens()));

  const CacheEntry* reference = f.find(*entries, f.reference);
  ASSERT_NE(reference, nullptr);
  EXPECT_EQ(reference->kind, CacheEntryKind::kReference);
  EXPECT_EQ(reference->pairs, 7u);
  EXPECT_EQ(reference->reference, "weights 0123456789abcdef, dtype float");

  const CacheEntry* damaged = f.find(*entries, f.damaged);
  ASSERT_NE(damaged, nullptr);
  EXPECT_EQ(damaged->problem, "not a token cache entry");
  ASSERT_NE(f.find(*entries, f.fresh_part), nullptr);
  EXPECT_EQ(f.find(*entries, f.fresh_part)->kind, CacheEntryKind::kPartial);

  // Most recently used first: the writers' files, the reference, small, big, damaged.
  std::vector<std::string> order;
  for (const auto& e : *entries)
    order.push_back(e.file);
  EXPECT_EQ(order,
            (std::vector<std::string>{f.fresh_part, f.stale_part, f.reference, f.small_entry, f.big_entry, f.damaged}));

  // A job that reads an entry makes it the most recently used.
  auto hit = data::load_tokenized(f.big, text_spec(), data::ByteTokenizer(), f.cache);
  ASSERT_TRUE(hit.is_ok());
  EXPECT_EQ(hit->source, data::TokenizedData::Source::kCache);
  auto again = list_cache(f.cache);
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again->front().file, f.big_entry);
  EXPECT_GT(now_ns() - again->front().last_used_ns, -kSecond);
  EXPECT_LT(now_ns() - again->front().last_used_ns, 60 * kSecond);
  // So does one that reads a reference's pairs.
  EXPECT_TRUE(read_logp_cache(f.reference,
                              "tailor reference log-probabilities\nweights 0123456789abcdef\ndtype "
                              "float\n")
                  .problem.empty());
  again = list_cache(f.cache);
  ASSERT_TRUE(again.is_ok());
  EXPECT_LT(now_ns() - f.find(*again, f.reference)->last_used_ns, 60 * kSecond);

  // A folder that is not there is an empty cache, not an error.
  auto none = list_cache(f.dir.file("no/such/cache"));
  ASSERT_TRUE(none.is_ok());
  EXPECT_TRUE(none->empty());
}

TEST(CacheFolderTest, ASizeLimitEvictsTheLeastRecentlyUsedAndOnlyTailorsFiles) {
  Folder f;
  used_ago(f.big_entry, 3 * kDay);
  used_ago(f.small_entry, 1 * kDay);
  used_ago(f.reference, 2 * kDay);
  auto entries = list_cache(f.cache);
  ASSERT_TRUE(entries.is_ok());
  // Room for the small entry and the reference, not for the big one beside them.
  PruneRules rules;
  rules.max_bytes = fs::file_size(f.small_entry) + fs::file_size(f.reference);
  ASSERT_GT(fs::file_size(f.big_entry), fs::file_size(f.small_entry));

  const PruneResult dry = prune_cache(*entries, rules, now_ns(), /*dry_run=*/true);
  const std::set<std::string> expected = {f.big_entry, f.damaged, f.stale_part};
  EXPECT_EQ(files_of(dry.removed), expected);
  for (const auto& file : expected)
    EXPECT_TRUE(fs::exists(file)) << "a dry run removed " << file;

  const PruneResult done = prune_cache(*entries, rules, now_ns(), /*dry_run=*/false);
  EXPECT_EQ(files_of(done.removed), expected);
  EXPECT_TRUE(done.errors.empty());
  for (const auto& file : expected)
    EXPECT_FALSE(fs::exists(file)) << file;
  for (const auto& file : {f.small_entry, f.reference, f.fresh_part, f.foreign}) {
    EXPECT_TRUE(fs::exists(file)) << file;
  }
  for (const auto& r : done.removed) {
    if (r.entry.file == f.big_entry) {
      EXPECT_EQ(r.why, "least recently used beyond the size limit");
    }
    if (r.entry.file == f.stale_part) {
      EXPECT_EQ(r.why.rfind("left by a writer that stopped 2", 0), 0u) << r.why;
    }
  }
  // The evicted data is tokenized again by the next job that needs it.
  auto retokenized = data::load_tokenized(f.big, text_spec(), data::ByteTokenizer(), f.cache);
  ASSERT_TRUE(retokenized.is_ok());
  EXPECT_EQ(retokenized->source, data::TokenizedData::Source::kTokenized);

  // A limit of nothing removes every entry but the writer's file of now.
  rules.max_bytes = 0;
  entries = list_cache(f.cache);
  ASSERT_TRUE(entries.is_ok());
  const PruneResult all = prune_cache(*entries, rules, now_ns(), false);
  EXPECT_EQ(all.kept.size(), 1u);
  EXPECT_EQ(all.kept.front().file, f.fresh_part);
}

TEST(CacheFolderTest, AgeAndOrphanRulesRemoveOnlyWhatTheyName) {
  Folder f;
  used_ago(f.big_entry, 40 * kDay);
  used_ago(f.small_entry, 1 * kDay);
  used_ago(f.reference, 5 * kDay);
  fs::remove(f.damaged);
  auto entries = list_cache(f.cache);
  ASSERT_TRUE(entries.is_ok());
  PruneRules unused;
  unused.unused_for_ns = 30 * kDay;
  const PruneResult old = prune_cache(*entries, unused, now_ns(), true);
  EXPECT_EQ(files_of(old.removed), (std::set<std::string>{f.big_entry, f.stale_part}));
  for (const auto& r : old.removed) {
    if (r.entry.file == f.big_entry) {
      EXPECT_EQ(r.why, "unused for 40 days");
    }
  }

  // The small data file is deleted: its entry can never be read again.
  fs::remove(f.small);
  entries = list_cache(f.cache);
  ASSERT_TRUE(entries.is_ok());
  EXPECT_TRUE(f.find(*entries, f.small_entry)->data_missing);
  EXPECT_FALSE(f.find(*entries, f.big_entry)->data_missing);
  PruneRules orphaned;
  orphaned.orphaned = true;
  const PruneResult gone = prune_cache(*entries, orphaned, now_ns(), false);
  EXPECT_EQ(files_of(gone.removed), (std::set<std::string>{f.small_entry, f.stale_part}));
  EXPECT_FALSE(fs::exists(f.small_entry));
  EXPECT_TRUE(fs::exists(f.big_entry));

  PruneRules clear;
  clear.all = true;
  entries = list_cache(f.cache);
  ASSERT_TRUE(entries.is_ok());
  const PruneResult cleared = prune_cache(*entries, clear, now_ns(), false);
  EXPECT_EQ(files_of(cleared.removed), (std::set<std::string>{f.big_entry, f.reference}));
  EXPECT_TRUE(fs::exists(f.fresh_part));
  EXPECT_TRUE(fs::exists(f.foreign));
}

TEST(CacheFolderTest, AgesParseAndPrintInWholeUnits) {
  EXPECT_EQ(*parse_age("30d"), 30 * kDay);
  EXPECT_EQ(*parse_age("12h"), 12 * 3600 * kSecond);
  EXPECT_EQ(*parse_age("90m"), 90 * 60 * kSecond);
  EXPECT_EQ(*parse_age("45s"), 45 * kSecond);
  for (const char* bad : {"", "d", "3", "3x", "-3d", "1.5h", "30 d", "99999999999999d"}) {
    const auto r = parse_age(bad);
    EXPECT_FALSE(r.is_ok()) << bad;
    if (!r.is_ok()) {
      EXPECT_NE(r.status().message().find("is not an age"), std::string::npos) << bad;
    }
  }
  EXPECT_EQ(format_age(93 * kDay), "93 days");
  EXPECT_EQ(format_age(5400 * kSecond), "90 minutes");
  EXPECT_EQ(format_age(3 * 3600 * kSecond), "3 hours");
  EXPECT_EQ(format_age(8 * kSecond), "8 seconds");
}

}  // namespace
}  // namespace tailor::runner::io
