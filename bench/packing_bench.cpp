// How prompt/completion examples fare in rows of seq_len: the fraction
// whose completion trains in another row than where the example started
// (split) and the share of cells that are not padding, for the stream
// packing (what plain text gets, and what every jsonl got before) against
// whole-example packing. Byte tokenizer. Not a ctest; see bench/README.md.
//
//   packing_bench FILE.jsonl [SEQ_LEN ...]     (default 256 2048)
//   packing_bench --generate N OUT.jsonl       (synthetic pairs, fixed seed)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "runner/data/batcher.h"
#include "runner/data/byte_tokenizer.h"
#include "runner/data/dataset.h"

namespace {

using namespace tailor::runner::data;
namespace dsl = tailor::dsl;

constexpr std::int32_t kIgnore = -100;

// Examples with a trained target in a row they did not start in: their
// completion (or part of it) trains without the start of the example.
// Rows are read in order, one per batch, so the stream reads in order.
std::int64_t split_examples(Batcher& batcher) {
  const std::int32_t bos = ByteTokenizer().bos_id();
  std::int64_t split = 0;
  bool counted = false;
  for (std::int64_t r = 0; r < batcher.rows_per_epoch(); ++r) {
    const Batch b = batcher.next();
    bool continuation = b.inputs[0] != bos && b.segment_ids[0] != -1;
    for (std::int64_t c = 0; c < b.seq_len; ++c) {
      const auto i = static_cast<std::size_t>(c);
      if (b.inputs[i] == bos) {
        continuation = false;
        counted = false;
      }
      if (continuation && b.targets[i] != kIgnore && !counted) {
        ++split;
        counted = true;
      }
    }
  }
  return split;
}

void write_pairs(std::int64_t n, const std::string& path) {
  // Instruction-like lengths: prompts of 20-600 bytes, completions of
  // 10-4000, both skewed short (log-uniform), words from a fixed list.
  static const char* kWords[] = {"explain", "the", "model", "why", "gradient", "memory", "a", "list", "sort",
                                 "python", "and", "of", "tokens", "in", "answer", "with", "example", "step"};
  std::uint64_t s = 7;
  auto next = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;  // Knuth's MMIX LCG
    return static_cast<double>(s >> 11) / 9007199254740992.0;
  };
  auto text = [&](double lo, double hi) {
    const auto bytes = static_cast<std::size_t>(lo * std::pow(hi / lo, next()));
    std::string t;
    while (t.size() < bytes) t += std::string(kWords[static_cast<std::size_t>(next() * 18) % 18]) + " ";
    return t;
  };
  std::ofstream out(path);
  for (std::int64_t i = 0; i < n; ++i) {
    out << "{\"prompt\": \"" << text(20, 600) << "\", \"completion\": \"" << text(10, 4000) << "\"}\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--generate") {
    write_pairs(std::atoll(argv[2]), argv[3]);
    return 0;
  }
  if (argc < 2) {
    std::fprintf(stderr, "usage: packing_bench FILE.jsonl [SEQ_LEN ...] | --generate N OUT.jsonl\n");
    return 2;
  }
  std::vector<std::int64_t> seq_lens;
  for (int i = 2; i < argc; ++i) seq_lens.push_back(std::atoll(argv[i]));
  if (seq_lens.empty()) seq_lens = {256, 2048};
  dsl::DataSpec spec;
  spec.format = dsl::DataFormat::kJsonl;
  spec.prompt_field = "prompt";
  spec.completion_field = "completion";
  spec.train = argv[1];
  const ByteTokenizer tok;
  auto store = tokenize_file(argv[1], spec, tok);
  if (!store.is_ok()) {
    std::fprintf(stderr, "packing_bench: %s\n", store.status().to_string().c_str());
    return 2;
  }
  std::printf("%s: %zu examples, %lld tokens\n", argv[1], store->documents(),
              static_cast<long long>(store->total_tokens()));
  std::printf("%-8s %-15s %9s %9s %9s %9s %9s\n", "seq_len", "packing", "rows", "split", "split%", "truncated",
              "filled%");
  for (const std::int64_t seq_len : seq_lens) {
    for (const dsl::Packing packing : {dsl::Packing::kStream, dsl::Packing::kWholeExamples}) {
      Batcher b(*store, seq_len, packing, dsl::LongExample::kTruncate, 1, 1, tok.pad_id());
      const PackingStats st = b.stats();
      const std::int64_t split = split_examples(b);
      std::printf("%-8lld %-15s %9lld %9lld %8.1f%% %9lld %8.1f%%\n", static_cast<long long>(seq_len),
                  dsl::to_string(packing), static_cast<long long>(st.rows_per_epoch), static_cast<long long>(split),
                  100.0 * static_cast<double>(split) / static_cast<double>(st.documents),
                  static_cast<long long>(st.truncated), 100.0 * st.efficiency());
    }
  }
  return 0;
}
