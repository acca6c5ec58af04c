#include "cli/rest_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/text.h"

namespace tailor::cli {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

Result<std::string> read_small_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return Status::not_found("cannot read " + p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return std::string(trim(ss.str()));
}

Status split_address(const std::string& text, const std::string& source, Endpoint& e) {
  std::string a = text;
  if (a.rfind("http://", 0) == 0) a = a.substr(7);
  while (!a.empty() && a.back() == '/') a.pop_back();
  const auto colon = a.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == a.size()) {
    return Status::invalid_argument(source + ": expected HOST:PORT, got " + quote(text));
  }
  std::string host = a.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port = a.substr(colon + 1);
  if (port.find_first_not_of("0123456789") != std::string::npos) {
    return Status::invalid_argument(source + ": the port of " + quote(text) + " is not a number");
  }
  e.host = host;
  e.port = port;
  e.source = source;
  return Status::ok();
}

std::string host_header(const Endpoint& e) {
  return (e.host.find(':') != std::string::npos ? "[" + e.host + "]" : e.host) + ":" + e.port;
}

Status unreachable(const Endpoint& e, const beast::error_code& ec) {
  return Status::unavailable("cannot reach tailord at " + e.address() + " (" + e.source + "): " + ec.message() +
                             "; is it running? (address from --addr, TAILOR_ADDR or DATA_DIR/address)");
}

Status connect(beast::tcp_stream& stream, const Endpoint& e, std::chrono::milliseconds timeout) {
  beast::error_code ec;
  tcp::resolver resolver(stream.get_executor());
  const auto hosts = resolver.resolve(e.host, e.port, ec);
  if (ec) return unreachable(e, ec);
  stream.expires_after(timeout);
  stream.connect(hosts, ec);
  if (ec) return unreachable(e, ec);
  return Status::ok();
}

template <class Body>
http::request<Body> make_request(const Endpoint& e, http::verb verb, const std::string& target) {
  http::request<Body> req{verb, target, 11};
  req.set(http::field::host, host_header(e));
  req.set(http::field::user_agent, "tailor/0.1.0");
  req.set(http::field::accept, "application/json");
  if (!e.token.empty()) req.set(http::field::authorization, "Bearer " + e.token);
  return req;
}

}  // namespace

const char* const kRemoteFlagsHelp =
    R"(  --addr HOST:PORT    tailord's address (default: $TAILOR_ADDR, DATA_DIR/address,
                      127.0.0.1:8470)
  --token TOKEN       API token (default: $TAILOR_TOKEN, DATA_DIR/token)
  --data-dir DIR      tailord's data folder, to read its address and token
                      (default: $TAILOR_DATA_DIR)
)";

std::vector<FlagSpec> with_remote_flags(std::vector<FlagSpec> flags) {
  flags.push_back({"addr", true});
  flags.push_back({"token", true});
  flags.push_back({"data-dir", true});
  return flags;
}

Result<Endpoint> resolve_endpoint(const Args& args) {
  Endpoint e;
  e.source = "default";
  const std::string dir = args.has("data-dir") ? args.get("data-dir") : env("TAILOR_DATA_DIR");
  const std::string dir_source = args.has("data-dir") ? "--data-dir" : "TAILOR_DATA_DIR";
  if (args.has("addr")) {
    TAILOR_RETURN_IF_ERROR(split_address(args.get("addr"), "--addr", e));
  } else if (!env("TAILOR_ADDR").empty()) {
    TAILOR_RETURN_IF_ERROR(split_address(env("TAILOR_ADDR"), "TAILOR_ADDR", e));
  } else if (!dir.empty()) {
    const auto file = std::filesystem::path(dir) / "address";
    auto text = read_small_file(file);
    if (!text.is_ok()) {
      return Status::not_found(dir_source + ": no " + file.string() + " (is tailord running with --data-dir " + dir +
                               "?)");
    }
    TAILOR_RETURN_IF_ERROR(split_address(*text, file.string(), e));
  }
  if (args.has("token")) {
    e.token = args.get("token");
  } else if (!env("TAILOR_TOKEN").empty()) {
    e.token = env("TAILOR_TOKEN");
  } else if (!dir.empty()) {
    auto text = read_small_file(std::filesystem::path(dir) / "token");
    if (text.is_ok()) e.token = *text;
  }
  return e;
}

RestClient::RestClient(Endpoint endpoint, std::chrono::milliseconds timeout)
    : endpoint_(std::move(endpoint)), timeout_(timeout) {}

Result<HttpResponse> RestClient::request(const std::string& method, const std::string& target, const std::string& body,
                                         const std::string& content_type,
                                         const std::map<std::string, std::string>& headers) const {
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  beast::error_code ec;
  TAILOR_RETURN_IF_ERROR(connect(stream, endpoint_, timeout_));

  auto req = make_request<http::string_body>(endpoint_, http::string_to_verb(method), target);
  for (const auto& [k, v] : headers) req.set(k, v);
  if (!content_type.empty()) req.set(http::field::content_type, content_type);
  req.body() = body;
  req.prepare_payload();
  http::write(stream, req, ec);
  if (ec) return unreachable(endpoint_, ec);

  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(256ull << 20);
  http::read(stream, buffer, parser, ec);
  if (ec) return unreachable(endpoint_, ec);
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);

  HttpResponse out;
  const auto& res = parser.get();
  out.status = static_cast<int>(res.result_int());
  out.body = res.body();
  for (const auto& field : res) {
    std::string name(field.name_string());
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out.headers[name] = std::string(field.value());
  }
  return out;
}

Result<int> RestClient::stream(const std::string& target, const std::function<bool(const std::string&)>& on_data,
                               std::chrono::milliseconds idle, const std::map<std::string, std::string>& headers,
                               const std::function<void(int, const std::map<std::string, std::string>&)>& on_status)
    const {
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  beast::error_code ec;
  TAILOR_RETURN_IF_ERROR(connect(stream, endpoint_, timeout_));
  auto req = make_request<http::empty_body>(endpoint_, http::verb::get, target);
  for (const auto& [k, v] : headers) req.set(k, v);
  http::write(stream, req, ec);
  if (ec) return unreachable(endpoint_, ec);

  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);
  stream.expires_after(timeout_);
  http::read_header(stream, buffer, parser, ec);
  if (ec) return unreachable(endpoint_, ec);
  const int status = static_cast<int>(parser.get().result_int());
  if (on_status) {
    std::map<std::string, std::string> got;
    for (const auto& field : parser.get()) {
      std::string name(field.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      got[name] = std::string(field.value());
    }
    on_status(status, got);
  }
  char chunk[16384];
  std::string error_body;
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof chunk;
    stream.expires_after(idle);
    http::read(stream, buffer, parser, ec);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) return unreachable(endpoint_, ec);
    const std::string piece(chunk, sizeof chunk - parser.get().body().size);
    if (piece.empty()) continue;
    if (status >= 300) {
      error_body += piece;
    } else if (!on_data(piece)) {
      break;
    }
  }
  if (status >= 300) on_data(error_body);
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  return status;
}

std::string error_message(const HttpResponse& r) {
  const auto j = nlohmann::json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("message") || !j["message"].is_string()) {
    std::string body(trim(r.body));
    return "HTTP " + std::to_string(r.status) + (body.empty() ? "" : ": " + body);
  }
  std::string msg = j["message"].get<std::string>();
  if (j.contains("details") && j["details"].is_object() && j["details"].contains("diagnostics") &&
      j["details"]["diagnostics"].is_array() && j["details"]["diagnostics"].size() > 1) {
    for (const auto& d : j["details"]["diagnostics"]) {
      if (d.contains("text") && d["text"].is_string()) msg += "\n" + d["text"].get<std::string>();
    }
  }
  return msg;
}

std::string url_encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

}  // namespace tailor::cli
