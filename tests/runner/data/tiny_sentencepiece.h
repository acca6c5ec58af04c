// Builds a tiny SentencePiece model at test time with libsentencepiece_train
// (tens of milliseconds), so tests need no checked-in binary model.
#pragma once

#include <sentencepiece_trainer.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace tailor::testing {

// A few sentences of plain ASCII: every character the tests encode appears
// here, so a 100-piece model covers them (no unknown pieces).
inline const char* kTinyCorpus =
    "the quick brown fox jumps over the lazy dog\n"
    "a lazy dog sleeps in the warm sun all day\n"
    "the fox and the dog are friends now\n"
    "we train small models on small machines\n"
    "tokens are pieces of words, and words are pieces of text\n"
    "question: what is two plus two? answer: four.\n"
    "hello world, hello tailor, hello tokens\n"
    "jumping foxes quickly vex lazy brown dogs\n";

// Trains a model of `vocab` pieces into dir/tokenizer.model (creating dir)
// and returns that path; `extra` adds trainer flags such as "--bos_id=-1".
// Returns "" and sets *error when training fails.
inline std::string train_tiny_sentencepiece(const std::filesystem::path& dir, int vocab = 100,
                                            const std::string& extra = "", std::string* error = nullptr) {
  std::filesystem::create_directories(dir);
  const auto corpus = dir / "corpus.txt";
  {
    std::ofstream out(corpus);
    for (int i = 0; i < 4; ++i) out << kTinyCorpus;
  }
  std::string proto;
  const auto status = sentencepiece::SentencePieceTrainer::Train(
      "--input=" + corpus.string() + " --vocab_size=" + std::to_string(vocab) +
          " --model_type=bpe --minloglevel=2 " + extra,
      nullptr, &proto);
  std::filesystem::remove(corpus);  // a model folder holds only the model
  if (!status.ok()) {
    if (error != nullptr) *error = status.ToString();
    return "";
  }
  const auto model = dir / "tokenizer.model";
  std::ofstream(model, std::ios::binary) << proto;
  return model.string();
}

}  // namespace tailor::testing
