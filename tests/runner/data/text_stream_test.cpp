// Streaming generated ids as text: nothing of a character is written before
// all its bytes came, and the pieces add up to the decoded whole.
#include "runner/data/text_stream.h"

#include <gtest/gtest.h>

#include "core/text.h"
#include "runner/data/byte_tokenizer.h"

namespace tailor::runner::data {
namespace {

TEST(TextStreamTest, HoldsBackSplitCharactersAndAddsUpToTheWhole) {
  ByteTokenizer tok;
  const std::string text = "Grüße, 東京 🎉!";
  TextStream stream(tok);
  std::string pieces;
  for (std::int32_t id : tok.encode(text)) {
    const std::string piece = stream.push(id);
    // Every piece ends on a character boundary.
    EXPECT_EQ(complete_utf8_prefix(piece), piece.size()) << piece;
    pieces += piece;
  }
  pieces += stream.finish();
  EXPECT_EQ(pieces, text);
  EXPECT_EQ(stream.text(), text);
}

TEST(TextStreamTest, SpecialsAddNothingAndAnUnfinishedCharacterComesAtTheEnd) {
  ByteTokenizer tok;
  TextStream stream(tok);
  EXPECT_EQ(stream.push('a'), "a");
  EXPECT_EQ(stream.push(ByteTokenizer::kEos), "");
  EXPECT_EQ(stream.push(0xE6), "");  // the first byte of 東
  EXPECT_EQ(stream.finish(), "\xEF\xBF\xBD");  // U+FFFD, as Hugging Face decodes it
}

TEST(TextStreamTest, LossyUtf8ReplacesEachMaximalSubpart) {
  EXPECT_EQ(utf8_lossy("ok \xE6\x9D\xB1"), "ok \xE6\x9D\xB1");
  // A truncated sequence is one replacement; a byte that starts none is one each.
  EXPECT_EQ(utf8_lossy("a\xE6\x9D" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(utf8_lossy("\xF8\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  // E0 80 is overlong from its second byte: two replacements (Unicode's example).
  EXPECT_EQ(utf8_lossy("\xE0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(TextStreamTest, CompletePrefixStopsBeforeSplitSequencesAndReplacementCharacters) {
  EXPECT_EQ(complete_utf8_prefix("abc"), 3u);
  EXPECT_EQ(complete_utf8_prefix("ab\xE6\x9D"), 2u);          // 2 of 東's 3 bytes
  EXPECT_EQ(complete_utf8_prefix("ab\xF0\x9F\x8E"), 2u);      // 3 of 🎉's 4
  EXPECT_EQ(complete_utf8_prefix("ab\xF0\x9F\x8E\x89"), 6u);  // all of it
  EXPECT_EQ(complete_utf8_prefix("ab\xEF\xBF\xBD"), 2u);      // U+FFFD
  EXPECT_EQ(complete_utf8_prefix(""), 0u);
}

}  // namespace
}  // namespace tailor::runner::data
