// The web UI's sign-in: a browser posts a token once (POST /v1/session) and
// keeps a random session id in a cookie that is HttpOnly (page scripts never
// see it) and SameSite=Strict (a browser sends it only with requests that a
// page of tailord's own origin makes). Requests that change anything under a
// session must also carry an Origin the Host policy accepts (api.cpp): with
// SameSite=Strict that gives the guarantee a bearer token in a header gives,
// that no other site's page can act for the user.
//
// A session has the scope of the token it was made with and lasts 30 days.
// It ends when its token is rotated (the session keeps a fingerprint of the
// token, never the token), when the browser signs out (DELETE /v1/session),
// or when it expires. Sessions are kept in DATA/sessions (mode 0600, written
// whole through a rename) so that a restart of tailord does not sign every
// browser out. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "daemon/http/message.h"
#include "daemon/http/tokens.h"

namespace tailor::daemon {

inline constexpr const char* kSessionCookie = "tailor_session";
inline constexpr std::int64_t kSessionSeconds = 30 * 24 * 3600;

// A 64-bit FNV-1a of a token: enough to notice that a token file now holds
// another token, and no help in guessing the token.
std::uint64_t token_fingerprint(std::string_view token);

// The value of cookie `name` in a request's Cookie header ("a=1; b=2"), or
// nullopt.
std::optional<std::string> cookie_value(const HttpRequest& request, std::string_view name);

class Sessions {
 public:
  // Reads `path` (a missing file is no sessions; expired entries and lines
  // that do not parse are dropped).
  static Result<std::unique_ptr<Sessions>> open(const std::string& path);

  struct Session {
    Access access = Access::kNone;
    std::uint64_t fingerprint = 0;  // token_fingerprint of the token it was made with
    std::int64_t expires = 0;       // Unix seconds
  };

  // A new session with `access`, made with `token`; its id (64 hex). The
  // file is written before the id is returned.
  Result<std::string> create(Access access, std::string_view token, std::int64_t now);
  // The live session the request's cookie names, if any.
  std::optional<Session> find(const HttpRequest& request, std::int64_t now);
  // Ends the session the request's cookie names (none: nothing to do).
  Status remove(const HttpRequest& request);

  // Set-Cookie values that keep and that end a session.
  static std::string set_cookie(const std::string& id);
  static std::string clear_cookie();

 private:
  explicit Sessions(std::string path) : path_(std::move(path)) {}
  Status save_locked() const;

  const std::string path_;
  std::mutex mu_;
  std::map<std::string, Session> sessions_;
};

}  // namespace tailor::daemon
