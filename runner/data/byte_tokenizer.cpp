#include "runner/data/byte_tokenizer.h"

namespace tailor::runner::data {

std::vector<std::int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> ids;
  ids.reserve(text.size());
  // Through unsigned char: plain char is signed on x86, and bytes >= 0x80
  // (every non-ASCII UTF-8 byte) must map to 128..255, not to negatives.
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

Result<EncodedText> ByteTokenizer::encode_with_offsets(std::string_view text) const {
  EncodedText out;
  out.ids = encode(text);
  out.offsets.reserve(text.size());
  for (std::uint32_t i = 0; i < text.size(); ++i) out.offsets.emplace_back(i, i + 1);
  return out;
}

std::string ByteTokenizer::decode(const std::vector<std::int32_t>& ids) const {
  std::string text;
  text.reserve(ids.size());
  for (std::int32_t id : ids) {
    if (id >= 0 && id < 256) text.push_back(static_cast<char>(static_cast<unsigned char>(id)));
  }
  return text;
}

}  // namespace tailor::runner::data
