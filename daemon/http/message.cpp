#include "daemon/http/message.h"

#include <cctype>

namespace tailor::daemon {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool decode(std::string_view in, bool plus_is_space, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%') {
      if (i + 2 >= in.size()) return false;
      const int hi = hex_value(in[i + 1]), lo = hex_value(in[i + 2]);
      if (hi < 0 || lo < 0) return false;
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (plus_is_space && in[i] == '+') {
      out += ' ';
    } else {
      out += in[i];
    }
  }
  return true;
}

}  // namespace

std::string HttpRequest::header(std::string_view name) const {
  std::string key(name);
  for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto it = headers.find(key);
  return it == headers.end() ? std::string() : it->second;
}

bool parse_target(std::string_view target, std::string& path, std::map<std::string, std::string>& query) {
  if (target.empty() || target[0] != '/') return false;
  const auto q = target.find('?');
  if (!decode(target.substr(0, q), false, path)) return false;
  query.clear();
  if (q == std::string_view::npos) return true;
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const auto amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    if (pair.empty()) continue;
    const auto eq = pair.find('=');
    std::string k, v;
    if (!decode(pair.substr(0, eq), true, k)) return false;
    if (eq != std::string_view::npos && !decode(pair.substr(eq + 1), true, v)) return false;
    query[k] = v;
  }
  return true;
}

}  // namespace tailor::daemon
