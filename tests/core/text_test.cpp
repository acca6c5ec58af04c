#include "core/text.h"

#include <gtest/gtest.h>

namespace tailor {
namespace {

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

}  // namespace
}  // namespace tailor
