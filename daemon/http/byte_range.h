// Range requests (RFC 9110 section 14): which part of a representation of
// `size` bytes a Range header asks for.
#pragma once

#include <cstdint>
#include <string_view>

namespace tailor::daemon {

struct RangeChoice {
  enum class Kind {
    kWhole,          // 200 with everything
    kPart,           // 206 with [first, first + length)
    kUnsatisfiable,  // 416 (Content-Range: bytes */size)
  };
  Kind kind = Kind::kWhole;
  std::uint64_t first = 0;
  std::uint64_t length = 0;
};

// "bytes=A-B", "bytes=A-" and "bytes=-N" (the last N bytes). An absent or
// malformed header, another unit, or several ranges get the whole
// representation, which section 14.2 allows a server to send; a single
// range that starts at or after the end is unsatisfiable.
RangeChoice choose_range(std::string_view header, std::uint64_t size);

}  // namespace tailor::daemon
