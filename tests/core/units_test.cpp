#include "core/units.h"

#include <gtest/gtest.h>

namespace tailor {
namespace {

TEST(BytesTest, ParsesBinaryAndDecimalUnits) {
  EXPECT_EQ(parse_bytes("24GiB")->count(), 24LL << 30);
  EXPECT_EQ(parse_bytes("24 GiB")->count(), 24LL << 30);
  EXPECT_EQ(parse_bytes("80GB")->count(), 80'000'000'000LL);
  EXPECT_EQ(parse_bytes("512MiB")->count(), 512LL << 20);
  EXPECT_EQ(parse_bytes("1.5KiB")->count(), 1536);
  EXPECT_EQ(parse_bytes("4096")->count(), 4096);
  EXPECT_EQ(parse_bytes("2tib")->count(), 2LL << 40);
}

TEST(BytesTest, RefusesAmbiguousUnitWithHint) {
  auto r = parse_bytes("24G");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("GiB"), std::string::npos);
  EXPECT_NE(r.status().message().find("GB"), std::string::npos);
}

TEST(BytesTest, RefusesNegativeGarbageAndUnknownUnits) {
  EXPECT_FALSE(parse_bytes("-1GiB").is_ok());
  EXPECT_FALSE(parse_bytes("abc").is_ok());
  EXPECT_FALSE(parse_bytes("").is_ok());
  EXPECT_FALSE(parse_bytes("12 parsecs").is_ok());
  EXPECT_FALSE(parse_bytes("1e30TB").is_ok());
  EXPECT_FALSE(parse_bytes("nan").is_ok());
}

TEST(BytesTest, PrintsThreeSignificantDigits) {
  EXPECT_EQ(Bytes(512).to_string(), "512 B");
  EXPECT_EQ(Bytes::kib(1.5).to_string(), "1.50 KiB");
  EXPECT_EQ(Bytes::gib(3.2).to_string(), "3.20 GiB");
  EXPECT_EQ(Bytes::gib(24).to_string(), "24.0 GiB");
  EXPECT_EQ(Bytes::mib(512).to_string(), "512 MiB");
  EXPECT_EQ(Bytes::mib(-1).to_string(), "-1.00 MiB");
}

TEST(BytesTest, ArithmeticAndOrdering) {
  EXPECT_EQ(Bytes::gib(1) + Bytes::gib(1), Bytes::gib(2));
  EXPECT_LT(Bytes::mib(1023), Bytes::gib(1));
  EXPECT_EQ((Bytes::gib(16) / 4).count(), 4LL << 30);
}

TEST(CountTest, ParsesSuffixes) {
  EXPECT_DOUBLE_EQ(*parse_count("2k"), 2000);
  EXPECT_DOUBLE_EQ(*parse_count("1.5M"), 1.5e6);
  EXPECT_DOUBLE_EQ(*parse_count("7B"), 7e9);
  EXPECT_DOUBLE_EQ(*parse_count("3"), 3);
  EXPECT_DOUBLE_EQ(*parse_count("1e6"), 1e6);
  EXPECT_FALSE(parse_count("2x").is_ok());
  EXPECT_FALSE(parse_count("-2k").is_ok());
}

TEST(CountTest, FormatsWithSuffix) {
  EXPECT_EQ(format_count(6738415616.0), "6.74B");
  EXPECT_EQ(format_count(124439808.0), "124M");
  EXPECT_EQ(format_count(512), "512");
}

TEST(FractionTest, PercentAndPlainFraction) {
  EXPECT_DOUBLE_EQ(*parse_fraction("10%"), 0.10);
  EXPECT_DOUBLE_EQ(*parse_fraction("0.25"), 0.25);
  EXPECT_FALSE(parse_fraction("150%").is_ok());
  EXPECT_FALSE(parse_fraction("ten").is_ok());
}

}  // namespace
}  // namespace tailor
