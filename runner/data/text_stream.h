// Generated ids as text while they arrive: each call returns the text that
// has become final. Byte-level tokens can end inside a UTF-8 character and
// a decoder may rewrite a piece's start (SentencePiece's leading space), so
// the whole sequence is decoded each time and only what extends the text
// already written, up to the last complete character, is returned. Text
// is valid UTF-8: bytes that are not are replaced as Hugging Face's
// decoders replace them (core/text.h utf8_lossy).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runner/data/tokenizer.h"

namespace tailor::runner::data {

class TextStream {
 public:
  explicit TextStream(const Tokenizer& tokenizer) : tok_(tokenizer) {}

  // The new final text after `id` (often empty while a character is split).
  std::string push(std::int32_t id);
  // The rest at the end of generation, an incomplete character as U+FFFD.
  std::string finish();
  // Everything returned so far.
  const std::string& text() const { return written_; }

 private:
  const Tokenizer& tok_;
  std::vector<std::int32_t> ids_;
  std::string written_;
};

// The length of the longest prefix of `s` that does not end inside a UTF-8
// sequence nor with U+FFFD (a decoder's stand-in for bytes still to come).
std::size_t complete_utf8_prefix(const std::string& s);

}  // namespace tailor::runner::data
