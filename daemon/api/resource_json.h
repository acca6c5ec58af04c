// The JSON of the API's resources (daemon/openapi.yaml's Job, Event and
// StepMetric), shared by the handlers and the event stream.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "daemon/store/job_store.h"

namespace tailor::daemon {

// RFC 3339 UTC with milliseconds; null for none.
nlohmann::json time_json(std::optional<double> t);

template <class T>
nlohmann::json opt_json(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

// `compact_plan` (JSON text) replaces the whole plan document when given.
nlohmann::json job_json(const JobRecord& j, const std::string& output_dir, const std::string* compact_plan = nullptr);
nlohmann::json event_json(const EventRecord& e);
nlohmann::json step_json(const StepMetric& m);

}  // namespace tailor::daemon
