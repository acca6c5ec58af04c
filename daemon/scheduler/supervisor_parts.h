// What supervisor.cpp and supervisor_slurm.cpp share: reading a plan's
// memory estimate and an attempt's recorded exit. Internal to the
// supervisor.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "platform/process.h"

namespace tailor::daemon::supervisor_parts {

// The plan document's per-GPU estimate by component; `total` its sum.
std::map<std::string, std::int64_t> plan_components(const std::string& plan_json, std::int64_t& total);

// The exit a runner recorded in its events file (protocol/events.h), for a
// runner whose exit status is gone; none recorded: it was killed.
platform::ProcessExit exit_recorded(const std::vector<std::string>& event_lines);

}  // namespace tailor::daemon::supervisor_parts
