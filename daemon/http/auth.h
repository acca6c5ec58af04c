// Access control for tailord's API: a bearer token generated on first start
// (DIR/token, mode 0600) and compared in constant time, and Host/Origin
// checks that stop a web page from reaching the loopback API through DNS
// rebinding (a browser sends the attacker's host name in Host).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "daemon/http/message.h"

namespace tailor::daemon {

// `bytes` random bytes from /dev/urandom as lower-case hex.
Result<std::string> random_hex(std::size_t bytes);

// Reads the token at `path`, or creates it (32 random bytes from
// /dev/urandom, hex) with mode 0600 through a temporary file and rename. An
// existing token file readable by group or others is refused: someone may
// have copied it.
Result<std::string> load_or_create_token(const std::string& path);

// Equal contents, in time that depends only on the lengths.
bool constant_time_equal(std::string_view a, std::string_view b);

// True when `request` carries "Authorization: Bearer <token>".
bool has_bearer_token(const HttpRequest& request, const std::string& token);

// Which Host and Origin values the API accepts.
class HostPolicy {
 public:
  // For a server bound to `port`: localhost, 127.0.0.1 and [::1] with that
  // port (and without a port), the bound address, plus `extra` host names
  // ("tailor.example.org", also with that port, or "tailor.example.org:8470",
  // with that port only).
  //
  // A server bound to every interface (0.0.0.0 or ::, as in a container or
  // a Kubernetes pod) also accepts any IP address as Host, with any port:
  // kubelet's probes and Prometheus' scrapes name the pod by its address,
  // which is not known beforehand, and an address cannot be a rebinding
  // attack, which needs a host name the attacker's DNS answers for.
  HostPolicy(std::uint16_t port, const std::string& bound_address, std::vector<std::string> extra);

  // A missing Host is refused (HTTP/1.1 requires it). A request without an
  // Origin is allowed (not from a browser); with one, its host must be an
  // allowed name, or the request's own Host when that is an address (the
  // UI opened by the pod's address): a page served from another address is
  // refused.
  bool allows(const HttpRequest& request, std::string& why) const;

 private:
  bool name_allowed(std::string_view host) const;
  bool address_allowed(std::string_view host) const;
  std::vector<std::string> hosts_;  // lower-case, with and without port
  bool any_address_ = false;        // bound to 0.0.0.0 or ::
};

// True for "10.1.2.3", "10.1.2.3:8470", "[fd00::1]" and "[fd00::1]:8470":
// an IPv4 or bracketed IPv6 address, with an optional decimal port.
bool is_ip_host(std::string_view host);

}  // namespace tailor::daemon
