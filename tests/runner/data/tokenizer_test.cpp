// Tests of the tokenizers behind the data pipeline: SentencePiece models
// built at test time, make_tokenizer's choice and checks, and the dataset
// and batcher using a tokenizer's own special ids.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "runner/data/batcher.h"
#include "runner/data/byte_tokenizer.h"
#include "runner/data/dataset.h"
#include "runner/data/file_io.h"
#include "runner/data/sentencepiece_tokenizer.h"
#include "runner/data/tokenizer.h"
#include "tests/runner/data/tiny_sentencepiece.h"
#include "tests/testing/temp_dir.h"

namespace tailor::runner::data {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<SentencePieceTokenizer> load_or_die(const std::string& file) {
  auto tok = SentencePieceTokenizer::load(file);
  EXPECT_TRUE(tok.is_ok()) << tok.status().to_string();
  return tok.is_ok() ? std::move(tok).value() : nullptr;
}

std::string trained_model(const testing::TempDir& dir, const std::string& sub, int vocab = 100,
                          const std::string& extra = "") {
  std::string error;
  const std::string model = testing::train_tiny_sentencepiece(dir.path() / sub, vocab, extra, &error);
  EXPECT_FALSE(model.empty()) << "training the test model failed: " << error;
  return model;
}

dsl::ModelSpec model_spec(const std::string& path, std::int64_t vocab) {
  dsl::ModelSpec m;
  m.path = path;
  m.arch.vocab = vocab;
  return m;
}

std::string le_int32(const std::vector<std::int32_t>& ids) {
  std::string out;
  for (std::int32_t id : ids) {
    const auto u = static_cast<std::uint32_t>(id);
    for (int s = 0; s < 32; s += 8) out.push_back(static_cast<char>((u >> s) & 0xff));
  }
  return out;
}

// ---- SentencePieceTokenizer -------------------------------------------------

TEST(SentencePieceTokenizerTest, EncodeDecodeRoundTripWithinTheVocabulary) {
  testing::TempDir dir;
  auto tok = load_or_die(trained_model(dir, "m"));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 100);
  for (const std::string text : {"the lazy dog jumps over the fox", "hello tokens", "question: two plus two?"}) {
    const auto ids = tok->encode(text);
    ASSERT_FALSE(ids.empty());
    EXPECT_LT(ids.size(), text.size()) << "merges make fewer pieces than bytes: " << text;
    for (std::int32_t id : ids) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, tok->vocab_size());
      EXPECT_NE(id, tok->bos_id()) << "encode adds no specials";
      EXPECT_NE(id, tok->eos_id());
    }
    EXPECT_EQ(tok->decode(ids), text);
  }
  EXPECT_TRUE(tok->encode("").empty());
}

TEST(SentencePieceTokenizerTest, SpecialIdsComeFromTheModel) {
  testing::TempDir dir;
  auto defaults = load_or_die(trained_model(dir, "defaults"));
  auto custom = load_or_die(trained_model(dir, "custom", 100, "--unk_id=0 --bos_id=5 --eos_id=6 --pad_id=7"));
  ASSERT_NE(defaults, nullptr);
  ASSERT_NE(custom, nullptr);
  EXPECT_EQ(custom->bos_id(), 5);
  EXPECT_EQ(custom->eos_id(), 6);
  EXPECT_EQ(custom->pad_id(), 7);
  // The trainer's defaults (like Llama-2's model) define no pad piece: EOS stands in.
  EXPECT_NE(defaults->bos_id(), defaults->eos_id());
  EXPECT_EQ(defaults->pad_id(), defaults->eos_id());
}

TEST(SentencePieceTokenizerTest, DecodeSkipsSpecialsAndOutOfRangeIds) {
  testing::TempDir dir;
  auto tok = load_or_die(trained_model(dir, "m"));
  ASSERT_NE(tok, nullptr);
  auto ids = tok->encode("lazy fox");
  ids.insert(ids.begin(), tok->bos_id());
  ids.push_back(tok->eos_id());
  ids.push_back(tok->pad_id());
  ids.push_back(100000);
  ids.push_back(-3);
  EXPECT_EQ(tok->decode(ids), "lazy fox");
}

TEST(SentencePieceTokenizerTest, FingerprintFollowsTheModelFile) {
  testing::TempDir dir;
  const std::string a = trained_model(dir, "a"), b = trained_model(dir, "b", 90);
  auto a1 = load_or_die(a), a2 = load_or_die(a), b1 = load_or_die(b);
  ASSERT_TRUE(a1 && a2 && b1);
  EXPECT_EQ(a1->fingerprint(), a2->fingerprint());
  EXPECT_NE(a1->fingerprint(), b1->fingerprint());
  EXPECT_NE(a1->fingerprint(), ByteTokenizer().fingerprint());
  EXPECT_THAT(a1->describe(), HasSubstr(a));
}

TEST(SentencePieceTokenizerTest, MissingEmptyCorruptAndFolderModelsAreClearErrors) {
  testing::TempDir dir;
  auto r = SentencePieceTokenizer::load(dir.file("nope/tokenizer.model"));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr(dir.file("nope/tokenizer.model")));

  const auto empty = dir.write("empty.model", "");
  r = SentencePieceTokenizer::load(empty);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr(empty + ": empty file"));

  const auto garbage = dir.write("garbage.model", std::string("\xff\xff\xff\xff not a protobuf at all", 27));
  r = SentencePieceTokenizer::load(garbage);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr(garbage + ": not a valid SentencePiece model"));

  // A real model cut in half: the protobuf no longer parses.
  const std::string real = trained_model(dir, "m");
  std::filesystem::resize_file(real, std::filesystem::file_size(real) / 2);
  r = SentencePieceTokenizer::load(real);
  ASSERT_FALSE(r.is_ok());
  EXPECT_THAT(r.status().message(), HasSubstr(real + ": not a valid SentencePiece model"));

  r = SentencePieceTokenizer::load(dir.path().string());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIOError);
}

// ---- make_tokenizer ---------------------------------------------------------

TEST(MakeTokenizerTest, FolderWithTokenizerModelGivesSentencePiece) {
  testing::TempDir dir;
  const std::string model = trained_model(dir, "llama");
  auto tok = make_tokenizer(model_spec(dir.file("llama"), 128));
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->vocab_size(), 100);
  EXPECT_THAT((*tok)->describe(), HasSubstr("SentencePiece " + model));
  EXPECT_EQ((*tok)->decode((*tok)->encode("the quick fox")), "the quick fox");
}

TEST(MakeTokenizerTest, VocabularyLargerThanTheModelsIsAnError) {
  testing::TempDir dir;
  trained_model(dir, "llama");
  EXPECT_TRUE(make_tokenizer(model_spec(dir.file("llama"), 100)).is_ok()) << "equal sizes fit";
  auto tok = make_tokenizer(model_spec(dir.file("llama"), 99));
  ASSERT_FALSE(tok.is_ok());
  EXPECT_EQ(tok.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(tok.status().message(), HasSubstr("has 100 ids but the model's vocabulary (arch.vocab) is 99"));

  auto byte = make_tokenizer(model_spec("", 258));
  ASSERT_FALSE(byte.is_ok());
  EXPECT_THAT(byte.status().message(), HasSubstr("byte-level) has 259 ids"));
}

TEST(MakeTokenizerTest, ModelWithoutBosOrEosIsAnError) {
  testing::TempDir dir;
  trained_model(dir, "nobos", 100, "--bos_id=-1");
  trained_model(dir, "noeos", 100, "--eos_id=-1");
  auto r = make_tokenizer(model_spec(dir.file("nobos"), 128));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("tokenizer.model: the SentencePiece model has no BOS piece"));
  r = make_tokenizer(model_spec(dir.file("noeos"), 128));
  ASSERT_FALSE(r.is_ok());
  EXPECT_THAT(r.status().message(), HasSubstr("has no EOS piece"));
}

// tokenizer.json files of the kinds Tailor does not read are refused naming
// the file and the key (tests/runner/data/bpe_tokenizer_test.cpp checks the ones
// it reads against the tokenizers library).
TEST(MakeTokenizerTest, TokenizerJsonOfAnotherKindIsNamedAsUnsupported) {
  testing::TempDir dir;
  const std::map<std::string, std::string> refused = {
      {R"({"model": {"type": "WordPiece"}})", "model.type \"WordPiece\" is not supported"},
      {R"({"model": {"type": "BPE"}, "normalizer": {"type": "NFKC"}})",
       "normalizer {\"type\":\"NFKC\"} is not supported"},
      {R"({"model": {"type": "BPE"}, "normalizer": {"type": "NFKC"}, "pre_tokenizer": {"type": "ByteLevel"}})",
       "normalizer \"NFKC\" is not supported with a ByteLevel pre-tokenizer"},
      {R"({"model": {"type": "BPE"}, "pre_tokenizer": {"type": "Whitespace"}})",
       "pre_tokenizer {\"type\":\"Whitespace\"} is not supported"},
      {R"({"model": {"type": "BPE"}, "pre_tokenizer": {"type": "Metaspace"}})",
       "pre_tokenizer {\"type\":\"Metaspace\"} is not supported"},
      {R"({"model": {"type": "BPE", "byte_fallback": true}, "pre_tokenizer": {"type": "ByteLevel"}})",
       "model.byte_fallback is not supported with a ByteLevel pre-tokenizer"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "ByteLevel"}})",
       "no EOS token"},
      {"{not json", "not a JSON object"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 4000000000}}, "pre_tokenizer": {"type": "ByteLevel"}})",
       "model.vocab[\"a\"] is not an integer id in [0, 2^24)"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}}, "pre_tokenizer": {"type": "ByteLevel"},
           "added_tokens": [{"id": -5, "content": "<x>"}]})",
       "added_tokens[0] is not {id in [0, 2^24), content}"},
  };
  for (const auto& [text, named] : refused) {
    const auto json = dir.write("hf/tokenizer.json", text);
    auto r = make_tokenizer(model_spec(dir.file("hf"), 32000));
    ASSERT_FALSE(r.is_ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr(json + ": " + named));
  }
}

// Under tailord, a model folder's tokenizer files are read only inside the
// spec root, checked on the file opened: tokenizer.json or
// tokenizer_config.json swapped for a link out of it is refused by name.
TEST(MakeTokenizerTest, TokenizerFilesLinkedOutOfTheSpecRootAreRefused) {
  testing::TempDir root, elsewhere;
  const std::string bpe =
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "<|endoftext|>": 1}, "merges": []}, "pre_tokenizer": {"type": "ByteLevel"}})";
  elsewhere.write("secret/tokenizer.json", bpe);
  elsewhere.write("secret/tokenizer_config.json", R"({"eos_token": "a"})");
  std::filesystem::create_directories(root.file("linked"));
  std::filesystem::create_symlink(elsewhere.file("secret/tokenizer.json"), root.file("linked/tokenizer.json"));
  root.write("config-linked/tokenizer.json", bpe);
  std::filesystem::create_symlink(elsewhere.file("secret/tokenizer_config.json"),
                                  root.file("config-linked/tokenizer_config.json"));
  root.write("inside/tokenizer.json", bpe);
  root.write("inside/tokenizer_config.json", R"({"eos_token": "a"})");
  ASSERT_TRUE(set_read_root(root.path().string()).is_ok());
  struct Reset {
    ~Reset() { (void)set_read_root(""); }
  } reset;
  for (const char* folder : {"linked", "config-linked"}) {
    auto r = make_tokenizer(model_spec(root.file(folder), 32000));
    ASSERT_FALSE(r.is_ok()) << folder;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << folder;
    EXPECT_THAT(r.status().message(), HasSubstr("outside the spec root")) << folder;
  }
  EXPECT_TRUE(make_tokenizer(model_spec(root.file("inside"), 32000)).is_ok());
  (void)set_read_root("");
  // No root (tailor run): what it is given is read.
  EXPECT_TRUE(make_tokenizer(model_spec(root.file("linked"), 32000)).is_ok());
}

// GPT-2 style folders trained on byte ids with exit 0 before.
TEST(MakeTokenizerTest, VocabAndMergesFolderIsNamedAsUnsupportedNotTrainedOnBytes) {
  testing::TempDir dir;
  dir.write("gpt2/vocab.json", "{\"a\": 0}");
  const auto merges = dir.write("gpt2/merges.txt", "#version: 0.2\n");
  auto r = make_tokenizer(model_spec(dir.file("gpt2"), 50257));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr(merges + ": byte-level BPE (vocab.json + merges.txt) files are not supported"));
  dir.write("bert/vocab.txt", "[PAD]\n");
  EXPECT_FALSE(make_tokenizer(model_spec(dir.file("bert"), 30522)).is_ok());
}

// Only a model without a folder (a preset, an inline arch) gets the byte
// tokenizer; a folder without tokenizer files trained on byte ids before and
// exported 256 as the BOS of a model whose vocabulary means something else.
// `tailor validate` refuses it; the runner checks again, never falling back.
TEST(MakeTokenizerTest, OnlyAModelWithoutAFolderGetsTheByteTokenizer) {
  testing::TempDir dir;
  auto tok = make_tokenizer(model_spec("", 260));
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->fingerprint(), ByteTokenizer().fingerprint());
  EXPECT_EQ((*tok)->bos_id(), ByteTokenizer::kBos);

  dir.write("plain/config.json", "{}");
  auto plain = make_tokenizer(model_spec(dir.file("plain"), 968));
  ASSERT_FALSE(plain.is_ok());
  EXPECT_EQ(plain.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(plain.status().message(), HasSubstr("model folder " + dir.file("plain") +
                                                  " has no tokenizer files (looked for tokenizer.model and "
                                                  "tokenizer.json)"));
}

TEST(MakeTokenizerTest, CorruptTokenizerModelInTheFolderIsAnError) {
  testing::TempDir dir;
  const auto bad = dir.write("m/tokenizer.model", "not a model");
  auto r = make_tokenizer(model_spec(dir.file("m"), 32000));
  ASSERT_FALSE(r.is_ok());
  EXPECT_THAT(r.status().message(), HasSubstr(bad + ": not a valid SentencePiece model"));
}

// ---- the dataset and batcher with a tokenizer's own ids ---------------------

TEST(SentencePieceDatasetTest, DocumentsUseTheModelsBosEosAndMaskThePrompt) {
  testing::TempDir dir;
  auto tok = load_or_die(trained_model(dir, "m", 100, "--bos_id=5 --eos_id=6"));
  ASSERT_NE(tok, nullptr);
  const auto path = dir.write("pairs.jsonl", "{\"p\": \"question: two plus two?\", \"c\": \"four.\"}\n");
  dsl::DataSpec spec;
  spec.format = dsl::DataFormat::kJsonl;
  spec.prompt_field = "p";
  spec.completion_field = "c";
  const auto examples = load_examples(path, spec, *tok);
  ASSERT_TRUE(examples.is_ok()) << examples.status().to_string();
  ASSERT_EQ(examples->size(), 1u);
  const Example& ex = examples->front();
  // Encoded together, as TRL does: apart, "four." would gain the word-start
  // "▁" the text does not have.
  const auto prompt = tok->encode("question: two plus two?");
  const auto whole = tok->encode("question: two plus two?four.");
  ASSERT_TRUE(std::equal(prompt.begin(), prompt.end(), whole.begin()));
  EXPECT_NE(tok->encode("four.").front(), whole[prompt.size()]);
  std::vector<std::int32_t> expected{5};
  expected.insert(expected.end(), whole.begin(), whole.end());
  expected.push_back(6);
  EXPECT_EQ(ex.tokens, expected);
  EXPECT_EQ(std::count(ex.trained.begin(), ex.trained.end(), 0), static_cast<long>(1 + prompt.size()));
  const std::vector<std::int32_t> trained(ex.tokens.begin() + 1 + static_cast<long>(prompt.size()),
                                          ex.tokens.end() - 1);
  EXPECT_EQ(tok->decode(trained), "four.");
  EXPECT_EQ(ex.trained.back(), 1);
}

TEST(SentencePieceDatasetTest, TokensFilesSplitOnTheModelsEos) {
  testing::TempDir dir;
  auto tok = load_or_die(trained_model(dir, "m", 100, "--bos_id=5 --eos_id=6"));
  ASSERT_NE(tok, nullptr);
  // 257 (the byte tokenizer's EOS) is an ordinary id here.
  const auto path = dir.write("data.tokens", le_int32({40, 257, 6, 5, 41, 6, 6, 42}));
  dsl::DataSpec spec;
  spec.format = dsl::DataFormat::kTokens;
  const auto examples = load_examples(path, spec, *tok);
  ASSERT_TRUE(examples.is_ok()) << examples.status().to_string();
  ASSERT_EQ(examples->size(), 3u);
  EXPECT_EQ((*examples)[0].tokens, (std::vector<std::int32_t>{5, 40, 257, 6}));
  EXPECT_EQ((*examples)[1].tokens, (std::vector<std::int32_t>{5, 41, 6}));  // its own BOS not doubled
  EXPECT_EQ((*examples)[2].tokens, (std::vector<std::int32_t>{5, 42, 6}));
}

TEST(SentencePieceDatasetTest, BatcherPadsWithTheTokenizersPadId) {
  testing::TempDir dir;
  auto tok = load_or_die(trained_model(dir, "m", 100, "--bos_id=5 --eos_id=6 --pad_id=7"));
  ASSERT_NE(tok, nullptr);
  const auto path = dir.write("d.txt", "the lazy dog\n\nthe quick brown fox jumps over the lazy dog\n");
  dsl::DataSpec spec;
  spec.format = dsl::DataFormat::kText;
  auto store = tokenize_file(path, spec, *tok);
  ASSERT_TRUE(store.is_ok()) << store.status().to_string();
  Batcher batcher(*store, 64, /*packing=*/false, /*micro_batch=*/2, 1, tok->pad_id());
  const Batch b = batcher.next();
  std::int64_t pads = 0;
  for (std::size_t i = 0; i < b.inputs.size(); ++i) {
    if (b.segment_ids[i] == -1) {
      EXPECT_EQ(b.inputs[i], 7);
      ++pads;
    }
  }
  EXPECT_GT(pads, 0) << "the shorter document is padded";
}

}  // namespace
}  // namespace tailor::runner::data
