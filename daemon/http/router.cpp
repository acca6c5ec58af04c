#include "daemon/http/router.h"

#include <map>

namespace tailor::daemon {
namespace {

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  std::size_t i = 1;
  while (i <= path.size()) {
    const auto slash = path.find('/', i);
    parts.push_back(path.substr(i, slash == std::string::npos ? std::string::npos : slash - i));
    if (slash == std::string::npos) break;
    i = slash + 1;
  }
  return parts;
}

bool match_pattern(const std::string& pattern, const std::string& path, std::map<std::string, std::string>& params) {
  const auto want = split_path(pattern);
  const auto got = split_path(path);
  if (want.size() != got.size()) return false;
  std::map<std::string, std::string> bound;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const std::string& w = want[i];
    if (w.size() > 2 && w.front() == '{' && w.back() == '}') {
      if (got[i].empty()) return false;
      bound[w.substr(1, w.size() - 2)] = got[i];
    } else if (w != got[i]) {
      return false;
    }
  }
  params = std::move(bound);
  return true;
}

}  // namespace

void Router::add(Route route) { routes_.push_back(std::move(route)); }

Router::Match Router::match(HttpRequest& request) const {
  Match m;
  for (const Route& r : routes_) {
    std::map<std::string, std::string> params;
    if (!match_pattern(r.pattern, request.path, params)) continue;
    if (r.method == request.method) {
      request.params = std::move(params);
      m.route = &r;
      return m;
    }
    m.status = 405;
    m.allow += (m.allow.empty() ? "" : ", ") + r.method;
  }
  return m;
}

}  // namespace tailor::daemon
