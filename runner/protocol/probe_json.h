// A probe measurement read from JSON already parsed: the plan reader's
// candidates (plan_reader.cpp) and a rank's file (probe.cpp's
// parse_measurement) share it. Torch-free.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "core/status.h"
#include "runner/protocol/probe.h"

namespace tailor::runner {

// InvalidArgument naming `name` when `m` is not a measurement.
Result<ProbeMeasurement> measurement_from_json(const nlohmann::json& m, const std::string& name);

}  // namespace tailor::runner
