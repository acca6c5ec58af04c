// choose_range: the forms of a single byte range, and what is answered
// with the whole file or 416.
#include <gtest/gtest.h>

#include "daemon/http/byte_range.h"

namespace tailor::daemon {
namespace {

using Kind = RangeChoice::Kind;

void expect_part(std::string_view header, std::uint64_t size, std::uint64_t first, std::uint64_t length) {
  const RangeChoice c = choose_range(header, size);
  EXPECT_EQ(c.kind, Kind::kPart) << header;
  EXPECT_EQ(c.first, first) << header;
  EXPECT_EQ(c.length, length) << header;
}

TEST(ByteRangeTest, SingleRangesInEachForm) {
  expect_part("bytes=0-99", 1000, 0, 100);
  expect_part("bytes=900-", 1000, 900, 100);
  expect_part("bytes=-10", 1000, 990, 10);
  expect_part("bytes=-5000", 1000, 0, 1000);  // more than there is: all of it
  expect_part("bytes=990-5000", 1000, 990, 10);
  expect_part("Bytes= 5-5 ", 1000, 5, 1);
}

TEST(ByteRangeTest, WhatIsAnsweredWithTheWholeFileOr416) {
  for (const char* whole : {"", "items=0-1", "bytes=0-1,5-6", "bytes=abc", "bytes=5-2", "bytes=-", "bytes=1-x"}) {
    const RangeChoice c = choose_range(whole, 1000);
    EXPECT_EQ(c.kind, Kind::kWhole) << whole;
    EXPECT_EQ(c.length, 1000u) << whole;
  }
  EXPECT_EQ(choose_range("bytes=1000-", 1000).kind, Kind::kUnsatisfiable);
  EXPECT_EQ(choose_range("bytes=-0", 1000).kind, Kind::kUnsatisfiable);
  EXPECT_EQ(choose_range("bytes=0-", 0).kind, Kind::kUnsatisfiable);
}

}  // namespace
}  // namespace tailor::daemon
