// Named points where a test stops this process dead, to reproduce a crash
// between two steps that are otherwise microseconds apart (tailord killed
// after it forked a runner and before it wrote down the runner's pid).
// Armed only by the environment: TAILOR_FAILPOINTS=name[,name...], read
// once; unarmed, a point costs one lookup in an empty set. docs/testing.md
// lists the points.
#pragma once

#include <string_view>

namespace tailor::platform {

// Whether TAILOR_FAILPOINTS names `name`.
bool failpoint_armed(std::string_view name);

// Ends the process at once with exit status 86, as SIGKILL would (no
// destructors, no flushing), when `name` is armed.
void crash_point(std::string_view name);

}  // namespace tailor::platform
