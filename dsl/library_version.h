// A library's version as a spec gives it ("4.47" or "4.47.1"): its major
// and minor numbers, which are all the planner tells apart.
#pragma once

#include <optional>
#include <string_view>

namespace tailor::dsl {

struct LibraryVersion {
  int major = 0, minor = 0;
};

// major.minor[.patch], decimal numbers only; nullopt otherwise.
std::optional<LibraryVersion> parse_library_version(std::string_view text);

}  // namespace tailor::dsl
