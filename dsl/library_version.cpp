#include "dsl/library_version.h"

#include <charconv>

namespace tailor::dsl {
namespace {

// One decimal number at `pos` (no sign, at most 6 digits), advancing it.
std::optional<int> read_number(std::string_view text, std::size_t& pos) {
  const std::size_t start = pos;
  while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9')
    ++pos;
  if (pos == start || pos - start > 6) return std::nullopt;
  int v = 0;
  std::from_chars(text.data() + start, text.data() + pos, v);
  return v;
}

}  // namespace

std::optional<LibraryVersion> parse_library_version(std::string_view text) {
  std::size_t pos = 0;
  const auto major = read_number(text, pos);
  if (!major || pos >= text.size() || text[pos] != '.') return std::nullopt;
  ++pos;
  const auto minor = read_number(text, pos);
  if (!minor) return std::nullopt;
  if (pos < text.size()) {
    if (text[pos] != '.') return std::nullopt;
    ++pos;
    if (!read_number(text, pos) || pos != text.size()) return std::nullopt;
  }
  return LibraryVersion{*major, *minor};
}

}  // namespace tailor::dsl
