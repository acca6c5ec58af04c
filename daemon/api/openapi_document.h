// The API's own description, daemon/openapi.yaml, embedded at build time
// and served as GET /openapi.yaml and, converted once, GET /openapi.json.
#pragma once

#include <string>
#include <string_view>

namespace tailor::daemon {

std::string_view openapi_yaml();
// The same document as JSON: plain scalars typed as YAML 1.2's core schema
// reads them (null, booleans, integers, floats), quoted ones strings.
const std::string& openapi_json();

}  // namespace tailor::daemon
