#include "dsl/library_version.h"

#include <gtest/gtest.h>

namespace tailor::dsl {
namespace {

TEST(LibraryVersionTest, ReadsMajorAndMinorWithOrWithoutAPatch) {
  const auto v = parse_library_version("4.47");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->major, 4);
  EXPECT_EQ(v->minor, 47);
  const auto p = parse_library_version("4.48.1");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->major, 4);
  EXPECT_EQ(p->minor, 48);
  EXPECT_EQ(parse_library_version("5.0")->major, 5);
}

TEST(LibraryVersionTest, RefusesWhatIsNotMajorMinorPatch) {
  for (const char* bad :
       {"", "4", "4.", ".47", "4.x", "v4.47", "4.47.", "4.47.1.2", "4.47.1rc1", "4.47 ", "-4.47", "4.1234567"}) {
    EXPECT_FALSE(parse_library_version(bad).has_value()) << '"' << bad << '"';
  }
}

}  // namespace
}  // namespace tailor::dsl
