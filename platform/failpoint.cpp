#include "platform/failpoint.h"

#include <cstdlib>
#include <set>
#include <string>

namespace tailor::platform {
namespace {

const std::set<std::string, std::less<>>& armed() {
  static const std::set<std::string, std::less<>> kArmed = [] {
    std::set<std::string, std::less<>> names;
    const char* env = std::getenv("TAILOR_FAILPOINTS");
    std::string list = env ? env : "";
    for (std::size_t at = 0; at <= list.size();) {
      const std::size_t comma = std::min(list.find(',', at), list.size());
      if (comma > at) names.insert(list.substr(at, comma - at));
      at = comma + 1;
    }
    return names;
  }();
  return kArmed;
}

}  // namespace

bool failpoint_armed(std::string_view name) { return armed().count(name) > 0; }

void crash_point(std::string_view name) {
  if (failpoint_armed(name)) std::_Exit(86);
}

}  // namespace tailor::platform
