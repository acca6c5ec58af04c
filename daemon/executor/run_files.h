// Reading what a runner writes while it runs: complete lines appended to a
// JSON-lines file since a byte offset (a half-written last line waits for
// the next read), and the runner's lines (runner/protocol/events.h) turned
// into store rows.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "daemon/store/job_store.h"
#include "platform/process.h"

namespace tailor::daemon {

// Complete lines of `path` after `offset`, at most `max_bytes` of them;
// `offset` advances past what was returned. A missing file is no lines.
Result<std::vector<std::string>> read_new_lines(const std::string& path, std::int64_t& offset,
                                                std::int64_t max_bytes = 4 << 20);

// Bytes of `path` after `offset` (up to max_bytes), for log streaming.
Result<std::string> read_bytes_from(const std::string& path, std::int64_t& offset, std::int64_t max_bytes);

// One metrics.jsonl line as a store row; nullopt for a line that is not a
// step object (a torn or foreign line is skipped, not fatal).
std::optional<StepMetric> parse_metric_line(const std::string& line, std::int64_t attempt);

// One events.jsonl line as an event row (kind "runner.<event>").
std::optional<NewEvent> parse_event_line(const std::string& line);

// The exit a runner's events record (protocol/events.h), for a runner
// whose exit status is gone (not tailord's child, or ended while tailord
// was down): none recorded means it was killed.
platform::ProcessExit exit_in_events(const std::vector<std::string>& event_lines);
// The same, of the events file in a job's folder `dir`.
platform::ProcessExit exit_in_events_file(const std::string& dir);

}  // namespace tailor::daemon
