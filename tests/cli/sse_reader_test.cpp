// SseReader: messages split at any byte, CRLF lines, comments, several
// data lines, and ids that are not numbers.
#include <gtest/gtest.h>

#include "cli/sse_reader.h"

namespace tailor::cli {
namespace {

TEST(SseReaderTest, MessagesSplitAtAnyByteComeOutWhole) {
  const std::string body =
      "retry: 2000\n\n: keep-alive\n\nid: 7\nevent: state\ndata: {\"a\":1}\n\nevent: step\r\ndata: x\r\ndata: "
      "y\r\n\r\n";
  for (std::size_t cut = 0; cut <= body.size(); ++cut) {
    SseReader reader;
    auto messages = reader.feed(body.substr(0, cut));
    for (auto& m : reader.feed(body.substr(cut)))
      messages.push_back(std::move(m));
    ASSERT_EQ(messages.size(), 2u) << "cut at " << cut;
    EXPECT_EQ(messages[0].id, 7);
    EXPECT_EQ(messages[0].event, "state");
    EXPECT_EQ(messages[0].data, "{\"a\":1}");
    EXPECT_FALSE(messages[1].id.has_value());
    EXPECT_EQ(messages[1].event, "step");
    EXPECT_EQ(messages[1].data, "x\ny");
  }
}

TEST(SseReaderTest, AnIncompleteMessageWaitsAndAnIdThatIsNotANumberIsNone) {
  SseReader reader;
  EXPECT_TRUE(reader.feed("id: x1\ndata: a\n").empty());
  const auto m = reader.feed("\n");
  ASSERT_EQ(m.size(), 1u);
  EXPECT_FALSE(m[0].id.has_value());
  EXPECT_EQ(m[0].event, "message");
  EXPECT_EQ(m[0].data, "a");
}

}  // namespace
}  // namespace tailor::cli
