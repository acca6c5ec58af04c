// `tailor plan --probe K`: the plan's probe measured by tailor-runner in a
// scratch folder (runner/protocol/probe.h), its progress on this terminal,
// and the plan document as the probe wrote it again.
#pragma once

#include <string>

#include "cli/commands.h"
#include "core/status.h"

namespace tailor::cli {

// `plan_json` must ask for a probe (strategy.probe). Unavailable when
// tailor-runner cannot be found or started, Internal when it fails.
Result<std::string> run_probe(const std::string& plan_json, Streams io);

}  // namespace tailor::cli
