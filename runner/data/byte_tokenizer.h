// A byte-level tokenizer for models trained without a tokenizer file: every
// byte is its own id, plus three specials. No merges, no normalisation.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runner/data/tokenizer.h"

namespace tailor::runner::data {

// Ids 0..255 are the bytes of the text (UTF-8 or anything else, untouched);
// 256.. are specials. Models may have a larger vocab than kVocabSize
// (tiny-llama-byte has 260); the extra ids are simply never produced.
// Stateless, so safe to share between threads.
class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr std::int32_t kBos = 256;
  static constexpr std::int32_t kEos = 257;
  static constexpr std::int32_t kPad = 258;
  static constexpr std::int32_t kVocabSize = 259;

  // One id per byte of `text`; no specials are added.
  std::vector<std::int32_t> encode(std::string_view text) const override;
  Result<EncodedText> encode_with_offsets(std::string_view text) const override;

  // The bytes of `ids`; specials and any id outside 0..255 are skipped.
  std::string decode(const std::vector<std::int32_t>& ids) const override;

  std::int32_t bos_id() const override { return kBos; }
  std::int32_t eos_id() const override { return kEos; }
  std::int32_t declared_pad_id() const override { return kPad; }  // tokenizer_config.json's <pad> (bpe_tokenizer.h)
  std::int32_t pad_id() const override { return kPad; }
  std::int64_t vocab_size() const override { return kVocabSize; }
  std::string fingerprint() const override { return "byte-v1"; }
  std::string describe() const override { return "byte-level"; }
};

}  // namespace tailor::runner::data
