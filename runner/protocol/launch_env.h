// Environment variables tailord sets for the runners it launches, beside
// the heartbeat's (heartbeat.h) and the ranks' (dist/rank_env.h).
#pragma once

namespace tailor::runner {

// tailord's --spec-root: the files a spec names must be read from inside
// it (runner/data/file_io.h checks the file actually opened).
inline constexpr const char* kSpecRootEnv = "TAILOR_SPEC_ROOT";

}  // namespace tailor::runner
