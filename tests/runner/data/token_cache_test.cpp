// Tests of the token cache: first load writes an entry, later loads map it
// and give identical documents and batches; changes to the data, settings
// or tokenizer invalidate it; corrupt entries are rebuilt, never trusted;
// an unusable folder falls back to tokenizing in memory.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runner/data/batcher.h"
#include "runner/data/byte_tokenizer.h"
#include "runner/data/dataset.h"
#include "runner/data/hash.h"
#include "runner/data/sentencepiece_tokenizer.h"
#include "runner/data/token_cache.h"
#include "tests/runner/data/tiny_sentencepiece.h"
#include "tests/testing/temp_dir.h"

namespace tailor::runner::data {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using Source = TokenizedData::Source;

// Paragraphs of varied lengths, some longer than a row of 16 tokens.
std::string corpus(int paragraphs, char salt = 'a') {
  std::string text;
  for (int i = 0; i < paragraphs; ++i) {
    text += std::string(static_cast<std::size_t>(1 + (i * 7) % 37), static_cast<char>(salt + i % 20));
    text += (i % 3 == 0) ? "\nsecond line\n\n" : "\n\n";
  }
  return text;
}

dsl::DataSpec text_spec() {
  dsl::DataSpec spec;
  spec.format = dsl::DataFormat::kText;
  return spec;
}

bool same_batch(const Batch& a, const Batch& b) {
  return a.rows == b.rows && a.seq_len == b.seq_len && a.inputs == b.inputs && a.targets == b.targets &&
         a.positions == b.positions && a.segment_ids == b.segment_ids && a.target_tokens == b.target_tokens;
}

// Moves the file's mtime a second on, as a real edit some time later would.
void touch_later(const std::string& path) {
  fs::last_write_time(path, fs::last_write_time(path) + std::chrono::seconds(1));
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::uint64_t get_u64(const std::string& b, std::size_t at) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + static_cast<std::size_t>(i)]);
  return v;
}

void put_u64(std::string& b, std::size_t at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + static_cast<std::size_t>(i)] = static_cast<char>(v >> (8 * i));
}

// Re-seals an edited entry, as a writer would have: payload then header
// checksum (the layout of token_cache.h), so only the structural checks
// can catch the edit.
void reseal(std::string& b) {
  put_u64(b, 48, checksum64(b.data() + 64, b.size() - 64));
  put_u64(b, 56, checksum64(b.data(), 56));
}

// Loads through the cache and checks the result equals a plain tokenization.
TokenizedData load_checked(const std::string& path, const dsl::DataSpec& spec, const Tokenizer& tok,
                           const std::string& cache_dir) {
  auto loaded = load_tokenized(path, spec, tok, cache_dir);
  EXPECT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  if (!loaded.is_ok()) return {};
  auto fresh = tokenize_file(path, spec, tok);
  EXPECT_TRUE(fresh.is_ok());
  if (fresh.is_ok()) {
    EXPECT_TRUE(same_documents(loaded->store, *fresh)) << "cached documents differ from a fresh tokenization";
  }
  return std::move(loaded).value();
}

TEST(TokenCacheTest, FirstLoadWritesSecondMapsIdenticalDocuments) {
  testing::TempDir dir;
  const auto data = dir.write("book.txt", corpus(200));
  const std::string cache = dir.file("cache");
  const ByteTokenizer tok;
  const TokenizedData first = load_checked(data, text_spec(), tok, cache);
  EXPECT_EQ(first.source, Source::kTokenized);
  ASSERT_FALSE(first.cache_file.empty());
  EXPECT_TRUE(fs::exists(first.cache_file));
  EXPECT_TRUE(first.warnings.empty());

  const TokenizedData second = load_checked(data, text_spec(), tok, cache);
  EXPECT_EQ(second.source, Source::kCache);
  EXPECT_EQ(second.cache_file, first.cache_file);
  EXPECT_TRUE(second.warnings.empty());
  EXPECT_EQ(second.store.to_examples().size(), first.store.documents());
  // One entry, and no temporary file left behind.
  EXPECT_EQ(std::distance(fs::directory_iterator(cache), fs::directory_iterator()), 1);
}

TEST(TokenCacheTest, BatchesFromTheMappedStoreEqualThoseFromVectors) {
  testing::TempDir dir;
  const auto data = dir.write("book.txt", corpus(150));
  const ByteTokenizer tok;
  auto examples = load_examples(data, text_spec(), tok);
  ASSERT_TRUE(examples.is_ok());
  ASSERT_EQ(load_checked(data, text_spec(), tok, dir.file("c")).source, Source::kTokenized);
  const TokenizedData mapped = load_checked(data, text_spec(), tok, dir.file("c"));
  ASSERT_EQ(mapped.source, Source::kCache);
  for (const bool packing : {true, false}) {
    Batcher from_vectors(*examples, 16, packing, 3, 7);
    Batcher from_map(mapped.store, 16, packing, 3, 7, tok.pad_id());
    ASSERT_EQ(from_map.rows_per_epoch(), from_vectors.rows_per_epoch());
    EXPECT_TRUE(same_batch(from_map.longest_batch(), from_vectors.longest_batch()));
    for (std::int64_t i = 0; i < 2 * from_map.batches_per_epoch() + 1; ++i) {
      ASSERT_TRUE(same_batch(from_map.next(), from_vectors.next())) << "packing=" << packing << " batch " << i;
    }
  }
}

TEST(TokenCacheTest, ChangedDataFileIsRetokenizedAndReplacesItsEntry) {
  testing::TempDir dir;
  const auto data = dir.write("book.txt", corpus(50, 'a'));
  const ByteTokenizer tok;
  const TokenizedData old = load_checked(data, text_spec(), tok, dir.file("c"));
  write_bytes(data, corpus(60, 'k'));
  touch_later(data);
  const TokenizedData changed = load_checked(data, text_spec(), tok, dir.file("c"));
  EXPECT_EQ(changed.source, Source::kTokenized);
  EXPECT_TRUE(changed.warnings.empty()) << "a stale entry is routine, not a warning";
  EXPECT_FALSE(same_documents(changed.store, old.store));
  EXPECT_EQ(changed.cache_file, old.cache_file) << "the stale entry is replaced, not kept beside";
  EXPECT_EQ(load_checked(data, text_spec(), tok, dir.file("c")).source, Source::kCache);
}

TEST(TokenCacheTest, SameContentNewerMtimeIsRetokenized) {
  testing::TempDir dir;
  const auto data = dir.write("book.txt", corpus(20));
  const ByteTokenizer tok;
  ASSERT_EQ(load_checked(data, text_spec(), tok, dir.file("c")).source, Source::kTokenized);
  touch_later(data);
  EXPECT_EQ(load_checked(data, text_spec(), tok, dir.file("c")).source, Source::kTokenized);
}

TEST(TokenCacheTest, ChangedFieldIsRetokenized) {
  testing::TempDir dir;
  const auto data = dir.write("d.jsonl", "{\"a\": \"first field\", \"b\": \"second\"}\n{\"a\": \"x\", \"b\": \"yy\"}\n");
  const ByteTokenizer tok;
  dsl::DataSpec spec;
  spec.format = dsl::DataFormat::kJsonl;
  spec.field = "a";
  const TokenizedData a = load_checked(data, spec, tok, dir.file("c"));
  spec.field = "b";
  const TokenizedData b = load_checked(data, spec, tok, dir.file("c"));
  EXPECT_EQ(b.source, Source::kTokenized);
  EXPECT_FALSE(same_documents(a.store, b.store));
  spec.field = "a";
  EXPECT_EQ(load_checked(data, spec, tok, dir.file("c")).source, Source::kCache) << "each setting keeps its entry";
  spec.prompt_field = "a";
  spec.completion_field = "b";
  EXPECT_EQ(load_checked(data, spec, tok, dir.file("c")).source, Source::kTokenized);
}

TEST(TokenCacheTest, ChangedTokenizerIsRetokenized) {
  testing::TempDir dir;
  const auto data = dir.write("book.txt", std::string(testing::kTinyCorpus) + "\n" + testing::kTinyCorpus);
  std::string error;
  const std::string model = testing::train_tiny_sentencepiece(dir.path() / "m", 100, "", &error);
  ASSERT_FALSE(model.empty()) << error;
  auto sp = SentencePieceTokenizer::load(model);
  ASSERT_TRUE(sp.is_ok()) << sp.status().to_string();
  const ByteTokenizer byte;
  const TokenizedData with_bytes = load_checked(data, text_spec(), byte, dir.file("c"));
  const TokenizedData with_sp = load_checked(data, text_spec(), **sp, dir.file("c"));
  EXPECT_EQ(with_sp.source, Source::kTokenized);
  EXPECT_LT(with_sp.store.total_tokens(), with_bytes.store.total_tokens());
  EXPECT_EQ(load_checked(data, text_spec(), **sp, dir.file("c")).source, Source::kCache);
  EXPECT_EQ(load_checked(data, text_spec(), byte, dir.file("c")).source, Source::kCache);

  // Another model file (other pieces) is another tokenizer.
  const std::string other = testing::train_tiny_sentencepiece(dir.path() / "m2", 90, "", &error);
  ASSERT_FALSE(other.empty()) << error;
  auto sp2 = SentencePieceTokenizer::load(other);
  ASSERT_TRUE(sp2.is_ok());
  EXPECT_EQ(load_checked(data, text_spec(), **sp2, dir.file("c")).source, Source::kTokenized);
}

// Each corruption of a valid entry: the next load warns, rebuilds it and
// gives correct documents; the load after that maps the rebuilt entry.
void expect_rebuilt_after(const std::function<void(std::string&)>& corrupt, const std::string& why) {
  testing::TempDir dir;
  const auto data = dir.write("book.txt", corpus(80));
  const ByteTokenizer tok;
  const TokenizedData first = load_checked(data, text_spec(), tok, dir.file("c"));
  ASSERT_EQ(first.source, Source::kTokenized);
  std::string bytes = read_bytes(first.cache_file);
  corrupt(bytes);
  write_bytes(first.cache_file, bytes);

  const TokenizedData rebuilt = load_checked(data, text_spec(), tok, dir.file("c"));
  EXPECT_EQ(rebuilt.source, Source::kTokenized) << why;
  ASSERT_EQ(rebuilt.warnings.size(), 1u) << why;
  EXPECT_THAT(rebuilt.warnings[0], HasSubstr(first.cache_file));
  EXPECT_THAT(rebuilt.warnings[0], HasSubstr(why));
  EXPECT_EQ(load_checked(data, text_spec(), tok, dir.file("c")).source, Source::kCache) << why;
}

TEST(TokenCacheTest, TruncatedEntryIsRebuilt) {
  expect_rebuilt_after([](std::string& b) { b.resize(b.size() - 8); }, "sizes do not add up");
  expect_rebuilt_after([](std::string& b) { b.resize(b.size() / 2); }, "sizes do not add up");
  expect_rebuilt_after([](std::string& b) { b.resize(10); }, "truncated");
  expect_rebuilt_after([](std::string& b) { b.clear(); }, "truncated");
}

TEST(TokenCacheTest, FlippedMagicIsRebuilt) {
  expect_rebuilt_after([](std::string& b) { b[0] ^= 0x20; }, "bad magic");
}

TEST(TokenCacheTest, WrongCountsAreRebuilt) {
  // Caught by the header checksum alone...
  expect_rebuilt_after([](std::string& b) { put_u64(b, 24, get_u64(b, 24) + 1); }, "header checksum");
  // ...and by the layout even when the header is re-sealed.
  expect_rebuilt_after(
      [](std::string& b) {
        put_u64(b, 24, get_u64(b, 24) - 1);  // one document fewer
        reseal(b);
      },
      "sizes do not add up");
  expect_rebuilt_after(
      [](std::string& b) {
        put_u64(b, 32, get_u64(b, 32) + 1000);  // tokens beyond the file
        reseal(b);
      },
      "sizes do not add up");
}

TEST(TokenCacheTest, CorruptPayloadIsRebuilt) {
  // A flipped bit in a trained flag near the end: sizes all agree.
  expect_rebuilt_after([](std::string& b) { b[b.size() - 9] ^= 1; }, "payload checksum");
}

TEST(TokenCacheTest, InconsistentOffsetsAreRebuiltEvenWhenSealed) {
  // Document 1 made empty (offsets[2] = offsets[1]) by a writer that sealed
  // it: the structure check, not the checksum, rejects it.
  expect_rebuilt_after(
      [](std::string& b) {
        const std::uint64_t key_bytes = get_u64(b, 16);
        const std::size_t offsets_at = 64 + static_cast<std::size_t>((key_bytes + 7) / 8 * 8);
        put_u64(b, offsets_at + 16, get_u64(b, offsets_at + 8));
        reseal(b);
      },
      "shorter than 2 tokens");
}

TEST(TokenCacheTest, UncreatableOrUnwritableFolderFallsBackToMemory) {
  testing::TempDir dir;
  const auto data = dir.write("book.txt", corpus(30));
  const auto blocker = dir.write("file", "a regular file where the cache folder should go");
  const ByteTokenizer tok;
  // /proc exists but takes no new files, even for root.
  for (const std::string& cache : {blocker + "/tokens", std::string("/proc")}) {
    const TokenizedData r = load_checked(data, text_spec(), tok, cache);
    EXPECT_EQ(r.source, Source::kUncached) << cache;
    EXPECT_TRUE(r.cache_file.empty());
    ASSERT_EQ(r.warnings.size(), 1u) << cache;
    EXPECT_THAT(r.warnings[0], HasSubstr(cache));
  }
  const TokenizedData none = load_checked(data, text_spec(), tok, "");
  EXPECT_EQ(none.source, Source::kUncached);
  EXPECT_TRUE(none.warnings.empty()) << "no folder means caching is off, not a problem";
}

TEST(TokenCacheTest, BadDataIsAnErrorAndWritesNoEntry) {
  testing::TempDir dir;
  const auto bad = dir.write("bad.jsonl", "{\"text\": oops}\n");
  dsl::DataSpec spec;
  spec.format = dsl::DataFormat::kJsonl;
  auto r = load_tokenized(bad, spec, ByteTokenizer(), dir.file("c"));
  ASSERT_FALSE(r.is_ok());
  EXPECT_THAT(r.status().message(), HasSubstr("bad.jsonl:1:10: not valid JSON"));
  const auto empty = dir.write("empty.txt", "\n\n");
  r = load_tokenized(empty, text_spec(), ByteTokenizer(), dir.file("c"));
  ASSERT_FALSE(r.is_ok());
  EXPECT_THAT(r.status().message(), HasSubstr(empty + ": no documents"));
  r = load_tokenized(dir.file("missing.txt"), text_spec(), ByteTokenizer(), dir.file("c"));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(fs::is_empty(dir.file("c")));
}

TEST(TokenCacheTest, RacingLoadersLeaveOneValidEntry) {
  testing::TempDir dir;
  const auto data = dir.write("book.txt", corpus(400));
  const ByteTokenizer tok;
  const auto fresh = tokenize_file(data, text_spec(), tok);
  ASSERT_TRUE(fresh.is_ok());
  constexpr int kThreads = 4;
  std::vector<Result<TokenizedData>> results(kThreads, Status::internal("not run"));
  {
    std::vector<std::jthread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&, i] { results[static_cast<std::size_t>(i)] = load_tokenized(data, text_spec(), tok, dir.file("c")); });
    }
  }
  for (const auto& r : results) {
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_TRUE(r->warnings.empty());
    EXPECT_TRUE(same_documents(r->store, *fresh));
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.file("c")), fs::directory_iterator()), 1)
      << "one entry, no temporary files";
  EXPECT_EQ(load_checked(data, text_spec(), tok, dir.file("c")).source, Source::kCache);
}

TEST(TokenCacheTest, KeyNamesEverythingThatChangesTokens) {
  const ByteTokenizer tok;
  FileIdentity file{"/data/book.jsonl", 1234, 1700000000123456789};
  dsl::DataSpec spec;
  spec.format = dsl::DataFormat::kJsonl;
  const std::string base = token_cache_key(file, spec, tok);
  EXPECT_THAT(base, HasSubstr("/data/book.jsonl"));
  EXPECT_THAT(base, HasSubstr("1700000000123456789"));
  EXPECT_THAT(base, HasSubstr(tok.fingerprint()));
  auto differs = [&](FileIdentity f, dsl::DataSpec s) { return token_cache_key(f, s, tok) != base; };
  FileIdentity f = file;
  f.size_bytes = 1235;
  EXPECT_TRUE(differs(f, spec));
  f = file;
  f.mtime_ns += 1;
  EXPECT_TRUE(differs(f, spec));
  f = file;
  f.absolute_path = "/data/book2.jsonl";
  EXPECT_TRUE(differs(f, spec));
  dsl::DataSpec s = spec;
  s.field = "body";
  EXPECT_TRUE(differs(file, s));
  s = spec;
  s.format = dsl::DataFormat::kText;
  EXPECT_TRUE(differs(file, s));
}

TEST(TokenCacheTest, DefaultFolderFollowsTheEnvironment) {
  // Restores the variables it changes, whatever the outcome.
  struct SavedEnv {
    std::vector<std::pair<std::string, std::optional<std::string>>> saved;
    void set(const char* name, const char* value) {
      const char* old = std::getenv(name);
      saved.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
      if (value) {
        ::setenv(name, value, 1);
      } else {
        ::unsetenv(name);
      }
    }
    ~SavedEnv() {
      for (auto it = saved.rbegin(); it != saved.rend(); ++it) {
        if (it->second) {
          ::setenv(it->first.c_str(), it->second->c_str(), 1);
        } else {
          ::unsetenv(it->first.c_str());
        }
      }
    }
  } env;
  env.set("TAILOR_CACHE_DIR", "/tmp/tc");
  env.set("XDG_CACHE_HOME", "/tmp/xdg");
  env.set("HOME", "/tmp/home");
  EXPECT_EQ(default_token_cache_dir(), "/tmp/tc");
  env.set("TAILOR_CACHE_DIR", "");
  EXPECT_EQ(default_token_cache_dir(), "/tmp/xdg/tailor/tokens");
  env.set("XDG_CACHE_HOME", nullptr);
  EXPECT_EQ(default_token_cache_dir(), "/tmp/home/.cache/tailor/tokens");
  env.set("HOME", nullptr);
  EXPECT_EQ(default_token_cache_dir(), "");
}

}  // namespace
}  // namespace tailor::runner::data
