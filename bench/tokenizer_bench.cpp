// Encoding speed of a model folder's tokenizer as tailor-runner loads it
// (make_tokenizer: tokenizer.json byte-level BPE, SentencePiece or bytes),
// one thread, line by line as the data pipeline encodes documents. Prints one
// JSON line; bench/tokenizer_vs_hf.sh runs it beside the tokenizers library.
//   tokenizer_bench MODEL_FOLDER CORPUS.txt
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runner/data/tokenizer.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: tokenizer_bench MODEL_FOLDER CORPUS.txt\n");
    return 2;
  }
  tailor::dsl::ModelSpec model;
  model.path = argv[1];
  model.arch.vocab = 1 << 30;
  auto tok = tailor::runner::data::make_tokenizer(model);
  if (!tok.is_ok()) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", tok.status().message().c_str());
    return 1;
  }
  std::ifstream in(argv[2]);
  std::vector<std::string> lines;
  std::size_t bytes = 0;
  for (std::string line; std::getline(in, line);) {
    bytes += line.size();
    lines.push_back(std::move(line));
  }
  std::size_t tokens = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (const std::string& line : lines)
    tokens += (*tok)->encode(line).size();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "{\"impl\": \"tailor\", \"lines\": %zu, \"bytes\": %zu, \"tokens\": %zu, \"seconds\": %.4f, \"mb_per_s\": "
      "%.2f}\n",
      lines.size(), bytes, tokens, s, static_cast<double>(bytes) / 1e6 / s);
  return 0;
}
