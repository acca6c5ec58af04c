#include "core/text.h"

#include "core/json_writer.h"

#include <gtest/gtest.h>

namespace tailor {
namespace {

TEST(TextTest, GroupThousandsPutsACommaBetweenGroupsOfThreeDigits) {
  EXPECT_EQ(group_thousands(0), "0");
  EXPECT_EQ(group_thousands(999), "999");
  EXPECT_EQ(group_thousands(1000), "1,000");
  EXPECT_EQ(group_thousands(1234567), "1,234,567");
  EXPECT_EQ(group_thousands(-123), "-123");
  EXPECT_EQ(group_thousands(-1234), "-1,234");
  EXPECT_EQ(group_thousands(-9223372036854775807LL - 1), "-9,223,372,036,854,775,808");
}

TEST(TextTest, EditDistanceCountsTranspositionAsOne) {
  EXPECT_EQ(edit_distance("lr", "lr"), 0u);
  EXPECT_EQ(edit_distance("epcohs", "epochs"), 1u);  // c,o swapped
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("ABC", "abc"), 0u);
}

TEST(TextTest, ClosestMatchSuggestsNearMissesOnly) {
  const std::vector<std::string> keys = {"micro_batch_size", "global_batch_size", "epochs", "lr"};
  EXPECT_EQ(closest_match("micro_batch", keys), "micro_batch_size");
  EXPECT_EQ(closest_match("ephocs", keys), "epochs");
  EXPECT_EQ(closest_match("completely_different", keys), "");
}

TEST(TextTest, QuoteEscapesAndTruncates) {
  EXPECT_EQ(quote("a\"b"), "\"a\\\"b\"");
  EXPECT_EQ(quote("tab\there"), "\"tab\\x09here\"");
  EXPECT_EQ(quote(std::string(100, 'x')).size(), 60u + 2u + 3u);
  // Paths are quoted whole: the file name is at the end.
  const std::string deep = "/a/deeply/nested/clone/of/the/repository/tests/dsl/cases/data/does-not-exist.jsonl";
  EXPECT_EQ(quote(deep, kWhole), "\"" + deep + "\"");
}

TEST(TextTest, SplitKeepsEmptyParts) {
  EXPECT_EQ(split("a.b..c", '.'), (std::vector<std::string>{"a", "b", "", "c"}));
  EXPECT_EQ(trim("  x \n"), "x");
}

TEST(TextTest, Utf8SequenceLengthAcceptsWellFormedSequencesOnly) {
  EXPECT_EQ(utf8_sequence_length("a", 0), 1u);
  EXPECT_EQ(utf8_sequence_length("\xC3\xA9", 0), 2u);          // é
  EXPECT_EQ(utf8_sequence_length("\xE2\x9C\x93", 0), 3u);      // ✓
  EXPECT_EQ(utf8_sequence_length("\xF0\x9F\x99\x82", 0), 4u);  // 🙂
  EXPECT_EQ(utf8_sequence_length("\x85", 0), 0u);              // stray continuation byte
  EXPECT_EQ(utf8_sequence_length("\xC3", 0), 0u);              // truncated
  EXPECT_EQ(utf8_sequence_length("\xC0\xAF", 0), 0u);          // overlong '/'
  EXPECT_EQ(utf8_sequence_length("\xED\xA0\x80", 0), 0u);      // surrogate U+D800
  EXPECT_EQ(utf8_sequence_length("\xF4\x90\x80\x80", 0), 0u);  // past U+10FFFF
  EXPECT_EQ(utf8_sequence_length("a", 1), 0u);
}

TEST(TextTest, JsonEscapeKeepsUtf8AndReplacesBytesThatAreNot) {
  EXPECT_EQ(json_escape("caf\xC3\xA9"), "\"caf\xC3\xA9\"");
  EXPECT_EQ(json_escape("a\x85" "b\xC3"), "\"a\\ufffdb\\ufffd\"");
  EXPECT_EQ(json_escape("\"\x01\n"), "\"\\\"\\u0001\\n\"");
}

}  // namespace
}  // namespace tailor
