// The `tailor` client's side of tailord's REST API (daemon/openapi.yaml):
// where the daemon is, its token, and HTTP/1.1 requests over TCP with
// timeouts. Synchronous: one command, one connection per request.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>

#include "core/args.h"
#include "core/status.h"

namespace tailor::cli {

struct Endpoint {
  std::string host = "127.0.0.1";
  std::string port = "8470";
  std::string token;
  std::string source;  // where the address came from, for error messages

  std::string address() const { return host + ":" + port; }
};

// The flags of every command that talks to tailord.
std::vector<FlagSpec> with_remote_flags(std::vector<FlagSpec> flags);
extern const char* const kRemoteFlagsHelp;

// Address: --addr, else $TAILOR_ADDR, else DIR/address of --data-dir or
// $TAILOR_DATA_DIR, else 127.0.0.1:8470. Token: --token, else $TAILOR_TOKEN,
// else DIR/token. A missing token is not an error here (the daemon answers
// 401 and the command says how to pass one).
Result<Endpoint> resolve_endpoint(const Args& args);

struct HttpResponse {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case names
};

class RestClient {
 public:
  explicit RestClient(Endpoint endpoint, std::chrono::milliseconds timeout = std::chrono::seconds(30));

  // One request; the body is sent with `content_type` when not empty.
  // Transport failures are Unavailable ("cannot reach tailord at ...").
  Result<HttpResponse> request(const std::string& method, const std::string& target, const std::string& body = {},
                               const std::string& content_type = {},
                               const std::map<std::string, std::string>& headers = {}) const;

  // GET with a streamed body: `on_data` gets each piece as it arrives until
  // the server ends the response (or on_data returns false). No overall
  // timeout; `idle` bounds the wait for the next piece.
  // `headers` go with the request; `on_status` hears the status and the
  // response's headers (lower-case names) before the first piece.
  Result<int> stream(const std::string& target, const std::function<bool(const std::string&)>& on_data,
                     std::chrono::milliseconds idle = std::chrono::minutes(10),
                     const std::map<std::string, std::string>& headers = {},
                     const std::function<void(int, const std::map<std::string, std::string>&)>& on_status = {}) const;

  const Endpoint& endpoint() const { return endpoint_; }

 private:
  Endpoint endpoint_;
  std::chrono::milliseconds timeout_;
};

// The daemon's error object ({error, message, details}) as one message,
// with the diagnostics' lines when there are any; the raw body otherwise.
std::string error_message(const HttpResponse& r);

// Percent-encodes a query value or path segment.
std::string url_encode(const std::string& s);

}  // namespace tailor::cli
