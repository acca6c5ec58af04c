// Method + path-pattern routing: "/v1/jobs/{id}/plan" binds `id`. Unknown
// paths are 404, known paths with another method 405 with an Allow header.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "daemon/http/message.h"

namespace tailor::daemon {

using Handler = std::function<HttpResponse(HttpRequest&)>;

struct Route {
  std::string method;
  std::string pattern;        // also the `route` label of request metrics
  bool authenticated = true;  // false: /healthz, /metrics
  Handler handler;
  // A POST that only reads (making a download link): a read-only token may
  // call it, as it may every GET.
  bool reads_only = false;
};

class Router {
 public:
  void add(Route route);

  struct Match {
    const Route* route = nullptr;  // null: see `status`
    int status = 404;              // 404 or 405 when route is null
    std::string allow;             // for 405
  };
  // Fills request.params on a match.
  Match match(HttpRequest& request) const;
  const std::vector<Route>& routes() const { return routes_; }

 private:
  std::vector<Route> routes_;
};

}  // namespace tailor::daemon
