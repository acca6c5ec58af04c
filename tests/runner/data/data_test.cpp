// Tests of the torch-free data pipeline: byte tokenizer, dataset loading
// (text, jsonl, tokens) and the batcher (packing, padding, order, resume).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "runner/data/batcher.h"
#include "runner/data/byte_tokenizer.h"
#include "runner/data/dataset.h"
#include "runner/data/file_io.h"
#include "runner/data/token_cache.h"
#include "tests/testing/temp_dir.h"

namespace tailor::runner::data {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr std::int32_t B = ByteTokenizer::kBos;
constexpr std::int32_t E = ByteTokenizer::kEos;
constexpr std::int32_t P = ByteTokenizer::kPad;
constexpr std::int32_t X = -100;  // ignored target

dsl::DataSpec spec_of(dsl::DataFormat format) {
  dsl::DataSpec spec;
  spec.format = format;
  return spec;
}

dsl::DataSpec pairs_spec() {
  dsl::DataSpec spec = spec_of(dsl::DataFormat::kJsonl);
  spec.prompt_field = "prompt";
  spec.completion_field = "completion";
  return spec;
}

// A document as load_examples makes it from plain text.
Example doc(std::string_view text) {
  Example ex{{B}, {0}};
  for (std::int32_t id : ByteTokenizer().encode(text)) {
    ex.tokens.push_back(id);
    ex.trained.push_back(1);
  }
  ex.tokens.push_back(E);
  ex.trained.push_back(1);
  return ex;
}

// Documents of lengths 3.. (content 1..n bytes), each with distinct bytes.
std::vector<Example> docs_of_lengths(int n) {
  std::vector<Example> out;
  for (int i = 0; i < n; ++i) out.push_back(doc(std::string(static_cast<std::size_t>(1 + i % 13), static_cast<char>('a' + i % 26))));
  return out;
}

std::int64_t trained_tokens(const std::vector<Example>& examples) {
  std::int64_t n = 0;
  for (const Example& ex : examples) n += std::count(ex.trained.begin(), ex.trained.end(), 1);
  return n;
}

std::string le_int32(const std::vector<std::int32_t>& ids) {
  std::string out;
  for (std::int32_t id : ids) {
    const auto u = static_cast<std::uint32_t>(id);
    for (int s = 0; s < 32; s += 8) out.push_back(static_cast<char>((u >> s) & 0xff));
  }
  return out;
}

std::vector<std::int32_t> row_of(const std::vector<std::int32_t>& v, const Batch& b, std::int64_t r) {
  return {v.begin() + r * b.seq_len, v.begin() + (r + 1) * b.seq_len};
}

bool same_batch(const Batch& a, const Batch& b) {
  return a.rows == b.rows && a.seq_len == b.seq_len && a.inputs == b.inputs && a.targets == b.targets &&
         a.positions == b.positions && a.segment_ids == b.segment_ids && a.target_tokens == b.target_tokens;
}

// Every array has rows * seq_len cells and target_tokens counts the targets.
void expect_consistent(const Batch& b) {
  const auto cells = static_cast<std::size_t>(b.rows * b.seq_len);
  ASSERT_EQ(b.inputs.size(), cells);
  ASSERT_EQ(b.targets.size(), cells);
  ASSERT_EQ(b.positions.size(), cells);
  ASSERT_EQ(b.segment_ids.size(), cells);
  EXPECT_EQ(b.target_tokens, static_cast<std::int64_t>(cells) - std::count(b.targets.begin(), b.targets.end(), X));
  for (std::size_t i = 0; i < cells; ++i) {
    if (b.segment_ids[i] == -1) {
      EXPECT_EQ(b.inputs[i], P);
      EXPECT_EQ(b.targets[i], X);
    }
  }
}

// ---- ByteTokenizer ----------------------------------------------------------

TEST(ByteTokenizerTest, RoundTripsAsciiAndUtf8Bytes) {
  const ByteTokenizer tok;
  const std::string text = "h\xC3\xA9llo \xE2\x9C\x93 \xF0\x9F\x99\x82\n\t\x01";  // héllo ✓ 🙂
  const auto ids = tok.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[0], 'h');
  EXPECT_EQ(ids[1], 0xC3);  // bytes >= 0x80 map to 128..255, never negative
  EXPECT_EQ(ids[2], 0xA9);
  for (std::int32_t id : ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 256);
  }
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_TRUE(tok.encode("").empty());
}

TEST(ByteTokenizerTest, DecodeSkipsSpecialsAndUnknownIds) {
  const ByteTokenizer tok;
  EXPECT_EQ(tok.decode({B, 'h', 'i', P, E, 259, -1, 0xFF}), "hi\xFF");
  EXPECT_EQ(ByteTokenizer::kVocabSize, 259);
}

// ---- load_examples: jsonl ---------------------------------------------------

TEST(DatasetTest, JsonlFieldGivesBosContentEosAllTrainedButBos) {
  testing::TempDir dir;
  const auto path = dir.write("data.jsonl", "{\"text\": \"hi\"}\n\n{\"text\": \"\\u00e9\", \"other\": 1}\n");
  const auto examples = load_examples(path, spec_of(dsl::DataFormat::kJsonl), ByteTokenizer());
  ASSERT_TRUE(examples.is_ok()) << examples.status().to_string();
  ASSERT_EQ(examples->size(), 2u);
  EXPECT_THAT((*examples)[0].tokens, ElementsAre(B, 'h', 'i', E));
  EXPECT_THAT((*examples)[0].trained, ElementsAre(0, 1, 1, 1));
  EXPECT_THAT((*examples)[1].tokens, ElementsAre(B, 0xC3, 0xA9, E));  // UTF-8 of é
}

TEST(DatasetTest, JsonlCustomFieldAndEmptyDocumentsSkipped) {
  testing::TempDir dir;
  const auto path = dir.write("data.jsonl", "{\"body\": \"\"}\n{\"body\": \"x\"}\r\n");
  dsl::DataSpec spec = spec_of(dsl::DataFormat::kJsonl);
  spec.field = "body";
  const auto examples = load_examples(path, spec, ByteTokenizer());
  ASSERT_TRUE(examples.is_ok()) << examples.status().to_string();
  ASSERT_EQ(examples->size(), 1u);
  EXPECT_THAT((*examples)[0].tokens, ElementsAre(B, 'x', E));
}

TEST(DatasetTest, JsonlPromptCompletionMasksBosAndPrompt) {
  testing::TempDir dir;
  const auto path = dir.write("data.jsonl",
                              "{\"prompt\": \"Q:ab\\n\", \"completion\": \"cd\"}\n"
                              "{\"prompt\": \"\", \"completion\": \"z\"}\n");
  const auto examples = load_examples(path, pairs_spec(), ByteTokenizer());
  ASSERT_TRUE(examples.is_ok()) << examples.status().to_string();
  ASSERT_EQ(examples->size(), 2u);
  EXPECT_THAT((*examples)[0].tokens, ElementsAre(B, 'Q', ':', 'a', 'b', '\n', 'c', 'd', E));
  EXPECT_THAT((*examples)[0].trained, ElementsAre(0, 0, 0, 0, 0, 0, 1, 1, 1));
  EXPECT_THAT((*examples)[1].tokens, ElementsAre(B, 'z', E));
  EXPECT_THAT((*examples)[1].trained, ElementsAre(0, 1, 1));
}

// A JSON array is read element by element into the same documents as the
// JSON Lines holding the same records.
TEST(DatasetTest, JsonArrayGivesTheDocumentsOfTheSameJsonLines) {
  testing::TempDir dir;
  const auto lines = dir.write("data.jsonl",
                               "{\"prompt\": \"Q:ab\\n\", \"completion\": \"cd\"}\n"
                               "{\"prompt\": \"\", \"completion\": \"z\"}\n");
  const auto array = dir.write("data.json",
                               "[\n  {\"prompt\": \"Q:ab\\n\", \"completion\": \"cd\"},\n"
                               "  {\"prompt\": \"\", \"completion\": \"z\"}\n]\n");
  dsl::DataSpec spec = pairs_spec();
  const auto from_lines = load_examples(lines, spec, ByteTokenizer());
  spec.format = dsl::DataFormat::kJson;
  const auto from_array = load_examples(array, spec, ByteTokenizer());
  const auto json_lines = load_examples(lines, spec, ByteTokenizer());  // json reads JSON Lines too
  ASSERT_TRUE(from_lines.is_ok() && from_array.is_ok() && json_lines.is_ok()) << from_array.status().to_string();
  ASSERT_EQ(from_array->size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ((*from_array)[i].tokens, (*from_lines)[i].tokens);
    EXPECT_EQ((*from_array)[i].trained, (*from_lines)[i].trained);
    EXPECT_EQ((*json_lines)[i].tokens, (*from_lines)[i].tokens);
  }
  spec.format = dsl::DataFormat::kJsonl;
  const auto refused = load_examples(array, spec, ByteTokenizer());
  ASSERT_FALSE(refused.is_ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("data.json:1: this file is a JSON array, not JSON Lines"));
}

TEST(DatasetTest, JsonlBadJsonNamesFileLineAndColumn) {
  testing::TempDir dir;
  const auto path = dir.write("data.jsonl", "{\"text\": \"ok\"}\n{\"text\": oops}\n");
  const auto examples = load_examples(path, spec_of(dsl::DataFormat::kJsonl), ByteTokenizer());
  ASSERT_FALSE(examples.is_ok());
  EXPECT_EQ(examples.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(examples.status().message(), HasSubstr("data.jsonl:2:10: not valid JSON: "));
  EXPECT_THAT(examples.status().message(), Not(HasSubstr("json.exception")));
}

TEST(DatasetTest, JsonlMissingFieldNamesFileAndLine) {
  testing::TempDir dir;
  const auto path = dir.write("data.jsonl",
                              "{\"prompt\": \"a\", \"completion\": \"b\"}\n\n"
                              "{\"prompt\": \"a\"}\n");
  const auto examples = load_examples(path, pairs_spec(), ByteTokenizer());
  ASSERT_FALSE(examples.is_ok());
  EXPECT_EQ(examples.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(examples.status().message(), path + ":3: missing field \"completion\" (the record has \"prompt\")");
}

TEST(DatasetTest, JsonlWrongTypesNameFileAndLine) {
  testing::TempDir dir;
  const auto not_string = dir.write("a.jsonl", "{\"text\": 5}\n");
  auto r = load_examples(not_string, spec_of(dsl::DataFormat::kJsonl), ByteTokenizer());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), not_string + ":1: field \"text\" must be a string, got number");

  const auto not_object = dir.write("b.jsonl", "{\"text\": \"a\"}\n[\"text\"]\n");
  r = load_examples(not_object, spec_of(dsl::DataFormat::kJsonl), ByteTokenizer());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), not_object + ":2: expected a JSON object, got array");
}

TEST(DatasetTest, PromptFieldWithoutCompletionFieldIsAnError) {
  testing::TempDir dir;
  const auto path = dir.write("data.jsonl", "{\"prompt\": \"a\"}\n");
  dsl::DataSpec spec = spec_of(dsl::DataFormat::kJsonl);
  spec.prompt_field = "prompt";
  const auto r = load_examples(path, spec, ByteTokenizer());
  ASSERT_FALSE(r.is_ok());
  EXPECT_THAT(r.status().message(), HasSubstr("must be set together"));
}

// ---- load_examples: text ----------------------------------------------------

TEST(DatasetTest, TextSplitsParagraphsOnBlankLines) {
  testing::TempDir dir;
  const auto path = dir.write("book.txt", "\xEF\xBB\xBF\nfirst line\nsecond\n\n\n  \t\nthird\r\n\r\nfourth");
  const ByteTokenizer tok;
  const auto examples = load_examples(path, spec_of(dsl::DataFormat::kText), tok);
  ASSERT_TRUE(examples.is_ok()) << examples.status().to_string();
  std::vector<std::string> texts;
  for (const Example& ex : *examples) {
    EXPECT_EQ(ex.tokens.front(), B);
    EXPECT_EQ(ex.tokens.back(), E);
    EXPECT_EQ(ex.trained.front(), 0);
    EXPECT_EQ(std::count(ex.trained.begin(), ex.trained.end(), 1), static_cast<long>(ex.tokens.size()) - 1);
    texts.push_back(tok.decode(ex.tokens));
  }
  EXPECT_THAT(texts, ElementsAre("first line\nsecond", "third", "fourth"));
}

// ---- load_examples: tokens --------------------------------------------------

TEST(DatasetTest, TokensFileRoundTrip) {
  testing::TempDir dir;
  const auto path = dir.write("data.tokens", le_int32({1, 2, E, B, 70000, 255, E, E, 5}));
  const auto examples = load_examples(path, spec_of(dsl::DataFormat::kTokens), ByteTokenizer());
  ASSERT_TRUE(examples.is_ok()) << examples.status().to_string();
  ASSERT_EQ(examples->size(), 3u);
  EXPECT_THAT((*examples)[0].tokens, ElementsAre(B, 1, 2, E));
  EXPECT_THAT((*examples)[0].trained, ElementsAre(0, 1, 1, 1));
  EXPECT_THAT((*examples)[1].tokens, ElementsAre(B, 70000, 255, E));  // its own BOS not doubled
  EXPECT_THAT((*examples)[2].tokens, ElementsAre(B, 5, E));           // last document lacks its EOS
}

TEST(DatasetTest, TokensFileWithTornOrNegativeIdsIsAnError) {
  testing::TempDir dir;
  const auto torn = dir.write("torn.bin", le_int32({1, 2}) + "x");
  auto r = load_examples(torn, spec_of(dsl::DataFormat::kTokens), ByteTokenizer());
  ASSERT_FALSE(r.is_ok());
  EXPECT_THAT(r.status().message(), HasSubstr("torn.bin: size 9 bytes is not a multiple of 4"));

  const auto negative = dir.write("neg.bin", le_int32({1, 2, -7}));
  r = load_examples(negative, spec_of(dsl::DataFormat::kTokens), ByteTokenizer());
  ASSERT_FALSE(r.is_ok());
  EXPECT_THAT(r.status().message(), HasSubstr("neg.bin: token 2 (byte 8): negative id -7"));
}

// ---- load_examples: empty and missing files ---------------------------------

TEST(DatasetTest, EmptyFileIsAnErrorInEveryFormat) {
  testing::TempDir dir;
  const auto empty = dir.write("empty", "");
  const auto blank = dir.write("blank", "\n  \n\n");
  for (auto format : {dsl::DataFormat::kJsonl, dsl::DataFormat::kText, dsl::DataFormat::kTokens}) {
    const auto r = load_examples(empty, spec_of(format), ByteTokenizer());
    ASSERT_FALSE(r.is_ok()) << dsl::to_string(format);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr(empty + ": no documents"));
  }
  for (auto format : {dsl::DataFormat::kJsonl, dsl::DataFormat::kText}) {
    EXPECT_FALSE(load_examples(blank, spec_of(format), ByteTokenizer()).is_ok()) << dsl::to_string(format);
  }
  const auto only_separators = dir.write("eos.bin", le_int32({E, E}));
  EXPECT_FALSE(load_examples(only_separators, spec_of(dsl::DataFormat::kTokens), ByteTokenizer()).is_ok());
}

TEST(DatasetTest, MissingFileIsNotFound) {
  testing::TempDir dir;
  const auto r = load_examples(dir.file("nope.jsonl"), spec_of(dsl::DataFormat::kJsonl), ByteTokenizer());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("nope.jsonl"));
}

// ---- Batcher: packing -------------------------------------------------------

TEST(BatcherTest, PackingExactLayoutWithRowOverlapAndBoundaries) {
  // Two identical documents, so the shuffled order cannot change the layout.
  // Stream: B a b E B a b E (8 tokens, 7 input/target pairs) -> 2 rows of 5.
  Batcher batcher({doc("ab"), doc("ab")}, 5, /*packing=*/true, /*micro_batch=*/2, 1);
  ASSERT_EQ(batcher.rows_per_epoch(), 2);
  ASSERT_EQ(batcher.batches_per_epoch(), 1);
  const Batch b = batcher.next();
  expect_consistent(b);
  ASSERT_EQ(b.rows, 2);
  ASSERT_EQ(b.seq_len, 5);
  EXPECT_THAT(row_of(b.inputs, b, 0), ElementsAre(B, 'a', 'b', E, B));
  EXPECT_THAT(row_of(b.targets, b, 0), ElementsAre('a', 'b', E, X, 'a'));  // never predict the next BOS
  EXPECT_THAT(row_of(b.positions, b, 0), ElementsAre(0, 1, 2, 3, 0));
  EXPECT_THAT(row_of(b.segment_ids, b, 0), ElementsAre(0, 0, 0, 0, 1));
  // The second document continues at position 0 of a new row; the final EOS
  // is only a target; then padding to the end of the epoch's last row.
  EXPECT_THAT(row_of(b.inputs, b, 1), ElementsAre('a', 'b', P, P, P));
  EXPECT_THAT(row_of(b.targets, b, 1), ElementsAre('b', E, X, X, X));
  EXPECT_THAT(row_of(b.positions, b, 1), ElementsAre(0, 1, 0, 0, 0));
  EXPECT_THAT(row_of(b.segment_ids, b, 1), ElementsAre(0, 0, -1, -1, -1));
  EXPECT_EQ(b.target_tokens, 6);  // = trained tokens: the row boundary loses none
}

TEST(BatcherTest, PackingFullRowsAndTargetsEqualTrainedTokens) {
  auto examples = docs_of_lengths(57);
  examples.push_back(doc(std::string(40, 'L')));  // longer than a row: split across rows
  const std::int64_t trained = trained_tokens(examples);
  std::int64_t total = 0;
  for (const Example& ex : examples) total += static_cast<std::int64_t>(ex.tokens.size());
  const std::int64_t seq_len = 16;
  // Micro-batch 1: one epoch is exactly rows_per_epoch batches.
  Batcher batcher(examples, seq_len, true, 1, 7);
  EXPECT_EQ(batcher.rows_per_epoch(), (total - 1 + seq_len - 1) / seq_len);
  EXPECT_EQ(batcher.batches_per_epoch(), batcher.rows_per_epoch());

  std::int64_t targets = 0, rows = 0, padding = 0;
  std::map<std::int32_t, std::int64_t> inputs_seen, targets_seen;
  for (std::int64_t i = 0; i < batcher.batches_per_epoch(); ++i) {
    const Batch b = batcher.next();
    expect_consistent(b);
    EXPECT_EQ(b.seq_len, seq_len);
    const bool last = i + 1 == batcher.batches_per_epoch();
    EXPECT_EQ(b.rows, 1);
    for (std::int64_t r = 0; r < b.rows; ++r) {
      const auto seg = row_of(b.segment_ids, b, r);
      const auto pad = std::count(seg.begin(), seg.end(), -1);
      padding += pad;
      if (!(last && r + 1 == b.rows)) {
        EXPECT_EQ(pad, 0) << "only the epoch's last row is padded";
      }
    }
    for (std::size_t c = 0; c < b.inputs.size(); ++c) {
      if (b.segment_ids[c] != -1) ++inputs_seen[b.inputs[c]];
      if (b.targets[c] != X) ++targets_seen[b.targets[c]];
    }
    targets += b.target_tokens;
    rows += b.rows;
  }
  EXPECT_EQ(batcher.state().epoch, 1);
  EXPECT_EQ(rows, batcher.rows_per_epoch());
  EXPECT_EQ(targets, trained) << "overlapping rows: no target lost at a row boundary";
  EXPECT_EQ(rows * seq_len - padding, total - 1);  // every token but the stream's last is an input once
  // Each trained token is a target exactly once: the multiset matches.
  std::map<std::int32_t, std::int64_t> expected_targets;
  for (const Example& ex : examples) {
    for (std::size_t t = 0; t < ex.tokens.size(); ++t) {
      if (ex.trained[t]) ++expected_targets[ex.tokens[t]];
    }
  }
  EXPECT_EQ(targets_seen, expected_targets);
  EXPECT_EQ(inputs_seen[B], static_cast<std::int64_t>(examples.size()));
}

TEST(BatcherTest, PackingPositionsResetAtDocumentAndRowStarts) {
  Batcher batcher(docs_of_lengths(40), 24, true, 4, 3);
  for (std::int64_t i = 0; i < batcher.batches_per_epoch(); ++i) {
    const Batch b = batcher.next();
    for (std::int64_t r = 0; r < b.rows; ++r) {
      const auto in = row_of(b.inputs, b, r);
      const auto pos = row_of(b.positions, b, r);
      const auto seg = row_of(b.segment_ids, b, r);
      EXPECT_EQ(pos[0], 0);
      EXPECT_EQ(seg[0], 0);
      for (std::size_t c = 1; c < in.size(); ++c) {
        if (seg[c] == -1) continue;
        if (in[c] == B) {  // a document starts: new segment, position 0
          EXPECT_EQ(seg[c], seg[c - 1] + 1);
          EXPECT_EQ(pos[c], 0);
        } else {
          EXPECT_EQ(seg[c], seg[c - 1]);
          EXPECT_EQ(pos[c], pos[c - 1] + 1);
        }
        EXPECT_LT(pos[c], b.seq_len);
      }
    }
  }
}

// ---- Batcher: dynamic padding -----------------------------------------------

TEST(BatcherTest, NoPackingPadsOnlyToTheLongestRowOfEachBatch) {
  Batcher batcher(docs_of_lengths(30), 64, false, 4, 11);
  EXPECT_EQ(batcher.rows_per_epoch(), 30);
  EXPECT_EQ(batcher.batches_per_epoch(), 8);
  std::vector<std::int64_t> widths;
  for (std::int64_t i = 0; i < batcher.batches_per_epoch(); ++i) {
    const Batch b = batcher.next();
    expect_consistent(b);
    EXPECT_EQ(b.rows, 4);  // the 8th batch takes 2 rows of epoch 0 and 2 of epoch 1
    std::int64_t longest = 0;
    for (std::int64_t r = 0; r < b.rows; ++r) {
      const auto seg = row_of(b.segment_ids, b, r);
      const auto pos = row_of(b.positions, b, r);
      const auto width = static_cast<std::int64_t>(std::count(seg.begin(), seg.end(), 0));
      longest = std::max(longest, width);
      // A row is its document from column 0, then padding.
      for (std::int64_t c = 0; c < b.seq_len; ++c) {
        EXPECT_EQ(seg[static_cast<std::size_t>(c)], c < width ? 0 : -1);
        if (c < width) {
          EXPECT_EQ(pos[static_cast<std::size_t>(c)], c);
        }
      }
      EXPECT_EQ(row_of(b.inputs, b, r)[0], B);
    }
    EXPECT_EQ(b.seq_len, longest) << "padded past the longest row";
    widths.push_back(b.seq_len);
  }
  EXPECT_GT(*std::max_element(widths.begin(), widths.end()), *std::min_element(widths.begin(), widths.end()));
}

TEST(BatcherTest, NoPackingTruncatesToSeqLenPlusOneAndMasksPrompt) {
  // Prompt "pq" masked, completion "abcdefgh": B p q a b c d e f g h E.
  Example ex{{B, 'p', 'q', 'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', E}, {0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1}};
  Batcher batcher({ex}, 6, false, 1, 0);
  const Batch b = batcher.next();
  expect_consistent(b);
  ASSERT_EQ(b.seq_len, 6);  // 7 tokens kept: 6 inputs, 6 targets
  EXPECT_THAT(b.inputs, ElementsAre(B, 'p', 'q', 'a', 'b', 'c'));
  EXPECT_THAT(b.targets, ElementsAre(X, X, 'a', 'b', 'c', 'd'));
  EXPECT_EQ(b.target_tokens, 4);

  Batcher whole({ex}, 64, false, 1, 0);
  const Batch w = whole.next();
  EXPECT_EQ(w.seq_len, 11);
  EXPECT_THAT(w.targets, ElementsAre(X, X, 'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', E));
}

// ---- Batcher: order, resume, longest ----------------------------------------

std::vector<std::int32_t> first_tokens_of_epoch(Batcher& batcher) {
  std::vector<std::int32_t> firsts;  // each row's first content byte identifies its document
  for (std::int64_t i = 0; i < batcher.batches_per_epoch(); ++i) {
    const Batch b = batcher.next();
    for (std::int64_t r = 0; r < b.rows; ++r) firsts.push_back(b.inputs[static_cast<std::size_t>(r * b.seq_len + 1)]);
  }
  return firsts;
}

std::vector<Example> distinct_docs(int n) {
  std::vector<Example> out;
  for (int i = 0; i < n; ++i) out.push_back(doc(std::string(1, static_cast<char>(i)) + "xyz"));
  return out;
}

TEST(BatcherTest, ShuffleIsDeterministicForASeedAndDiffersAcrossEpochs) {
  Batcher a(distinct_docs(50), 32, false, 5, 42);
  Batcher b(distinct_docs(50), 32, false, 5, 42);
  Batcher other_seed(distinct_docs(50), 32, false, 5, 43);
  const auto a0 = first_tokens_of_epoch(a), a1 = first_tokens_of_epoch(a);
  EXPECT_EQ(first_tokens_of_epoch(b), a0);
  EXPECT_EQ(first_tokens_of_epoch(b), a1);
  EXPECT_NE(a0, a1) << "reshuffled every epoch";
  EXPECT_NE(first_tokens_of_epoch(other_seed), a0);
  // Each epoch is a permutation: every document exactly once.
  auto sorted0 = a0, sorted1 = a1;
  std::sort(sorted0.begin(), sorted0.end());
  std::sort(sorted1.begin(), sorted1.end());
  EXPECT_EQ(sorted0, sorted1);
  EXPECT_EQ(std::adjacent_find(sorted0.begin(), sorted0.end()), sorted0.end());
  EXPECT_EQ(sorted0.size(), 50u);
}

TEST(BatcherTest, ShuffleIsPinnedAcrossPlatforms) {
  // splitmix64 + Fisher-Yates is fully specified: this order must never
  // change, or resumed jobs would see different data. The expected order
  // was cross-checked with an independent Python transcription.
  Batcher batcher(distinct_docs(8), 32, false, 8, 42);
  const auto order = first_tokens_of_epoch(batcher);
  EXPECT_THAT(order, ElementsAreArray(std::vector<std::int32_t>{3, 6, 0, 7, 1, 2, 5, 4}));
}

TEST(BatcherTest, SaveRestoreReproducesTheNextBatches) {
  for (const bool packing : {true, false}) {
    Batcher original(docs_of_lengths(23), 12, packing, 3, 5);
    for (int i = 0; i < 5; ++i) (void)original.next();
    const Batcher::State saved = original.state();
    std::vector<Batch> expected;
    for (int i = 0; i < 3 * original.batches_per_epoch(); ++i) expected.push_back(original.next());  // crosses epochs

    Batcher resumed(docs_of_lengths(23), 12, packing, 3, 5);
    resumed.restore(saved);
    EXPECT_EQ(resumed.state().epoch, saved.epoch);
    EXPECT_EQ(resumed.state().index, saved.index);
    for (std::size_t i = 0; i < expected.size(); ++i) {
      EXPECT_TRUE(same_batch(resumed.next(), expected[i])) << "packing=" << packing << " batch " << i;
    }
  }
}

TEST(BatcherTest, StateCountsRowsAndBatchesContinueIntoTheNextEpoch) {
  Batcher batcher(docs_of_lengths(10), 32, false, 4, 1);  // 10 rows an epoch, 4 a batch
  ASSERT_EQ(batcher.batches_per_epoch(), 3);
  EXPECT_DOUBLE_EQ(batcher.epoch_progress(), 0.0);
  (void)batcher.next();
  EXPECT_DOUBLE_EQ(batcher.epoch_progress(), 0.4);
  (void)batcher.next();
  const Batch third = batcher.next();  // rows 8, 9 of epoch 0 and rows 0, 1 of epoch 1
  EXPECT_EQ(third.rows, 4);
  EXPECT_EQ(batcher.state().epoch, 1);
  EXPECT_EQ(batcher.state().index, 2);
  EXPECT_DOUBLE_EQ(batcher.epoch_progress(), 1.2);
  (void)batcher.next();
  EXPECT_DOUBLE_EQ(batcher.epoch_progress(), 1.6);

  batcher.restore({2, 27});  // an index past the end carries into later epochs
  EXPECT_EQ(batcher.state().epoch, 4);
  EXPECT_EQ(batcher.state().index, 7);
}

// Evaluation's pass: every row once, in stored order, the last batch
// short rather than continued into another epoch.
TEST(BatcherTest, APassHoldsEachRowOnceInStoredOrder) {
  auto examples = docs_of_lengths(10);
  const std::int64_t trained = trained_tokens(examples);
  for (const bool packing : {false, true}) {
    Batcher batcher(examples, 16, packing, 4, 1);
    const std::int64_t rows = batcher.rows_per_epoch();
    std::int64_t seen_rows = 0, targets = 0;
    for (std::int64_t k = 0; k < batcher.batches_per_epoch(); ++k) {
      const Batch b = batcher.pass_batch(k);
      expect_consistent(b);
      EXPECT_EQ(b.rows, std::min<std::int64_t>(4, rows - k * 4)) << "packing=" << packing << " batch " << k;
      seen_rows += b.rows;
      targets += b.target_tokens;
    }
    EXPECT_EQ(seen_rows, rows);
    EXPECT_EQ(targets, trained) << "packing=" << packing;
    EXPECT_EQ(batcher.state().index, 0) << "a pass does not move the state";
    // Unshuffled: without packing, row r is document r.
    const Batch first = batcher.pass_batch(0);
    if (!packing) {
      EXPECT_THAT(row_of(first.inputs, first, 3), ElementsAre(B, 'd', 'd', 'd', 'd'));
    }
  }
}

TEST(BatcherTest, TheSameRowsWhateverTheMicroBatch) {
  // Micro-batch 2 x 4 sees the rows micro-batch 8 sees, across an epoch end.
  for (const bool packing : {false, true}) {
    Batcher big(docs_of_lengths(13), 16, packing, 8, 3), small(docs_of_lengths(13), 16, packing, 2, 3);
    for (int step = 0; step < 5; ++step) {
      const Batch b = big.next();
      std::vector<std::int32_t> small_inputs;
      for (int k = 0; k < 4; ++k) {
        const Batch s = small.next();
        for (std::int64_t r = 0; r < s.rows; ++r) {
          auto row = row_of(s.inputs, s, r);
          row.resize(static_cast<std::size_t>(b.seq_len), ByteTokenizer::kPad);  // pad to the big batch's width
          small_inputs.insert(small_inputs.end(), row.begin(), row.end());
        }
      }
      EXPECT_EQ(small_inputs, b.inputs) << "packing=" << packing << " step " << step;
    }
  }
}

TEST(BatcherTest, LongestBatchIsTheLongest) {
  auto examples = docs_of_lengths(40);
  examples.push_back(doc(std::string(100, 'W')));  // truncated to seq_len + 1 tokens
  for (const bool packing : {false, true}) {
    Batcher batcher(examples, 48, packing, 4, 9);
    const Batch longest = batcher.longest_batch();
    expect_consistent(longest);
    EXPECT_EQ(batcher.state().index, 0) << "longest_batch does not move the state";
    EXPECT_EQ(longest.rows, 4);
    EXPECT_EQ(longest.seq_len, 48);
    std::int64_t widest = 0;
    for (int i = 0; i < 5 * batcher.batches_per_epoch(); ++i) {
      const Batch b = batcher.next();
      EXPECT_LE(b.rows * b.seq_len, longest.rows * longest.seq_len);
      widest = std::max(widest, b.rows * b.seq_len);
    }
    EXPECT_EQ(widest, longest.rows * longest.seq_len) << "packing=" << packing;
  }
  // Without packing it gathers the longest documents: 13-byte contents (15
  // tokens, 14 inputs) beside the truncated long one.
  Batcher batcher(examples, 48, false, 4, 9);
  const Batch longest = batcher.longest_batch();
  std::vector<std::int64_t> widths;
  for (std::int64_t r = 0; r < longest.rows; ++r) {
    const auto seg = row_of(longest.segment_ids, longest, r);
    widths.push_back(std::count(seg.begin(), seg.end(), 0));
  }
  std::sort(widths.begin(), widths.end());
  EXPECT_THAT(widths, ElementsAre(14, 14, 14, 48));
}

// ---- Batcher: whole examples (prompt/completion) ----------------------------

constexpr dsl::Packing kWhole = dsl::Packing::kWholeExamples;
constexpr dsl::LongExample kTruncate = dsl::LongExample::kTruncate;
constexpr dsl::LongExample kDrop = dsl::LongExample::kDrop;

// B, a prompt of `prompt` tokens (>= 2; the first two name the example, so
// examples differ), a completion of `completion` tokens, E; the prompt and
// BOS untrained, as load_examples makes prompt/completion pairs.
Example pair_example(int id, int prompt, int completion) {
  Example ex{{B}, {0}};
  for (int i = 0; i < prompt; ++i) {
    ex.tokens.push_back(i == 0 ? id % 200 : i == 1 ? id / 200 : 'p');
    ex.trained.push_back(0);
  }
  for (int i = 0; i < completion; ++i) {
    ex.tokens.push_back('a' + i % 26);
    ex.trained.push_back(1);
  }
  ex.tokens.push_back(E);
  ex.trained.push_back(1);
  return ex;
}

// n examples of 4..max_len tokens with prompts of every share.
std::vector<Example> pair_examples(int n, int max_len) {
  std::vector<Example> out;
  std::uint32_t s = 12345;
  for (int i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    const int total = 4 + static_cast<int>((s >> 8) % static_cast<std::uint32_t>(max_len - 3));
    const int prompt = 2 + static_cast<int>((s >> 3) % static_cast<std::uint32_t>(total - 3));
    out.push_back(pair_example(i, prompt, total - 2 - prompt));
  }
  return out;
}

struct Row {
  std::vector<std::int32_t> inputs, targets, positions, segments;
};

// Exactly one epoch's rows from the batcher's state {e, 0}.
std::vector<Row> one_epoch(Batcher& batcher) {
  std::vector<Row> rows;
  while (static_cast<std::int64_t>(rows.size()) < batcher.rows_per_epoch()) {
    const Batch b = batcher.next();
    expect_consistent(b);
    for (std::int64_t r = 0; r < b.rows && static_cast<std::int64_t>(rows.size()) < batcher.rows_per_epoch(); ++r) {
      rows.push_back({row_of(b.inputs, b, r), row_of(b.targets, b, r), row_of(b.positions, b, r),
                      row_of(b.segment_ids, b, r)});
    }
  }
  return rows;
}

// A document's cells as a row holds it whole: (inputs, targets).
std::pair<std::vector<std::int32_t>, std::vector<std::int32_t>> cells_of(const Example& ex, std::size_t keep) {
  std::vector<std::int32_t> in, tg;
  for (std::size_t t = 0; t + 1 < std::min(keep, ex.tokens.size()); ++t) {
    in.push_back(ex.tokens[t]);
    tg.push_back(ex.trained[t + 1] ? ex.tokens[t + 1] : X);
  }
  return {in, tg};
}

// Each row's pieces as (inputs, targets), checking the layout on the way:
// every piece starts at column 0 or right after the previous one, with
// BOS at position 0 in a new segment, and padding only ends a row.
std::vector<std::pair<std::vector<std::int32_t>, std::vector<std::int32_t>>> pieces_of(const std::vector<Row>& rows) {
  std::vector<std::pair<std::vector<std::int32_t>, std::vector<std::int32_t>>> out;
  for (const Row& row : rows) {
    for (std::size_t c = 0; c < row.inputs.size(); ++c) {
      if (row.segments[c] == -1) {
        for (std::size_t rest = c; rest < row.inputs.size(); ++rest) EXPECT_EQ(row.segments[rest], -1);
        break;
      }
      const bool starts = c == 0 || row.segments[c] != row.segments[c - 1];
      if (starts) {
        EXPECT_EQ(row.inputs[c], B) << "a piece that does not start with its BOS: an example split across rows";
        EXPECT_EQ(row.positions[c], 0);
        EXPECT_EQ(row.segments[c], c == 0 ? 0 : row.segments[c - 1] + 1);
        out.emplace_back();
      } else {
        EXPECT_NE(row.inputs[c], B);
        EXPECT_EQ(row.positions[c], row.positions[c - 1] + 1);
      }
      out.back().first.push_back(row.inputs[c]);
      out.back().second.push_back(row.targets[c]);
    }
  }
  return out;
}

TEST(BatcherTest, WholeExamplesAreNeverSplitAndEachTrainsOncePerEpoch) {
  const auto examples = pair_examples(120, 40);
  const std::int64_t seq_len = 48;
  Batcher batcher(examples, seq_len, kWhole, kTruncate, 3, 7);
  EXPECT_EQ(batcher.stats().examples, 120);
  EXPECT_EQ(batcher.stats().truncated + batcher.stats().dropped, 0);
  for (int epoch = 0; epoch < 2; ++epoch) {
    ASSERT_EQ(batcher.state().index, 0);
    const auto rows = one_epoch(batcher);
    std::map<std::vector<std::int32_t>, std::vector<std::int32_t>> seen;
    std::int64_t targets = 0;
    for (const auto& [in, tg] : pieces_of(rows)) {
      EXPECT_TRUE(seen.emplace(in, tg).second) << "an example twice in one epoch";
      targets += static_cast<std::int64_t>(tg.size()) - std::count(tg.begin(), tg.end(), X);
    }
    ASSERT_EQ(seen.size(), examples.size()) << "epoch " << epoch;
    for (const Example& ex : examples) {
      const auto [in, tg] = cells_of(ex, ex.tokens.size());
      ASSERT_TRUE(seen.count(in)) << "epoch " << epoch;
      EXPECT_EQ(seen[in], tg) << "every trained target of the example, in its own row";
    }
    EXPECT_EQ(targets, trained_tokens(examples));
    // Realign: the last batch may have run into the next epoch.
    batcher.restore({epoch + 1, 0});
  }
  // The same data as one stream cuts examples at row boundaries: what the
  // whole-example packing is for.
  Batcher stream(examples, seq_len, true, 3, 7);
  const auto rows = one_epoch(stream);
  EXPECT_GT(std::count_if(rows.begin(), rows.end(), [](const Row& r) { return r.inputs[0] != B; }), 0);
}

TEST(BatcherTest, FirstFitDecreasingFillsRows) {
  // Columns 9 3 8 4 7 5 6 6 (a document of L tokens takes L - 1): four
  // rows of 12 exactly, but only when the longest are placed first.
  std::vector<Example> examples;
  int id = 0;
  for (int cols : {9, 3, 8, 4, 7, 5, 6, 6}) examples.push_back(pair_example(id++, 2, cols - 3));
  Batcher batcher(examples, 12, kWhole, kTruncate, 2, 1);
  EXPECT_EQ(batcher.rows_per_epoch(), 4);
  EXPECT_EQ(batcher.stats().input_cells, 48);
  EXPECT_DOUBLE_EQ(batcher.stats().efficiency(), 1.0);
  for (const Row& row : one_epoch(batcher)) {
    EXPECT_EQ(std::count(row.segments.begin(), row.segments.end(), -1), 0) << "a full row";
    EXPECT_EQ(*std::max_element(row.segments.begin(), row.segments.end()), 1) << "two examples a row";
  }
  // The longest batch is a full (micro_batch, seq_len) one.
  const Batch longest = batcher.longest_batch();
  expect_consistent(longest);
  EXPECT_EQ(longest.rows, 2);
  EXPECT_EQ(longest.seq_len, 12);
  EXPECT_EQ(std::count(longest.segment_ids.begin(), longest.segment_ids.end(), -1), 0);

  // One more example of 3 columns opens a fifth row: 51 of 60 cells.
  examples.push_back(pair_example(id, 2, 0));
  Batcher more(examples, 12, kWhole, kTruncate, 2, 1);
  EXPECT_EQ(more.rows_per_epoch(), 5);
  EXPECT_DOUBLE_EQ(more.stats().efficiency(), 51.0 / 60.0);
}

TEST(BatcherTest, LongExamplesAreTruncatedOrDroppedAndCounted) {
  // seq_len 8: a row holds 9 tokens of an example.
  const Example fits = pair_example(1, 2, 3);        // 7 tokens
  const Example long_ok = pair_example(2, 3, 10);    // 15: its first 9 keep 5 completion tokens
  const Example long_cut = pair_example(3, 9, 4);    // 15: its first 9 are BOS and prompt only
  const std::vector<Example> examples = {fits, long_ok, long_cut};
  for (const dsl::Packing packing : {kWhole, dsl::Packing::kNone}) {
    Batcher truncate(examples, 8, packing, kTruncate, 1, 3);
    EXPECT_EQ(truncate.stats().examples, 2);
    EXPECT_EQ(truncate.stats().truncated, 1);
    EXPECT_EQ(truncate.stats().dropped, 1) << "truncated to no trained target";
    EXPECT_EQ(truncate.stats().dropped_untrained, 1);
    std::map<std::vector<std::int32_t>, std::vector<std::int32_t>> seen;
    for (const auto& piece : pieces_of(one_epoch(truncate))) seen.insert(piece);
    ASSERT_EQ(seen.size(), 2u) << dsl::to_string(packing);
    const auto [in, tg] = cells_of(long_ok, 9);
    ASSERT_EQ(in.size(), 8u);
    EXPECT_EQ(seen[in], tg) << "the first seq_len + 1 tokens";
    EXPECT_EQ(seen.count(cells_of(fits, 99).first), 1u);

    Batcher drop(examples, 8, packing, kDrop, 1, 3);
    EXPECT_EQ(drop.stats().examples, 1);
    EXPECT_EQ(drop.stats().truncated, 0);
    EXPECT_EQ(drop.stats().dropped, 2);
    EXPECT_EQ(drop.stats().dropped_untrained, 0);
    EXPECT_EQ(drop.rows_per_epoch(), 1);
    const auto rows = one_epoch(drop);
    EXPECT_EQ(pieces_of(rows).front().first, cells_of(fits, 99).first);
  }
}

TEST(BatcherTest, EveryExampleDroppedIsAnErrorNamingTheFileAndSeqLen) {
  dsl::DataSpec spec = pairs_spec();
  spec.train = "/data/pairs.jsonl";
  spec.seq_len = 4;
  spec.on_long_example = kDrop;
  const std::vector<Example> examples = {pair_example(1, 2, 5), pair_example(2, 3, 3)};  // 9 and 8 tokens, 5 fit a row
  auto dropped = make_batcher(TokenStore::from_examples(examples), spec, 2, 1, P);
  ASSERT_FALSE(dropped.is_ok());
  EXPECT_EQ(dropped.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(dropped.status().message(), HasSubstr("/data/pairs.jsonl"));
  EXPECT_THAT(dropped.status().message(), HasSubstr("seq_len 4"));
  EXPECT_THAT(dropped.status().message(), HasSubstr("2 longer than seq_len + 1 tokens (data.on_long_example: drop)"));

  spec.on_long_example = kTruncate;  // the prompts fill the 5 tokens kept
  auto untrained = make_batcher(TokenStore::from_examples({pair_example(1, 6, 2)}), spec, 2, 1, P);
  ASSERT_FALSE(untrained.is_ok());
  EXPECT_THAT(untrained.status().message(), HasSubstr("1 with no trained token"));

  spec.seq_len = 16;
  auto fine = make_batcher(TokenStore::from_examples(examples), spec, 2, 1, P);
  ASSERT_TRUE(fine.is_ok()) << fine.status().to_string();
  EXPECT_EQ(fine->stats().packing, kWhole);
  EXPECT_EQ(fine->stats().examples, 2);
}

TEST(BatcherTest, WholeExamplesResumeBitExactlyAcrossEpochs) {
  const auto examples = pair_examples(60, 30);
  Batcher original(examples, 32, kWhole, kTruncate, 3, 5);
  ASSERT_GT(original.batches_per_epoch(), 3);
  for (int i = 0; i < 5; ++i) (void)original.next();
  const Batcher::State saved = original.state();
  std::vector<Batch> expected;
  for (int i = 0; i < 3 * original.batches_per_epoch(); ++i) expected.push_back(original.next());  // crosses epochs

  Batcher resumed(examples, 32, kWhole, kTruncate, 3, 5);
  resumed.restore(saved);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(same_batch(resumed.next(), expected[i])) << "batch " << i;
  }
  // The rows are reshuffled every epoch, and by the seed.
  Batcher a(examples, 32, kWhole, kTruncate, 1, 5), b(examples, 32, kWhole, kTruncate, 1, 6);
  const auto a0 = pieces_of(one_epoch(a)), a1 = pieces_of(one_epoch(a)), b0 = pieces_of(one_epoch(b));
  EXPECT_NE(a0, a1);
  EXPECT_NE(a0, b0);
}

TEST(BatcherTest, TheSpecDecidesThePackingAndPlainTextStaysAStream) {
  const auto text = docs_of_lengths(23);
  dsl::DataSpec spec = spec_of(dsl::DataFormat::kText);
  spec.seq_len = 12;
  auto from_spec = make_batcher(TokenStore::from_examples(text), spec, 3, 5, P);
  ASSERT_TRUE(from_spec.is_ok());
  EXPECT_EQ(from_spec->stats().packing, dsl::Packing::kStream);
  Batcher stream(text, 12, true, 3, 5);
  EXPECT_EQ(from_spec->rows_per_epoch(), stream.rows_per_epoch());
  EXPECT_DOUBLE_EQ(from_spec->stats().efficiency(),
                   static_cast<double>(stream.stats().input_cells) / static_cast<double>(stream.rows_per_epoch() * 12));
  for (int i = 0; i < 3 * stream.batches_per_epoch(); ++i) {
    EXPECT_TRUE(same_batch(from_spec->next(), stream.next())) << "batch " << i;
  }
  spec.packing = false;
  EXPECT_EQ(dsl::packing_of(spec), dsl::Packing::kNone);
  dsl::DataSpec pairs = pairs_spec();
  EXPECT_EQ(dsl::packing_of(pairs), kWhole);
  pairs.packing = false;
  EXPECT_EQ(dsl::packing_of(pairs), dsl::Packing::kNone);
}

// The symlink defect: a data file swapped for a link after submission led
// the runner outside the spec root. The check is on the file opened.
TEST(FileIoTest, UnderAReadRootOnlyFilesInsideItAreRead) {
  tailor::testing::TempDir root, elsewhere;
  std::ofstream(root.file("inside.txt")) << "in";
  std::ofstream(elsewhere.file("secret.txt")) << "secret";
  std::filesystem::create_symlink(elsewhere.file("secret.txt"), root.file("swapped.txt"));
  std::filesystem::create_symlink(root.file("inside.txt"), root.file("alias.txt"));
  ASSERT_TRUE(set_read_root(root.path().string()).is_ok());
  struct Reset {
    ~Reset() { (void)set_read_root(""); }
  } reset;
  EXPECT_EQ(*read_file(root.file("inside.txt")), "in");
  EXPECT_EQ(*read_file(root.file("alias.txt")), "in");  // a link that stays inside is fine
  auto swapped = read_file(root.file("swapped.txt"));
  ASSERT_FALSE(swapped.is_ok());
  EXPECT_EQ(swapped.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(swapped.status().message().find("outside the spec root"), std::string::npos) << swapped.status().message();
  auto dotted = read_file(root.path().string() + "/../" + elsewhere.path().filename().string() + "/secret.txt");
  EXPECT_FALSE(dotted.is_ok());
  EXPECT_EQ(read_file(root.file("missing.txt")).status().code(), StatusCode::kNotFound);
  (void)set_read_root("");
  EXPECT_EQ(*read_file(root.file("swapped.txt")), "secret");  // no root: tailor run reads what it is given
}

// ---- preference pairs -------------------------------------------------------

dsl::DataSpec preference_spec(std::int64_t seq_len) {
  dsl::DataSpec spec = spec_of(dsl::DataFormat::kJsonl);
  spec.preference = true;
  spec.prompt_field = "prompt";
  spec.packing = false;
  spec.seq_len = seq_len;
  return spec;
}

TEST(PreferenceDataTest, APairIsTwoDocumentsChosenThenRejectedWithThePromptMasked) {
  testing::TempDir dir;
  const auto path = dir.write("pairs.jsonl", R"({"prompt": "Q:", "chosen": "yes", "rejected": "no"})" "\n");
  const auto examples = load_examples(path, preference_spec(32), ByteTokenizer());
  ASSERT_TRUE(examples.is_ok()) << examples.status().to_string();
  ASSERT_EQ(examples->size(), 2u);
  EXPECT_THAT((*examples)[0].tokens, ElementsAre(B, 'Q', ':', 'y', 'e', 's', E));
  EXPECT_THAT((*examples)[0].trained, ElementsAre(0, 0, 0, 1, 1, 1, 1));
  EXPECT_THAT((*examples)[1].tokens, ElementsAre(B, 'Q', ':', 'n', 'o', E));
  EXPECT_THAT((*examples)[1].trained, ElementsAre(0, 0, 0, 1, 1, 1));
}

TEST(PreferenceDataTest, APromptThatFillsSeqLenIsABadRecord) {
  testing::TempDir dir;
  const auto path = dir.write("pairs.jsonl", R"({"prompt": "Q:", "chosen": "a", "rejected": "b"})" "\n"
                                             R"({"prompt": "long prompt", "chosen": "a", "rejected": "b"})" "\n");
  dsl::DataSpec spec = preference_spec(8);
  const auto failed = load_examples(path, spec, ByteTokenizer());
  ASSERT_FALSE(failed.is_ok());
  EXPECT_THAT(failed.status().message(),
              HasSubstr("pairs.jsonl:2: the prompt is 11 tokens, and seq_len is 8: no completion token fits"));
  spec.on_bad_record = dsl::OnBadRecord::kSkip;
  SkippedRecords skipped;
  const auto store = tokenize_file(path, spec, ByteTokenizer(), nullptr, &skipped);
  ASSERT_TRUE(store.is_ok()) << store.status().to_string();
  EXPECT_EQ(store->documents(), 2u);
  EXPECT_EQ(skipped.count, 1);
}

// kto's labelled completions (data.label_field): one document a record,
// its prompt untrained and its label the value (1 desirable, 0 not), kept
// by the token cache's entry; batches of one document a row carry each
// row's label; another label field is another entry.
TEST(PreferenceDataTest, LabelledCompletionsAreOneDocumentEachWithTheirLabel) {
  testing::TempDir dir;
  std::string text;
  for (int i = 0; i < 6; ++i) {
    text += "{\"prompt\": \"Q" + std::to_string(i) + ":\", \"completion\": \"" + std::string(1 + i, 'y') +
            "\", \"label\": " + (i % 3 == 0 ? "false" : "true") + ", \"other\": true}\n";
  }
  const auto path = dir.write("feedback.jsonl", text);
  dsl::DataSpec spec = preference_spec(32);
  spec.unpaired = true;
  spec.label_field = "label";
  spec.completion_field = "completion";
  const ByteTokenizer tok;
  for (const TokenizedData::Source source : {TokenizedData::Source::kTokenized, TokenizedData::Source::kCache}) {
    auto loaded = load_tokenized(path, spec, tok, dir.file("cache"));
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
    ASSERT_EQ(loaded->source, source);
    const TokenStore& store = loaded->store;
    ASSERT_EQ(store.documents(), 6u);
    ASSERT_TRUE(store.has_values());
    for (std::size_t d = 0; d < 6; ++d) {
      EXPECT_EQ(store.value(d), d % 3 == 0 ? 0.0f : 1.0f) << d;
      // BOS "Qd:" untrained, the completion and EOS trained.
      const auto trained = store.trained(d);
      EXPECT_EQ(std::count(trained.begin(), trained.end(), std::uint8_t{1}), static_cast<std::ptrdiff_t>(d + 2)) << d;
    }
    auto batcher = make_batcher(store, spec, 4, 7, ByteTokenizer::kPad);
    ASSERT_TRUE(batcher.is_ok()) << batcher.status().to_string();
    EXPECT_EQ(batcher->rows_per_epoch(), 6);
    for (int k = 0; k < 3; ++k) {
      const Batch b = batcher->next();
      ASSERT_EQ(b.rows, 4);
      ASSERT_EQ(b.values.size(), 4u);
      for (std::int64_t r = 0; r < 4; ++r) {
        const int record = b.inputs[static_cast<std::size_t>(r * b.seq_len + 2)] - '0';  // "Q<i>:"
        EXPECT_EQ(b.values[static_cast<std::size_t>(r)], record % 3 == 0 ? 0.0f : 1.0f) << record;
      }
    }
  }
  spec.label_field = "other";
  auto other = load_tokenized(path, spec, tok, dir.file("cache"));
  ASSERT_TRUE(other.is_ok()) << other.status().to_string();
  EXPECT_EQ(other->source, TokenizedData::Source::kTokenized);
  EXPECT_EQ(other->store.value(0), 1.0f);
}

// data.margin_field: each pair's margin is both its documents' value, kept
// by the token cache's entry, and each batch carries its pairs' margins in
// the order of its chosen rows.
TEST(PreferenceDataTest, MarginsReachTheBatchesThroughTheTokenCache) {
  testing::TempDir dir;
  std::string text;
  for (int i = 0; i < 6; ++i) {
    text += "{\"prompt\": \"Q" + std::to_string(i) + ":\", \"chosen\": \"" + std::string(1 + i, 'y') +
            "\", \"rejected\": \"no\", \"margin\": " + std::to_string(0.5 * i - 1) + "}\n";
  }
  const auto path = dir.write("pairs.jsonl", text);
  dsl::DataSpec spec = preference_spec(32);
  spec.margin_field = "margin";
  const ByteTokenizer tok;
  for (const TokenizedData::Source source : {TokenizedData::Source::kTokenized, TokenizedData::Source::kCache}) {
    auto loaded = load_tokenized(path, spec, tok, dir.file("cache"));
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
    ASSERT_EQ(loaded->source, source);
    const TokenStore& store = loaded->store;
    ASSERT_TRUE(store.has_values());
    ASSERT_EQ(store.documents(), 12u);
    for (std::size_t d = 0; d < 12; ++d)
      EXPECT_EQ(store.value(d), 0.5f * static_cast<float>(d / 2) - 1.0f) << d;
    auto batcher = make_batcher(store, spec, 4, 7, ByteTokenizer::kPad);
    ASSERT_TRUE(batcher.is_ok()) << batcher.status().to_string();
    for (int k = 0; k < 3; ++k) {
      const Batch b = batcher->next();
      ASSERT_EQ(b.values.size(), 8u);
      for (std::int64_t r = 0; r < 4; ++r) {
        // The chosen row's prompt names its pair: "Q<i>:".
        const int pair = b.inputs[static_cast<std::size_t>(r * b.seq_len + 2)] - '0';
        EXPECT_EQ(b.values[static_cast<std::size_t>(r)], 0.5f * static_cast<float>(pair) - 1.0f);
        EXPECT_EQ(b.values[static_cast<std::size_t>(r + 4)],
                  b.values[static_cast<std::size_t>(r)]);  // its rejected row
      }
    }
  }
  // Without the key the same file has no values, and another cache entry.
  spec.margin_field.clear();
  auto plain = load_tokenized(path, spec, tok, dir.file("cache"));
  ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
  EXPECT_EQ(plain->source, TokenizedData::Source::kTokenized);
  EXPECT_EQ(plain->store.value(0), 0.0f);
}

// Pairs (chosen, rejected) as documents 2p and 2p + 1: distinct first bytes.
std::vector<Example> pair_docs(int n) {
  std::vector<Example> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(doc(std::string(static_cast<std::size_t>(1 + i % 5), static_cast<char>('a' + i))));
    out.push_back(doc(std::string(static_cast<std::size_t>(2 + i % 3), static_cast<char>('A' + i))));
  }
  return out;
}

TEST(PreferenceDataTest, ABatchIsTheChosenRowsThenTheRejectedRowsOfTheSamePairs) {
  Batcher batcher(TokenStore::from_examples(pair_docs(10)), 64, dsl::Packing::kNone, dsl::LongExample::kTruncate, 3,
                  5, ByteTokenizer::kPad, /*pairs=*/true);
  EXPECT_EQ(batcher.rows_per_epoch(), 10);  // pairs
  EXPECT_EQ(batcher.stats().rows_per_epoch, 20);
  EXPECT_EQ(batcher.stats().examples, 10);
  std::map<char, int> seen;
  for (int k = 0; k < 4; ++k) {  // 12 pairs: an epoch and 2 of the next
    const Batch b = batcher.next();
    expect_consistent(b);
    ASSERT_EQ(b.rows, 6);
    for (std::int64_t r = 0; r < 3; ++r) {
      const auto chosen = static_cast<char>(b.inputs[static_cast<std::size_t>(r * b.seq_len + 1)]);
      const auto rejected = static_cast<char>(b.inputs[static_cast<std::size_t>((r + 3) * b.seq_len + 1)]);
      EXPECT_EQ(rejected, chosen - 'a' + 'A') << "row " << r << " and row " << r + 3 << " are one pair";
      ++seen[chosen];
    }
  }
  EXPECT_EQ(seen.size(), 10u);  // every pair once in the first epoch
  // The longest batch holds the longest pairs, both rows each.
  const Batch longest = batcher.longest_batch();
  EXPECT_EQ(longest.rows, 6);
  EXPECT_EQ(longest.seq_len, 6);  // BOS + 5 bytes + EOS: 6 columns
  // One pass over the pairs in stored order, the last batch short.
  EXPECT_EQ(batcher.batches_per_epoch(), 4);
  const Batch last = batcher.pass_batch(3);
  EXPECT_EQ(last.rows, 2);
  EXPECT_EQ(last.inputs[1], 'j');
  EXPECT_EQ(last.inputs[static_cast<std::size_t>(last.seq_len + 1)], 'J');
}

TEST(PreferenceDataTest, APairIsDroppedWholeWhenEitherRowIs) {
  std::vector<Example> docs = pair_docs(3);
  docs[3] = doc(std::string(20, 'Z'));  // pair 1's rejected: longer than a row of 8
  Batcher dropping(TokenStore::from_examples(docs), 8, dsl::Packing::kNone, dsl::LongExample::kDrop, 1, 0,
                   ByteTokenizer::kPad, true);
  EXPECT_EQ(dropping.stats().examples, 2);
  EXPECT_EQ(dropping.stats().dropped, 1);
  Batcher truncating(TokenStore::from_examples(docs), 8, dsl::Packing::kNone, dsl::LongExample::kTruncate, 1, 0,
                     ByteTokenizer::kPad, true);
  EXPECT_EQ(truncating.stats().examples, 3);
  EXPECT_EQ(truncating.stats().truncated, 1);
  // Nothing trained within the row drops the pair too.
  docs[3] = Example{{B, 'p', 'p', 'p', 'p', 'p', 'p', 'p', 'p', 'p', 'x', E}, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1}};
  Batcher untrained(TokenStore::from_examples(docs), 8, dsl::Packing::kNone, dsl::LongExample::kTruncate, 1, 0,
                    ByteTokenizer::kPad, true);
  EXPECT_EQ(untrained.stats().examples, 2);
  EXPECT_EQ(untrained.stats().dropped_untrained, 1);
}

}  // namespace
}  // namespace tailor::runner::data
