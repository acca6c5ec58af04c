// A small tokenizer.json that tailor-runner reads (byte-level BPE, no
// merges): each byte is its own token, id = the byte's value, and
// "<|endoftext|>" is id 256 (EOS; documents start with it, as GPT-2's do).
// 257 ids. For test model folders, which need a tokenizer like real ones.
#pragma once

#include <string>

namespace tailor::testing {

inline std::string byte_level_tokenizer_json() {
  // GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
  // the others for U+0100 onwards in byte order.
  auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
  auto utf8 = [](int cp) {
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
  };
  std::string vocab;
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const int cp = printable(b) ? b : next++;
    std::string symbol = utf8(cp);
    if (symbol == "\"" || symbol == "\\") symbol = "\\" + symbol;
    vocab += "\"" + symbol + "\": " + std::to_string(b) + ", ";
  }
  vocab += "\"<|endoftext|>\": 256";
  return R"({"added_tokens": [{"id": 256, "content": "<|endoftext|>", "special": true}], )"
         R"("pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false}, )"
         R"("model": {"type": "BPE", "vocab": {)" +
         vocab + R"(}, "merges": []}})";
}

}  // namespace tailor::testing
