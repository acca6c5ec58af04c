// TAILOR_CHECK: aborts with file:line on a broken invariant (a bug).
// Never used for user input: that is reported through Status.
#pragma once

namespace tailor::detail {
[[noreturn]] void check_failed(const char* expr, const char* file, int line);
}

#define TAILOR_CHECK(cond) \
  ((cond) ? (void)0 : ::tailor::detail::check_failed(#cond, __FILE__, __LINE__))
