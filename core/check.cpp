#include "core/check.h"

#include <cstdio>
#include <cstdlib>

namespace tailor::detail {

void check_failed(const char* expr, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: internal check failed: %s\n", file, line, expr);
  std::fflush(stderr);
  std::abort();
}

}  // namespace tailor::detail
