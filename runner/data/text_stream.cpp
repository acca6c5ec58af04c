#include "runner/data/text_stream.h"

#include "core/text.h"

namespace tailor::runner::data {

std::size_t complete_utf8_prefix(const std::string& s) {
  std::size_t end = s.size();
  // A lead byte within the last three bytes whose sequence runs past the end.
  for (std::size_t back = 1; back <= 4 && back <= s.size(); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const std::size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (need > back) end = s.size() - back;
    break;
  }
  static const std::string kReplacement = "\xEF\xBF\xBD";
  while (end >= kReplacement.size() && s.compare(end - kReplacement.size(), kReplacement.size(), kReplacement) == 0) {
    end -= kReplacement.size();
  }
  return end;
}

std::string TextStream::push(std::int32_t id) {
  ids_.push_back(id);
  const std::string text = utf8_lossy(tok_.decode(ids_));
  const std::size_t end = complete_utf8_prefix(text);
  // Text that rewrote what was written already waits for finish().
  if (end <= written_.size() || text.compare(0, written_.size(), written_) != 0) return {};
  std::string piece = text.substr(written_.size(), end - written_.size());
  written_ += piece;
  return piece;
}

std::string TextStream::finish() {
  const std::string text = utf8_lossy(tok_.decode(ids_));
  if (text.compare(0, written_.size(), written_) != 0 || text.size() <= written_.size()) return {};
  std::string piece = text.substr(written_.size());
  written_ = text;
  return piece;
}

}  // namespace tailor::runner::data
