// runner/data/gguf_vocab.h: a SentencePiece model's pieces, scores and
// types read from its ModelProto as libsentencepiece sees them; byte-level
// BPE's vocabulary, merges and pre-tokenizer name; padding to the model's
// rows; and what llama.cpp would tokenize otherwise, refused by name.
#include "runner/data/gguf_vocab.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runner/data/bpe_tokenizer.h"
#include "runner/data/sentencepiece_tokenizer.h"
#include "tests/runner/data/tiny_sentencepiece.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/text_file.h"

namespace tailor::runner::data {
namespace {

using tailor::testing::TempDir;

TEST(GgufVocabTest, SentencePiecePiecesScoresAndTypesAreTheModelsPaddedToTheEmbeddings) {
  TempDir dir;
  std::string error;
  const std::string model = tailor::testing::train_tiny_sentencepiece(
      dir.path(), 300,
      "--normalization_rule_name=identity --remove_extra_whitespaces=false --byte_fallback=true "
      "--hard_vocab_limit=false --user_defined_symbols=<sep>",
      &error);
  ASSERT_FALSE(model.empty()) << error;
  auto sp = SentencePieceTokenizer::load(model);
  ASSERT_TRUE(sp.is_ok()) << sp.status().message();
  auto v = read_gguf_vocab(dir.path().string(), 320);
  ASSERT_TRUE(v.is_ok()) << v.status().message();
  EXPECT_EQ(v->model, "llama");
  EXPECT_EQ(v->pre, "default");
  ASSERT_EQ(v->tokens.size(), 320u);
  ASSERT_EQ(v->scores.size(), 320u);
  ASSERT_EQ(v->types.size(), 320u);
  EXPECT_EQ(v->unk, 0);
  EXPECT_EQ(v->tokens[0], "<unk>");
  EXPECT_EQ(v->types[0], kTokenUnknown);
  EXPECT_EQ(v->types[(*sp)->bos_id()], kTokenControl);
  EXPECT_EQ(v->tokens[(*sp)->eos_id()], "</s>");
  EXPECT_EQ(v->tokens[3], "<sep>");
  EXPECT_EQ(v->types[3], kTokenUserDefined);
  EXPECT_EQ(v->tokens[4], "<0x00>");
  EXPECT_EQ(v->types[4], kTokenByte);
  // A piece's id is its id in the tokenizer; merges score higher first.
  const auto ids = (*sp)->encode("the");
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(v->tokens[ids[0]], "\xE2\x96\x81the");
  EXPECT_EQ(v->types[ids[0]], kTokenNormal);
  EXPECT_EQ(v->tokens[300], "[PAD300]");
  EXPECT_EQ(v->types[319], kTokenUnused);
  EXPECT_EQ(v->scores[319], -10000.0f);
  EXPECT_EQ(v->add_space_prefix, true);
  // More tokens than embeddings.
  auto small = read_gguf_vocab(dir.path().string(), 200);
  EXPECT_NE(small.status().message().find("the tokenizer has 300 tokens, more than the model's 200 embeddings"),
            std::string::npos)
      << small.status().message();
}

TEST(GgufVocabTest, SentencePieceThatLlamaCppWouldTokenizeOtherwiseIsRefused) {
  TempDir dir;
  // The default normalizer (NFKC) and whitespace collapsing.
  ASSERT_FALSE(tailor::testing::train_tiny_sentencepiece(dir.file("nfkc"), 100).empty());
  auto v = read_gguf_vocab(dir.file("nfkc"), 100);
  EXPECT_NE(v.status().message().find("the normalizer nmt_nfkc, which llama.cpp does not apply"), std::string::npos)
      << v.status().message();
  ASSERT_FALSE(
      tailor::testing::train_tiny_sentencepiece(dir.file("ws"), 100, "--normalization_rule_name=identity").empty());
  v = read_gguf_vocab(dir.file("ws"), 100);
  EXPECT_NE(v.status().message().find("remove_extra_whitespaces is on"), std::string::npos) << v.status().message();
  // A unigram ModelProto, written by hand: one piece "a" (score 0, normal)
  // and trainer_spec.model_type 1.
  std::filesystem::create_directories(dir.file("unigram"));
  tailor::testing::write_text(dir.file("unigram") + "/tokenizer.model",
                              std::string("\x0a\x0a\x0a\x01" "a" "\x15\x00\x00\x00\x00\x18\x01" "\x12\x02\x18\x01", 16));
  v = read_gguf_vocab(dir.file("unigram"), 100);
  EXPECT_NE(v.status().message().find("a SentencePiece model of type 1 (1 unigram"), std::string::npos)
      << v.status().message();
  EXPECT_NE(v.status().message().find("GGUF export takes BPE models"), std::string::npos)
      << v.status().message();
  std::filesystem::create_directories(dir.file("junk"));
  std::ofstream(dir.file("junk") + "/tokenizer.model") << "\xff\xff\xff";
  v = read_gguf_vocab(dir.file("junk"), 100);
  EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument);
  std::filesystem::create_directories(dir.file("none"));
  EXPECT_EQ(read_gguf_vocab(dir.file("none"), 100).status().code(), StatusCode::kNotFound);
}

TEST(GgufVocabTest, ByteLevelBpeHasItsVocabularyMergesTypesAndPreTokenizerName) {
  TempDir dir;
  // The byte tokenizer's files: byte-level, GPT-2's expression, no merges.
  tailor::testing::write_text(dir.file("tokenizer.json"), byte_tokenizer_json());
  tailor::testing::write_text(dir.file("tokenizer_config.json"), byte_tokenizer_config_json());
  auto v = read_gguf_vocab(dir.path().string(), 260);
  ASSERT_TRUE(v.is_ok()) << v.status().message();
  EXPECT_EQ(v->model, "gpt2");
  EXPECT_EQ(v->pre, "gpt-2");
  EXPECT_TRUE(v->merges.empty());
  EXPECT_EQ(v->tokens[257], "<|eos|>");
  EXPECT_EQ(v->types[257], kTokenControl);
  EXPECT_EQ(v->types[65], kTokenNormal);
  EXPECT_EQ(v->tokens[259], "[PAD259]");
  EXPECT_EQ(v->add_bos, false);

  // Merges in both of the tokenizers library's spellings, Llama 3's
  // expression, and an expression llama.cpp has no name for.
  nlohmann::json j = nlohmann::json::parse(byte_tokenizer_json());
  j["model"]["merges"] = nlohmann::json::array({"a b", nlohmann::json::array({"ab", "c"})});
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"},
                           {"pattern",
                            {{"Regex",
                              R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
                           {"behavior", "Isolated"}},
                          {{"type", "ByteLevel"}, {"use_regex", false}}}}};
  tailor::testing::write_text(dir.file("tokenizer.json"), j.dump());
  v = read_gguf_vocab(dir.path().string(), 260);
  ASSERT_TRUE(v.is_ok()) << v.status().message();
  EXPECT_EQ(v->pre, "llama-bpe");
  EXPECT_EQ(v->merges, (std::vector<std::string>{"a b", "ab c"}));
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
  tailor::testing::write_text(dir.file("tokenizer.json"), j.dump());
  v = read_gguf_vocab(dir.path().string(), 260);
  EXPECT_NE(v.status().message().find("pre_tokenizer's Split expression \"\\\\w+\" is not one llama.cpp names"),
            std::string::npos)
      << v.status().message();
  j["model"]["type"] = "WordPiece";
  tailor::testing::write_text(dir.file("tokenizer.json"), j.dump());
  v = read_gguf_vocab(dir.path().string(), 260);
  EXPECT_NE(v.status().message().find("model.type \"WordPiece\""), std::string::npos) << v.status().message();
}

}  // namespace
}  // namespace tailor::runner::data
