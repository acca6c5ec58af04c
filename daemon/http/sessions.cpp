#include "daemon/http/sessions.h"

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iterator>
#include <sstream>

#include "daemon/http/auth.h"
#include "platform/files.h"

namespace tailor::daemon {
namespace {

const char* access_name(Access a) { return a == Access::kAdmin ? "admin" : a == Access::kRead ? "read" : "none"; }

bool is_session_id(std::string_view id) {
  if (id.size() != 64) return false;
  for (char c : id) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

std::uint64_t token_fingerprint(std::string_view token) {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, 64-bit offset basis and prime
  for (unsigned char c : token) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::optional<std::string> cookie_value(const HttpRequest& request, std::string_view name) {
  const std::string header = request.header("cookie");
  std::size_t pos = 0;
  while (pos < header.size()) {
    std::size_t end = header.find(';', pos);
    if (end == std::string::npos) end = header.size();
    std::string_view pair(header.data() + pos, end - pos);
    while (!pair.empty() && pair.front() == ' ')
      pair.remove_prefix(1);
    const std::size_t eq = pair.find('=');
    if (eq != std::string_view::npos && pair.substr(0, eq) == name) return std::string(pair.substr(eq + 1));
    pos = end + 1;
  }
  return std::nullopt;
}

Result<std::unique_ptr<Sessions>> Sessions::open(const std::string& path) {
  std::unique_ptr<Sessions> s(new Sessions(path));
  std::ifstream in(path);
  if (!in.is_open()) return s;  // no sessions yet (or unreadable: browsers sign in again)
  const std::int64_t now = static_cast<std::int64_t>(std::time(nullptr));
  for (std::string line; std::getline(in, line);) {
    // "<id> <admin|read> <fingerprint hex> <expires>"
    std::istringstream fields(line);
    std::string id, access, fingerprint;
    std::int64_t expires = 0;
    if (!(fields >> id >> access >> fingerprint >> expires) || !is_session_id(id) || expires <= now) continue;
    Session session;
    session.access = access == "admin" ? Access::kAdmin : access == "read" ? Access::kRead : Access::kNone;
    if (session.access == Access::kNone) continue;
    session.fingerprint = std::strtoull(fingerprint.c_str(), nullptr, 16);
    session.expires = expires;
    s->sessions_[id] = session;
  }
  return s;
}

Status Sessions::save_locked() const {
  std::string out;
  for (const auto& [id, s] : sessions_) {
    char line[160];
    std::snprintf(line, sizeof line, "%s %s %016llx %lld\n", id.c_str(), access_name(s.access),
                  static_cast<unsigned long long>(s.fingerprint), static_cast<long long>(s.expires));
    out += line;
  }
  // Mode 0600 from the start: the file names live sessions.
  return platform::write_file_atomic(path_, out, platform::Durability::kPowerCut, 0600);
}

Result<std::string> Sessions::create(Access access, std::string_view token, std::int64_t now) {
  TAILOR_ASSIGN_OR_RETURN(std::string id, random_hex(32));
  std::lock_guard lock(mu_);
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    it = it->second.expires <= now ? sessions_.erase(it) : std::next(it);
  }
  sessions_[id] = Session{access, token_fingerprint(token), now + kSessionSeconds};
  if (Status saved = save_locked(); !saved.is_ok()) {
    sessions_.erase(id);
    return saved;
  }
  return id;
}

std::optional<Sessions::Session> Sessions::find(const HttpRequest& request, std::int64_t now) {
  const auto id = cookie_value(request, kSessionCookie);
  if (!id || !is_session_id(*id)) return std::nullopt;
  std::lock_guard lock(mu_);
  const auto it = sessions_.find(*id);
  if (it == sessions_.end() || it->second.expires <= now) return std::nullopt;
  return it->second;
}

Status Sessions::remove(const HttpRequest& request) {
  const auto id = cookie_value(request, kSessionCookie);
  if (!id) return Status::ok();
  std::lock_guard lock(mu_);
  if (sessions_.erase(*id) == 0) return Status::ok();
  return save_locked();
}

std::string Sessions::set_cookie(const std::string& id) {
  return std::string(kSessionCookie) + "=" + id + "; Path=/; Max-Age=" + std::to_string(kSessionSeconds) +
         "; HttpOnly; SameSite=Strict";
}

std::string Sessions::clear_cookie() {
  return std::string(kSessionCookie) + "=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict";
}

}  // namespace tailor::daemon
