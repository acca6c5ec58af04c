// The JSON of the API's resources (daemon/openapi.yaml's Job, Event and
// StepMetric), shared by the handlers and the event stream.
#pragma once

#include <optional>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "daemon/store/job_store.h"

namespace tailor {
class JsonWriter;
}

namespace tailor::daemon {

// A JSON value as text. Bytes that are not UTF-8 (a client's query echoed
// in an error, a runner's log line) become U+FFFD instead of throwing.
std::string json_text(const nlohmann::json& j);

// RFC 3339 UTC with milliseconds; null for none.
nlohmann::json time_json(std::optional<double> t);

template <class T>
nlohmann::json opt_json(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

// The Job object, written straight into `w` (a listing of many writes no
// DOM): `plan_raw` is the JSON text given as its plan (the whole document,
// a listing's compact one, or "null"), `seq` added when given.
void write_job(JsonWriter& w, const JobRecord& j, const std::string& output_dir, std::string_view plan_raw,
               std::optional<std::int64_t> seq = std::nullopt);

// The same as a JSON value. `compact_plan` (JSON text) replaces the whole
// plan document when given; a plan that is not JSON becomes null.
nlohmann::json job_json(const JobRecord& j, const std::string& output_dir, const std::string* compact_plan = nullptr);
nlohmann::json event_json(const EventRecord& e);
nlohmann::json step_json(const StepMetric& m);

}  // namespace tailor::daemon
