// Load time of a text corpus through the token cache: tokenizing in memory,
// a first load (tokenize + write the entry) and a cached load (map +
// validate), then one epoch of packed batches from the owned and the mapped
// store. Not a ctest; see bench/README.md.
//
//   token_cache_bench [--mb 20] [--sp-model tokenizer.model] [--dir DIR]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "runner/data/batcher.h"
#include "runner/data/byte_tokenizer.h"
#include "runner/data/dataset.h"
#include "runner/data/sentencepiece_tokenizer.h"
#include "runner/data/token_cache.h"

namespace {

using namespace tailor::runner::data;
namespace fs = std::filesystem;

// The value, or exit with the error: a benchmark has nothing to recover.
template <class T>
T must(tailor::Result<T> r) {
  if (!r.is_ok()) {
    std::fprintf(stderr, "token_cache_bench: %s\n", r.status().to_string().c_str());
    std::exit(2);
  }
  return std::move(r).value();
}

double seconds_of(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Paragraphs of pseudo-English words from a fixed generator (the same file
// every run), 1-12 lines each.
void write_corpus(const std::string& path, std::size_t bytes) {
  static const char* kWords[] = {"the", "model", "trains", "on", "small", "machines", "with", "tokens",
                                 "and", "memory", "budget", "plans", "every", "layer", "fits", "a",
                                 "gradient", "checkpoint", "batch", "of", "text", "quickly", "lazy", "fox"};
  std::ofstream out(path, std::ios::binary);
  std::uint64_t state = 42;
  std::size_t written = 0;
  while (written < bytes) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;  // Knuth's MMIX LCG
    const int lines = 1 + static_cast<int>((state >> 33) % 12);
    for (int l = 0; l < lines; ++l) {
      std::string line;
      for (int w = 0; w < 12; ++w) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        line += kWords[(state >> 33) % (sizeof kWords / sizeof kWords[0])];
        line += ' ';
      }
      line.back() = '\n';
      out << line;
      written += line.size();
    }
    out << '\n';
    ++written;
  }
}

int run(const Tokenizer& tok, const std::string& data, const std::string& cache) {
  tailor::dsl::DataSpec spec;
  spec.format = tailor::dsl::DataFormat::kText;
  std::error_code ec;
  fs::remove_all(cache, ec);
  TokenStore memory, first, cached;
  const double t_memory = seconds_of([&] { memory = must(tokenize_file(data, spec, tok)); });
  TokenizedData::Source first_source{}, cached_source{};
  const double t_first = seconds_of([&] {
    auto r = must(load_tokenized(data, spec, tok, cache));
    first_source = r.source;
    first = r.store;
  });
  const double t_cached = seconds_of([&] {
    auto r = must(load_tokenized(data, spec, tok, cache));
    cached_source = r.source;
    cached = r.store;
  });
  if (first_source != TokenizedData::Source::kTokenized || cached_source != TokenizedData::Source::kCache ||
      !same_documents(first, cached)) {
    std::fprintf(stderr, "token_cache_bench: the cache did not behave (sources %d, %d)\n",
                 static_cast<int>(first_source), static_cast<int>(cached_source));
    return 1;
  }
  auto epoch = [&](const TokenStore& store) {
    Batcher b(store, 1024, true, 8, 1, tok.pad_id());
    std::int64_t targets = 0;
    for (std::int64_t i = 0; i < b.batches_per_epoch(); ++i) targets += b.next().target_tokens;
    return targets;
  };
  std::int64_t t1 = 0, t2 = 0;
  const double e_owned = seconds_of([&] { t1 = epoch(memory); });
  const double e_mapped = seconds_of([&] { t2 = epoch(cached); });
  std::printf("%s: %zu documents, %lld tokens\n", tok.describe().c_str(), cached.documents(),
              static_cast<long long>(cached.total_tokens()));
  std::printf("  tokenize in memory        %8.1f ms\n", 1e3 * t_memory);
  std::printf("  first load (tokenize+write) %6.1f ms\n", 1e3 * t_first);
  std::printf("  cached load (mmap+verify) %8.1f ms  (%.0fx faster than the first)\n", 1e3 * t_cached,
              t_first / t_cached);
  std::printf("  one packed epoch (seq 1024, batch 8): owned %.1f ms, mapped %.1f ms%s\n", 1e3 * e_owned,
              1e3 * e_mapped, t1 == t2 ? "" : "  TARGET COUNTS DIFFER");
  return t1 == t2 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  double mb = 20;
  std::string sp_model;
  std::string dir = (fs::temp_directory_path() / "tailor-token-cache-bench").string();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--mb") mb = std::atof(argv[i + 1]);
    else if (flag == "--sp-model") sp_model = argv[i + 1];
    else if (flag == "--dir") dir = argv[i + 1];
  }
  fs::create_directories(dir);
  const std::string data = (fs::path(dir) / "corpus.txt").string();
  write_corpus(data, static_cast<std::size_t>(mb * 1024 * 1024));
  std::printf("corpus %s: %.1f MB\n", data.c_str(), static_cast<double>(fs::file_size(data)) / (1024.0 * 1024.0));
  int rc = run(ByteTokenizer(), data, (fs::path(dir) / "cache-byte").string());
  if (!sp_model.empty()) {
    auto sp = SentencePieceTokenizer::load(sp_model);
    if (!sp.is_ok()) {
      std::fprintf(stderr, "token_cache_bench: %s\n", sp.status().message().c_str());
      return 2;
    }
    rc |= run(**sp, data, (fs::path(dir) / "cache-sp").string());
  }
  return rc;
}
