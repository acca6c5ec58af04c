// The daemon's view of an HTTP exchange: plain structs that handlers and
// tests use without seeing Boost.Beast (which stays inside server.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tailor::daemon {

struct HttpRequest {
  std::string method;                          // "GET", "POST", ...
  std::string target;                          // as sent: "/v1/jobs?state=running"
  std::string path;                            // percent-decoded path without the query
  std::map<std::string, std::string> query;    // decoded; the last of repeated keys wins
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::map<std::string, std::string> params;   // path parameters, filled by the router
  std::string remote;                          // peer address, for logs
  // For a request answered on a worker thread (ServerOptions::offload):
  // whether its client has gone (its connection closed, or its sending side
  // shut down, which HTTP/1.1 clients do not do while they wait), asked as
  // often as the handler likes while it works, so that a long answer (a
  // generation) stops when nobody waits for it. Unset for other requests.
  std::function<bool()> client_left;

  // The header's value, or "" (name in any case).
  std::string header(std::string_view name) const;
  std::string query_value(const std::string& key, const std::string& fallback = {}) const {
    auto it = query.find(key);
    return it == query.end() ? fallback : it->second;
  }
};

// A body written as it is produced (GET .../logs?follow=true): the server
// calls `poll` every poll interval; it appends what is new to `out` and
// returns false once the stream is complete. Called from one thread at a
// time; must not block. The server releases it (and what it captured) when
// the stream ends: complete, or its client gone (a read or write on the
// connection failed), or closed by the stream budget or shutdown.
using StreamPoll = std::function<bool(std::string& out)>;

// A stretch of a body of several files (an archive): `bytes` as they are
// (headers, padding), or, with `path` set, `length` bytes of that file from
// the start, opened only when the sending reaches it (without following a
// link) and refused unless it lies inside the folder `inside`.
struct BodyPart {
  std::string bytes;
  std::string path;
  std::string inside;
  std::uint64_t length = 0;
  std::uint64_t size() const { return path.empty() ? bytes.size() : length; }
};

// Bytes of an open file sent as the body, with their Content-Length, read
// as they are written (a model of gigabytes is never held in memory). The
// descriptor closes with the last copy. With `parts` the body is those, in
// order, and fd, offset and length are not used.
struct FileBody {
  std::shared_ptr<const int> fd;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::vector<BodyPart> parts;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  StreamPoll stream;  // when set: sent chunked, `body` is ignored
  // A stream's owner (the kind of token that opened it), for the server's
  // stream budget, and the last words it sends when the budget closes it
  // to make room ("" or none: it just ends).
  std::string stream_owner;
  std::function<std::string(const std::string& reason)> stream_farewell;
  std::optional<FileBody> file;  // when set: sent from the file, `body` is ignored

  static HttpResponse json(int status, std::string body) {
    HttpResponse r;
    r.status = status;
    r.body = std::move(body);
    r.body += '\n';
    return r;
  }
};

// Splits "/a/b?x=1&y=%20z" into a decoded path and query map. False when
// the target is not origin-form or has a malformed percent escape.
bool parse_target(std::string_view target, std::string& path, std::map<std::string, std::string>& query);

}  // namespace tailor::daemon
