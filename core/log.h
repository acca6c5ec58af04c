// Minimal levelled logging to stderr: "tailor: warning: ...". Thread-safe
// (one write per line). The level comes from set_log_level or TAILOR_LOG.
#pragma once

#include <string_view>

namespace tailor {

enum class LogLevel { kDebug = 0, kInfo, kWarning, kError };

void set_log_level(LogLevel level);
LogLevel log_level();
void log(LogLevel level, std::string_view message);

inline void log_debug(std::string_view m) { log(LogLevel::kDebug, m); }
inline void log_info(std::string_view m) { log(LogLevel::kInfo, m); }
inline void log_warning(std::string_view m) { log(LogLevel::kWarning, m); }
inline void log_error(std::string_view m) { log(LogLevel::kError, m); }

}  // namespace tailor
