// tokenizer.json byte-level BPE against the `tokenizers` library itself:
// tokenizers trained by it (GPT-2's pre-tokenizer; Llama 3's regex Split with
// ignore_merges and its special tokens; Qwen2's NFC normalizer) give the same
// ids on a multilingual corpus (scripts, emoji with joiners, digits,
// whitespace runs, code, decomposed accents), and decoding gives the text
// back.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runner/data/bpe_tokenizer.h"
#include "runner/data/byte_tokenizer.h"
#include "runner/data/tokenizer.h"
#include "tests/testing/python_scripts.h"
#include "tests/testing/temp_dir.h"

namespace tailor::runner::data {
namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

TEST(BpeTokenizerTest, IdsEqualTheTokenizersLibrarysOnAMultilingualCorpus) {
  tailor::testing::TempDir dir;
  ASSERT_TRUE(tailor::testing::run_python_script(std::string(TAILOR_SOURCE_DIR) + "/tests/runner/hf_reference.py",
                                                 "tokenizers " + dir.path().string(), dir.file("python.log")));
  const nlohmann::json lines = read_json(dir.file("lines.json"));
  for (const char* name : {"gpt2", "llama3", "qwen2"}) {
    SCOPED_TRACE(name);
    dsl::ModelSpec model;
    model.path = dir.file(name);
    model.arch.vocab = 1000;
    auto tok = make_tokenizer(model);
    ASSERT_TRUE(tok.is_ok()) << tok.status().message();
    EXPECT_NE((*tok)->describe().find("byte-level BPE"), std::string::npos);
    const nlohmann::json expected = read_json(dir.file(std::string(name) + "/ids.json"));
    ASSERT_EQ(expected.size(), lines.size());
    std::size_t tokens = 0;
    for (std::size_t i = 0; i < lines.size(); ++i) {
      const std::string line = lines[i].get<std::string>();
      const std::vector<std::int32_t> ids = (*tok)->encode(line);
      EXPECT_EQ(ids, expected[i].get<std::vector<std::int32_t>>()) << line;
      // With offsets: the same ids, each standing for the next bytes of the
      // line, all of them in order (NFC's recomposed characters included).
      auto with = (*tok)->encode_with_offsets(line);
      ASSERT_TRUE(with.is_ok()) << with.status().to_string();
      EXPECT_EQ(with->ids, ids) << line;
      ASSERT_EQ(with->offsets.size(), ids.size());
      std::uint32_t at = 0;
      for (const auto& [begin, end] : with->offsets) {
        EXPECT_LE(begin, at) << line;
        EXPECT_GE(end, begin) << line;
        at = std::max(at, end);
      }
      EXPECT_EQ(at, line.size()) << line;
      tokens += ids.size();
      // Special tokens decode to nothing; everything else comes back (NFC
      // composed under Qwen2's normalizer).
      if (line.find("<|") == std::string::npos && line.find("Decomposed") == std::string::npos) {
        EXPECT_EQ((*tok)->decode(ids), line);
      }
    }
    EXPECT_GT(tokens, lines.size());
    const nlohmann::json vocab = read_json(dir.file(std::string(name) + "/tokenizer.json"));
    auto id_of = [&](const std::string& t) {
      for (const auto& a : vocab["added_tokens"]) {
        if (a["content"] == t) return a["id"].get<std::int32_t>();
      }
      return -1;
    };
    if (std::string(name) != "llama3") {  // no BOS: documents start with the EOS, as GPT-2's do
      EXPECT_EQ((*tok)->bos_id(), id_of("<|endoftext|>"));
      EXPECT_EQ((*tok)->eos_id(), id_of("<|endoftext|>"));
    } else {
      EXPECT_EQ((*tok)->bos_id(), id_of("<|begin_of_text|>"));
      EXPECT_EQ((*tok)->eos_id(), id_of("<|end_of_text|>"));
    }
  }
}

// A model trained from scratch on bytes is exported with a tokenizer.json
// that says so: transformers reads it as the byte tokenizer's ids (and its
// BOS, EOS and padding), and so does Tailor when the folder is model.path.
TEST(BpeTokenizerTest, TheByteTokenizersFilesReadAsTheSameIdsInTransformersAndTailor) {
  tailor::testing::TempDir dir;
  std::ofstream(dir.file("tokenizer.json")) << byte_tokenizer_json();
  std::ofstream(dir.file("tokenizer_config.json")) << byte_tokenizer_config_json();
  const std::vector<std::string> lines = {"Hello, world!", "  two  spaces\tand a tab\nnew line",
                                          "caf\xC3\xA9 \xCE\xBB \xE2\x9C\x93 \xF0\x9F\x99\x82"};
  std::ofstream(dir.file("lines.json")) << nlohmann::json(lines).dump();
  ASSERT_TRUE(tailor::testing::run_python_script(std::string(TAILOR_SOURCE_DIR) + "/tests/runner/hf_reference.py",
                                                 "encode " + dir.path().string(), dir.file("python.log")));
  const nlohmann::json hf = read_json(dir.file("encoded.json"));
  dsl::ModelSpec model;
  model.path = dir.path().string();
  model.arch.vocab = 260;
  auto tok = make_tokenizer(model);
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  const ByteTokenizer bytes;
  EXPECT_EQ(hf["bos"], ByteTokenizer::kBos);
  EXPECT_EQ(hf["eos"], ByteTokenizer::kEos);
  EXPECT_EQ(hf["pad"], ByteTokenizer::kPad);
  EXPECT_EQ((*tok)->bos_id(), ByteTokenizer::kBos);
  EXPECT_EQ((*tok)->eos_id(), ByteTokenizer::kEos);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(hf["ids"][i].get<std::vector<std::int32_t>>(), bytes.encode(lines[i])) << lines[i];
    EXPECT_EQ((*tok)->encode(lines[i]), bytes.encode(lines[i])) << lines[i];
    EXPECT_EQ(hf["decoded"][i], lines[i]);
  }
}

}  // namespace
}  // namespace tailor::runner::data
