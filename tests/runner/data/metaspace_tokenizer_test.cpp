// SentencePiece-style tokenizer.json folders against transformers itself
// (metaspace_reference.py in .venv): Llama 2's and Mistral's LlamaTokenizer
// (a prefix on the first piece, on every piece when legacy, on none),
// Gemma's GemmaTokenizer and two PreTrainedTokenizerFast pipelines give the
// same ids, offsets and decodings on lines with specials spelled in them,
// byte fallback, whitespace runs and a long line; the folder's
// tokenizer.json is preferred to its tokenizer.model; what Tailor cannot
// read is refused by name.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dsl/tokenizer_files.h"
#include "runner/data/metaspace_tokenizer.h"
#include "runner/data/tokenizer.h"
#include "tests/runner/data/tiny_sentencepiece.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/text_file.h"

namespace tailor::runner::data {
namespace {

using nlohmann::json;

// The reference folders, made once for the whole suite (about 8 s).
class MetaspaceReference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new tailor::testing::TempDir();
    const std::string cmd = std::string(TAILOR_SOURCE_DIR) + "/.venv/bin/python " + TAILOR_SOURCE_DIR +
                            "/tests/runner/data/metaspace_reference.py " + dir_->path().string() + " >" +
                            dir_->file("python.log") + " 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << "\n" << tailor::testing::read_text(dir_->file("python.log"));
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string folder(const std::string& name) { return dir_->file(name); }
  static json read_json(const std::string& path) { return json::parse(tailor::testing::read_text(path)); }
  static std::unique_ptr<Tokenizer> tokenizer(const std::string& name) {
    dsl::ModelSpec model;
    model.path = folder(name);
    model.arch.vocab = 1000;
    auto tok = make_tokenizer(model);
    EXPECT_TRUE(tok.is_ok()) << tok.status().to_string();
    return tok.is_ok() ? std::move(tok).value() : nullptr;
  }
  static tailor::testing::TempDir* dir_;
};
tailor::testing::TempDir* MetaspaceReference::dir_ = nullptr;

TEST_F(MetaspaceReference, IdsOffsetsAndDecodingsEqualTransformersForEveryPipeline) {
  const json lines = read_json(dir_->file("lines.json"));
  for (const char* name :
       {"llama2", "llama2_legacy", "llama_no_prefix", "gemma", "prepend_normalizer", "metaspace_split"}) {
    SCOPED_TRACE(name);
    const auto tok = tokenizer(name);
    ASSERT_NE(tok, nullptr);
    // tokenizer.model lies beside tokenizer.json in the transformers-written
    // folders: the tokenizer.json is read, as transformers reads it.
    EXPECT_NE(tok->describe().find("SentencePiece-style BPE"), std::string::npos) << tok->describe();
    const json expected = read_json(folder(name) + "/expected.json");
    EXPECT_EQ(tok->bos_id(), expected["bos"].get<std::int32_t>());
    EXPECT_EQ(tok->eos_id(), expected["eos"].get<std::int32_t>());
    EXPECT_EQ(tok->vocab_size(), expected["vocab"].get<std::int64_t>());
    for (std::int32_t id : expected["special"].get<std::vector<std::int32_t>>())
      EXPECT_TRUE(tok->is_special(id)) << id;
    std::size_t tokens = 0, byte_tokens = 0;
    for (std::size_t i = 0; i < lines.size(); ++i) {
      const std::string line = lines[i].get<std::string>();
      const json& row = expected["rows"][i];
      const auto ids = tok->encode(line);
      EXPECT_EQ(ids, row["ids"].get<std::vector<std::int32_t>>()) << line;
      auto with = tok->encode_with_offsets(line);
      ASSERT_TRUE(with.is_ok()) << with.status().to_string();
      EXPECT_EQ(with->ids, ids) << line;
      std::vector<std::pair<std::uint32_t, std::uint32_t>> offsets;
      for (const json& o : row["offsets"])
        offsets.emplace_back(o[0].get<std::uint32_t>(), o[1].get<std::uint32_t>());
      EXPECT_EQ(with->offsets, offsets) << line;
      EXPECT_EQ(tok->decode(ids), row["decoded"].get<std::string>()) << line;
      tokens += ids.size();
      for (std::int32_t id : ids)
        byte_tokens += tok->decode({id}).find("\xEF\xBF\xBD") != std::string::npos;
    }
    EXPECT_GT(tokens, 400u);
    EXPECT_GT(byte_tokens, 10u) << "the lines exercise byte fallback";
  }
}

TEST_F(MetaspaceReference, TheSameFolderWithoutItsTokenizerJsonIsReadWithSentencePiece) {
  tailor::testing::TempDir only_model;
  std::filesystem::copy_file(folder("llama2") + "/tokenizer.model", only_model.file("tokenizer.model"));
  auto choice = dsl::choose_tokenizer(only_model.path().string());
  ASSERT_TRUE(choice.is_ok()) << choice.status().to_string();
  EXPECT_EQ(choice->kind, dsl::TokenizerKind::kSentencePiece);
  auto both = dsl::choose_tokenizer(folder("llama2"));
  ASSERT_TRUE(both.is_ok()) << both.status().to_string();
  EXPECT_EQ(both->kind, dsl::TokenizerKind::kMetaspaceBpe);
  EXPECT_EQ(both->file, folder("llama2") + "/tokenizer.json");
}

// A copy of the llama2 folder with `edit` applied to its tokenizer.json and
// `config` as its tokenizer_config.json, without its tokenizer.model.
std::string edited_copy(const tailor::testing::TempDir& dir, const std::string& source,
                        const std::function<void(json&)>& edit, const json& config) {
  json j = json::parse(tailor::testing::read_text(source + "/tokenizer.json"));
  edit(j);
  std::ofstream(dir.file("tokenizer.json")) << j.dump();
  std::ofstream(dir.file("tokenizer_config.json")) << config.dump();
  return dir.path().string();
}

TEST_F(MetaspaceReference, WhatTailorDoesNotReadIsRefusedByName) {
  const json fast = {{"tokenizer_class", "PreTrainedTokenizerFast"}, {"eos_token", "</s>"}};
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    json config;
    std::vector<std::string> expected;
    // Refused when the folder is chosen, so a tokenizer.model beside it is
    // read instead; else (a broken file of a kind Tailor reads) when loaded.
    bool chosen_against = true;
  };
  const std::vector<Case> cases = {
      {"a precompiled normalizer",
       [](json& j) {
         j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "AAAA"}};
       },
       fast,
       {"tokenizer.json", "normalizer", "Precompiled", "is not supported"}},
      {"a regex Replace",
       [](json& j) {
         j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", "\xE2\x96\x81"}};
       },
       fast,
       {"normalizer", "Regex"}},
      {"a Metaspace decoder",
       [](json& j) {
         j["decoder"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}};
       },
       fast,
       {"decoder", "Metaspace"}},
      {"a class whose pipeline Tailor does not know",
       [](json&) {},
       json{{"tokenizer_class", "T5Tokenizer"}, {"eos_token", "</s>"}},
       {"tokenizer_config.json", "T5Tokenizer", "is not supported"}},
      {"a merge whose result is not in the vocabulary",
       [](json& j) {
         j["model"]["merges"][3] = json::array({"<0x41>", "<0x42>"});
       },
       fast,
       {"model.merges[3]", "not in model.vocab"},
       false},
      {"an Unigram model", [](json& j) { j["model"]["type"] = "Unigram"; }, fast, {"model.type", "Unigram"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    tailor::testing::TempDir dir;
    dsl::ModelSpec model;
    model.path = edited_copy(dir, folder("llama2"), c.edit, c.config);
    model.arch.vocab = 1000;
    auto tok = make_tokenizer(model);
    ASSERT_FALSE(tok.is_ok());
    EXPECT_EQ(tok.status().code(), StatusCode::kInvalidArgument);
    for (const std::string& part : c.expected)
      EXPECT_NE(tok.status().message().find(part), std::string::npos) << tok.status().message();
    if (!c.chosen_against) continue;
    // With the SentencePiece model beside it, that is read instead.
    std::filesystem::copy_file(folder("llama2") + "/tokenizer.model", dir.file("tokenizer.model"));
    auto fallback = dsl::choose_tokenizer(model.path);
    ASSERT_TRUE(fallback.is_ok()) << fallback.status().to_string();
    EXPECT_EQ(fallback->kind, dsl::TokenizerKind::kSentencePiece);
  }
}

// A piece of thousands of characters (no pre-tokenizer split: Llama's
// Metaspace keeps a paragraph whole) merges to what transformers gives for
// its parts joined, and decodes back.
TEST_F(MetaspaceReference, AWholeParagraphIsOnePieceAndDecodesBack) {
  const auto tok = tokenizer("llama2");
  ASSERT_NE(tok, nullptr);
  std::string text;
  for (int i = 0; i < 400; ++i)
    text += "the quick brown fox jumps over the lazy dog, and Paris is the capital. ";
  const auto ids = tok->encode(text);
  EXPECT_GT(ids.size(), 4000u);
  EXPECT_EQ(tok->decode(ids), text);
}

}  // namespace
}  // namespace tailor::runner::data
