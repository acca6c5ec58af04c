// KTO's KL rows: each row's prompt with the previous row's completion, as
// TRL's KTOTrainer rotates them, cut where the spec's seq_len cuts.
#include "runner/data/kl_rows.h"

#include <gtest/gtest.h>

#include <vector>

namespace tailor::runner::data {
namespace {

using Tokens = std::vector<std::int32_t>;
constexpr std::int32_t kPad = 99;

// A pair batch's row as the batcher lays it out: inputs are the sequence
// less its last token, targets the completion's tokens (-100 on the prompt
// and padding), padded to `width` cells.
Batch rows_of(const std::vector<std::pair<Tokens, Tokens>>& rows, std::int64_t width) {
  Batch b;
  b.rows = static_cast<std::int64_t>(rows.size());
  b.seq_len = width;
  for (const auto& [prompt, completion] : rows) {
    Tokens s = prompt;
    s.insert(s.end(), completion.begin(), completion.end());
    for (std::int64_t t = 0; t < width; ++t) {
      const bool cell = t + 1 < static_cast<std::int64_t>(s.size());
      b.inputs.push_back(cell ? s[static_cast<std::size_t>(t)] : kPad);
      const bool trained = cell && t + 1 >= static_cast<std::int64_t>(prompt.size());
      b.targets.push_back(trained ? s[static_cast<std::size_t>(t) + 1] : -100);
      b.positions.push_back(cell ? static_cast<std::int32_t>(t) : 0);
      b.segment_ids.push_back(cell ? 0 : -1);
      b.target_tokens += trained;
    }
  }
  return b;
}

// Row r of `b`: its inputs and targets before padding.
Tokens row(const std::vector<std::int32_t>& cells, const Batch& b, std::int64_t r) {
  const auto from = cells.begin() + r * b.seq_len;
  return Tokens(from, from + b.row_length(r));
}

TEST(KlRowsTest, EachPromptTakesThePreviousRowsCompletion) {
  // Two pairs: chosen rows first, then rejected (the batcher's order).
  const Batch b =
      rows_of({{{0, 10, 11}, {20, 21, 1}}, {{0, 12}, {22, 1}}, {{0, 10, 11}, {30, 1}}, {{0, 12}, {31, 32, 33, 1}}}, 8);
  const Batch kl = kl_rows(b, 64, kPad);
  ASSERT_EQ(kl.rows, 4);
  // Row 0 takes the last row's completion, row r the row r - 1's.
  EXPECT_EQ(row(kl.inputs, kl, 0), (Tokens{0, 10, 11, 31, 32, 33}));
  EXPECT_EQ(row(kl.targets, kl, 0), (Tokens{-100, -100, 31, 32, 33, 1}));
  EXPECT_EQ(row(kl.inputs, kl, 1), (Tokens{0, 12, 20, 21}));
  EXPECT_EQ(row(kl.targets, kl, 1), (Tokens{-100, 20, 21, 1}));
  EXPECT_EQ(row(kl.inputs, kl, 2), (Tokens{0, 10, 11, 22}));
  EXPECT_EQ(row(kl.targets, kl, 2), (Tokens{-100, -100, 22, 1}));
  EXPECT_EQ(row(kl.inputs, kl, 3), (Tokens{0, 12, 30}));
  EXPECT_EQ(row(kl.targets, kl, 3), (Tokens{-100, 30, 1}));
  // Padded to the longest row, positions from 0, every completion token trained once.
  EXPECT_EQ(kl.seq_len, 6);
  EXPECT_EQ(kl.target_tokens, 4 + 3 + 2 + 2);
  EXPECT_EQ(kl.target_tokens, b.target_tokens);
  EXPECT_EQ(row(kl.positions, kl, 1), (Tokens{0, 1, 2, 3}));
  EXPECT_EQ(kl.inputs[static_cast<std::size_t>(kl.seq_len) + 4], kPad);
  EXPECT_EQ(kl.segment_ids[static_cast<std::size_t>(kl.seq_len) + 4], -1);
}

// A row longer than seq_len + 1 tokens keeps its start (TRL truncates from
// the right): the completion is cut, or lost after a long prompt.
TEST(KlRowsTest, LongRowsKeepTheirStart) {
  const Batch b = rows_of({{{0, 10, 11, 12, 13}, {20, 1}}, {{0, 14}, {21, 22, 23, 24, 1}}}, 8);
  const Batch kl = kl_rows(b, 4, kPad);
  EXPECT_EQ(kl.seq_len, 4);
  // Row 0: 0 10 11 12 13 | 21 22 ... cut to 5 tokens: the prompt alone.
  EXPECT_EQ(row(kl.inputs, kl, 0), (Tokens{0, 10, 11, 12}));
  EXPECT_EQ(row(kl.targets, kl, 0), (Tokens{-100, -100, -100, -100}));
  // Row 1: 0 14 | 20 1, whole.
  EXPECT_EQ(row(kl.inputs, kl, 1), (Tokens{0, 14, 20}));
  EXPECT_EQ(row(kl.targets, kl, 1), (Tokens{-100, 20, 1}));
  EXPECT_EQ(kl.target_tokens, 2);
}

// A cell inside the completion that is not trained still names its token
// (as the next cell's input), so the completion moves whole.
TEST(KlRowsTest, UntrainedCellsInsideACompletionMoveWithIt) {
  Batch b = rows_of({{{0, 10}, {20, 21, 1}}, {{0, 11}, {30, 1}}}, 5);
  b.targets[2] = -100;  // row 0's 21
  const Batch kl = kl_rows(b, 64, kPad);
  EXPECT_EQ(row(kl.inputs, kl, 1), (Tokens{0, 11, 20, 21}));
  EXPECT_EQ(row(kl.targets, kl, 1), (Tokens{-100, 20, 21, 1}));
}

}  // namespace
}  // namespace tailor::runner::data
