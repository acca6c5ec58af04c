#include "daemon/http/byte_range.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>

namespace tailor::daemon {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

std::optional<std::uint64_t> number(std::string_view s) {
  if (s.empty()) return std::nullopt;
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

RangeChoice choose_range(std::string_view header, std::uint64_t size) {
  RangeChoice whole;
  whole.length = size;
  header = trim(header);
  constexpr std::string_view kUnit = "bytes=";
  if (header.size() < kUnit.size()) return whole;
  for (std::size_t i = 0; i < kUnit.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != kUnit[i]) return whole;
  }
  const std::string_view spec = trim(header.substr(kUnit.size()));
  if (spec.find(',') != std::string_view::npos) return whole;
  const std::size_t dash = spec.find('-');
  if (dash == std::string_view::npos) return whole;
  const std::string_view a = trim(spec.substr(0, dash)), b = trim(spec.substr(dash + 1));
  RangeChoice part;
  part.kind = RangeChoice::Kind::kPart;
  if (a.empty()) {
    // The last N bytes.
    const auto n = number(b);
    if (!n) return whole;
    if (*n == 0 || size == 0) return {RangeChoice::Kind::kUnsatisfiable, 0, 0};
    part.length = std::min(*n, size);
    part.first = size - part.length;
    return part;
  }
  const auto first = number(a);
  if (!first) return whole;
  std::uint64_t last = size == 0 ? 0 : size - 1;
  if (!b.empty()) {
    const auto l = number(b);
    if (!l || *l < *first) return whole;
    last = std::min(last, *l);
  }
  if (*first >= size) return {RangeChoice::Kind::kUnsatisfiable, 0, 0};
  part.first = *first;
  part.length = last - *first + 1;
  return part;
}

}  // namespace tailor::daemon
