// HTTP(S) requests through libcurl (Debian's libcurl4-openssl-dev): what
// the MLflow tracker sends. Bounded in time (connect and total timeouts),
// so a tracker that hangs cannot hold its worker for ever.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace tailor::runner::tracking {

struct HttpReply {
  long status = 0;
  std::string body;
};

struct HttpAuth {
  std::string bearer_token;  // Authorization: Bearer
  std::string username, password;  // basic auth, when no token
  bool insecure_tls = false;       // skip certificate checks (MLFLOW_TRACKING_INSECURE_TLS)
};

// libcurl's global set-up; call once from the main thread before any
// worker starts (curl_global_init is not thread-safe).
void init_http();

class HttpClient {
 public:
  explicit HttpClient(HttpAuth auth, long timeout_seconds = 10) : auth_(std::move(auth)), timeout_(timeout_seconds) {}
  // A transport failure is Unavailable ("GET URL: Couldn't connect to server");
  // any HTTP status comes back as the reply.
  Result<HttpReply> get(const std::string& url) const { return request("GET", url, ""); }
  Result<HttpReply> post_json(const std::string& url, const std::string& body) const {
    return request("POST", url, body);
  }

 private:
  Result<HttpReply> request(const char* method, const std::string& url, const std::string& body) const;

  HttpAuth auth_;
  long timeout_;
};

// Percent-encodes a query value.
std::string url_encode(const std::string& v);

}  // namespace tailor::runner::tracking
