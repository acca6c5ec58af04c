#include "daemon/api/openapi_document.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdlib>
#include <nlohmann/json.hpp>

extern const char tailor_daemon_openapi_yaml[];

namespace tailor::daemon {
namespace {

using nlohmann::ordered_json;

// A plain (unquoted) scalar as YAML 1.2's core schema types it.
ordered_json plain_scalar(const std::string& s) {
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  const char* begin = s.c_str();
  char* end = nullptr;
  errno = 0;
  const long long i = std::strtoll(begin, &end, 10);
  if (errno == 0 && end != begin && *end == '\0') return i;
  errno = 0;
  const double d = std::strtod(begin, &end);
  const bool numeric = s.find_first_not_of("0123456789+-.eE") == std::string::npos;
  if (numeric && errno == 0 && end != begin && *end == '\0') return d;
  return s;
}

ordered_json to_json(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      ordered_json o = ordered_json::object();
      for (const auto& kv : n)
        o[kv.first.as<std::string>()] = to_json(kv.second);
      return o;
    }
    case YAML::NodeType::Sequence: {
      ordered_json a = ordered_json::array();
      for (const auto& item : n)
        a.push_back(to_json(item));
      return a;
    }
    case YAML::NodeType::Scalar:
      // yaml-cpp tags a quoted or block scalar "!", a plain one "?".
      return n.Tag() == "?" ? plain_scalar(n.Scalar()) : ordered_json(n.Scalar());
    default: return nullptr;
  }
}

}  // namespace

std::string_view openapi_yaml() { return tailor_daemon_openapi_yaml; }

const std::string& openapi_json() {
  // The document is part of the build (a test parses it), so converting it
  // cannot fail at run time.
  static const std::string json = to_json(YAML::Load(std::string(openapi_yaml()))).dump(2) + "\n";
  return json;
}

}  // namespace tailor::daemon
