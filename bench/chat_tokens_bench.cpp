// Conversations rendered, tokenized and masked as tailor-runner reads chat
// data (runner/data/chat_tokens.h), on one thread; run by
// chat_tokens_vs_hf.sh against transformers' apply_chat_template.
//
//   chat_tokens_bench MODEL_FOLDER TEMPLATE CONVERSATIONS.json N
//
// CONVERSATIONS.json is a JSON array of conversations (lists of messages),
// cycled to N. Prints one JSON line: conversations, seconds, tokens,
// trained tokens.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "runner/data/chat_tokens.h"
#include "runner/data/file_io.h"

using namespace tailor::runner::data;

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: chat_tokens_bench MODEL_FOLDER TEMPLATE CONVERSATIONS.json N\n";
    return 2;
  }
  tailor::dsl::ModelSpec model;
  model.path = argv[1];
  model.arch.vocab = 1 << 24;
  auto tok = make_tokenizer(model);
  if (!tok.is_ok()) {
    std::cerr << tok.status().to_string() << "\n";
    return 1;
  }
  tailor::dsl::DataSpec data;
  data.chat = tailor::dsl::ChatFormat::kMessages;
  data.chat_template = argv[2];
  auto setup = load_chat_setup(data, model.path);
  auto text = read_file(argv[3]);
  if (!setup.is_ok() || !text.is_ok()) {
    std::cerr << (setup.is_ok() ? text.status() : setup.status()).to_string() << "\n";
    return 1;
  }
  std::vector<std::string> records;
  for (const auto& conv : ChatJson::parse(*text)) records.push_back(ChatJson{{"messages", conv}}.dump());
  const long n = std::atol(argv[4]);
  std::size_t tokens = 0, trained = 0;
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i) {
    auto ex = tokenize_chat(*setup, **tok, records[static_cast<std::size_t>(i) % records.size()]);
    if (!ex.is_ok()) {
      std::cerr << ex.status().to_string() << "\n";
      return 1;
    }
    tokens += ex->ids.size();
    for (auto t : ex->trained) trained += t;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("{\"conversations\": %ld, \"seconds\": %.3f, \"tokens\": %zu, \"trained\": %zu}\n", n, seconds, tokens,
              trained);
  return 0;
}
