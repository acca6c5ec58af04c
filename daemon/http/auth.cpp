#include "daemon/http/auth.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace tailor::daemon {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

Result<std::string> random_hex(std::size_t bytes) {
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::io_error(std::string("/dev/urandom: ") + std::strerror(errno));
  std::string raw(bytes, '\0');
  std::size_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::read(fd, raw.data() + got, bytes - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return Status::io_error("/dev/urandom: short read");
    }
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

Result<std::string> load_or_create_token(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if ((st.st_mode & 077) != 0) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%03o", static_cast<unsigned>(st.st_mode & 0777));
      return Status::failed_precondition(path + " is accessible to other users (mode " + mode +
                                         "); chmod 600 it, or delete it to generate a new token");
    }
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    std::string token = ss.str();
    while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
    if (!f && !f.eof()) return Status::io_error("reading " + path);
    if (token.size() < 32) return Status::failed_precondition(path + " holds a token shorter than 32 characters");
    return token;
  }
  TAILOR_ASSIGN_OR_RETURN(std::string token, random_hex(32));
  TAILOR_RETURN_IF_ERROR(platform::write_file_atomic(path, token + "\n", platform::Durability::kPowerCut, 0600));
  return token;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  // Every byte of the longer string is visited whatever matches, so timing
  // tells an attacker nothing about how much of a guess was right.
  const std::size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

bool has_bearer_token(const HttpRequest& request, const std::string& token) {
  const std::string auth = request.header("authorization");
  constexpr std::string_view kPrefix = "bearer ";
  if (auth.size() <= kPrefix.size() || lower(auth.substr(0, kPrefix.size())) != kPrefix) return false;
  std::string_view given(auth);
  given.remove_prefix(kPrefix.size());
  while (!given.empty() && given.front() == ' ') given.remove_prefix(1);
  return constant_time_equal(given, token);
}

HostPolicy::HostPolicy(std::uint16_t port, const std::string& bound_address, std::vector<std::string> extra) {
  const std::string p = std::to_string(port);
  std::vector<std::string> names = {"localhost", "127.0.0.1", "[::1]"};
  if (!bound_address.empty() && bound_address != "0.0.0.0" && bound_address != "::") {
    names.push_back(bound_address.find(':') != std::string::npos ? "[" + bound_address + "]" : bound_address);
  }
  for (const auto& n : names) {
    hosts_.push_back(n);
    hosts_.push_back(n + ":" + p);
  }
  for (const auto& e : extra) {
    // A name given without a port is accepted with the server's port too,
    // as a client that connects to it writes it ("tailord:8470").
    const std::string name = lower(e);
    if (name.empty()) continue;
    const auto colon = name.rfind(':');
    const bool has_port = colon != std::string::npos && (name.front() != '[' || name.rfind(']') < colon);
    hosts_.push_back(name);
    if (!has_port) hosts_.push_back(name + ":" + p);
  }
  any_address_ = bound_address == "0.0.0.0" || bound_address == "::";
}

bool is_ip_host(std::string_view host) {
  std::string_view address = host;
  std::string_view port;
  int family = AF_INET;
  if (!host.empty() && host.front() == '[') {
    const auto close = host.find(']');
    if (close == std::string_view::npos) return false;
    address = host.substr(1, close - 1);
    const std::string_view rest = host.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return false;
      port = rest.substr(1);
      if (port.empty()) return false;
    }
    family = AF_INET6;
  } else if (const auto colon = host.find(':'); colon != std::string_view::npos) {
    address = host.substr(0, colon);
    port = host.substr(colon + 1);
    if (port.empty()) return false;
  }
  if (port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  // inet_pton takes only the strict forms: dotted-quad decimal for IPv4, so
  // "0x7f.1" or "2130706433", which resolvers read as addresses, are names here.
  unsigned char buffer[16];
  return ::inet_pton(family, std::string(address).c_str(), buffer) == 1;
}

bool HostPolicy::name_allowed(std::string_view host) const {
  const std::string h = lower(host);
  return std::find(hosts_.begin(), hosts_.end(), h) != hosts_.end();
}

bool HostPolicy::address_allowed(std::string_view host) const { return any_address_ && is_ip_host(host); }

bool HostPolicy::allows(const HttpRequest& request, std::string& why) const {
  const std::string host = request.header("host");
  if (host.empty()) {
    why = "missing Host header";
    return false;
  }
  if (!name_allowed(host) && !address_allowed(host)) {
    why = "Host '" + host + "' is not an allowed name for this server (add it to allowed_hosts)";
    return false;
  }
  const std::string origin = request.header("origin");
  if (origin.empty()) return true;
  const auto scheme = origin.find("://");
  const std::string origin_host = scheme == std::string::npos ? std::string() : origin.substr(scheme + 3);
  const bool same_address = address_allowed(origin_host) && lower(origin_host) == lower(host);
  if (origin_host.empty() || !(name_allowed(origin_host) || same_address)) {
    why = "Origin '" + origin + "' is not allowed";
    return false;
  }
  return true;
}

}  // namespace tailor::daemon
