#include "tests/daemon/daemon_harness.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace tailor::daemon::testing {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
namespace fs = std::filesystem;

void UnexpectedReplies::add(const std::string& request, const HttpResult& reply) {
  std::string line = request + " -> " + (reply.status ? std::to_string(reply.status) : "no reply (" + reply.error + ")");
  if (!reply.body.empty()) line += " " + reply.body.substr(0, 300);
  std::lock_guard lock(mu_);
  seen_.push_back(std::move(line));
}

bool UnexpectedReplies::none() const {
  std::lock_guard lock(mu_);
  return seen_.empty();
}

std::string UnexpectedReplies::text() const {
  std::lock_guard lock(mu_);
  std::string out = std::to_string(seen_.size()) + " unexpected repl" + (seen_.size() == 1 ? "y" : "ies") + ":";
  for (std::size_t i = 0; i < seen_.size() && i < 5; ++i) out += "\n  " + seen_[i];
  return out;
}

HttpResult http_request(const std::string& address, const std::string& method, const std::string& target,
                        const std::string& body, const std::map<std::string, std::string>& headers) {
  HttpResult out;
  try {
    const auto colon = address.rfind(':');
    net::io_context ioc;
    tcp::socket socket(ioc);
    socket.connect(tcp::endpoint(net::ip::make_address(address.substr(0, colon)),
                                 static_cast<unsigned short>(std::stoi(address.substr(colon + 1)))));
    http::request<http::string_body> req(http::string_to_verb(method), target, 11);
    req.set(http::field::host, address);
    for (const auto& [k, v] : headers) req.set(k, v);
    req.body() = body;
    req.prepare_payload();
    req.keep_alive(false);
    beast::error_code wec;
    http::write(socket, req, wec);  // a refused body may reset the write; the response still comes
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(boost::none);
    beast::error_code ec;
    http::read(socket, buffer, parser, ec);
    if (ec && !parser.is_header_done()) {
      out.error = ec.message() + (wec ? " (write: " + wec.message() + ")" : "");
      return out;
    }
    auto& res = parser.get();
    out.status = static_cast<int>(res.result_int());
    out.body = res.body();
    for (const auto& f : res) {
      std::string name(f.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      out.headers[name] = std::string(f.value());
    }
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

std::string runner_path() {
#ifdef TAILOR_RUNNER_PATH
  if (fs::exists(TAILOR_RUNNER_PATH)) return TAILOR_RUNNER_PATH;
#endif
  if (const char* env = std::getenv("TAILOR_RUNNER"); env && *env && fs::exists(env)) return env;
  return {};
}

bool wait_for(const std::function<bool()>& cond, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // poll interval, not synchronisation
  }
  return cond();
}

std::string tiny_spec(const std::string& name, int steps, int checkpoint_every, int priority, bool small) {
  std::ifstream f(std::string(TAILOR_SOURCE_DIR) + "/configs/examples/tiny-cpu.yaml");
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  auto replace = [&](const std::string& from, const std::string& to) {
    const auto p = text.find(from);
    if (p != std::string::npos) text.replace(p, from.size(), to);
  };
  replace("name: tiny-cpu", "name: " + name);
  replace("../data/tiny-corpus.txt", "data/tiny-corpus.txt");
  replace("max_steps: 200", "max_steps: " + std::to_string(steps));
  replace("every_steps: 100", "every_steps: " + std::to_string(checkpoint_every));
  if (small) {
    replace("seq_len: 128", "seq_len: 64");
    replace("global_batch_size: 16", "global_batch_size: 8");
  }
  text += "priority: " + std::to_string(priority) + "\n";
  return text;
}

DaemonProcess::DaemonProcess(const std::string& data_dir, std::vector<std::string> args, const std::string& runner)
    : data_dir_(data_dir), log_path_(data_dir + ".tailord.log") {
  fs::create_directories(data_dir);
  fs::remove(fs::path(data_dir) / "address");
  std::vector<std::string> argv = {TAILORD_BINARY, "--data-dir", data_dir, "--listen", "127.0.0.1:0",
                                   "--poll-interval", "0.05", "--runner", runner.empty() ? "/bin/false" : runner};
  // The source tree's configs/ unless the test names its own root.
  if (std::find(args.begin(), args.end(), "--spec-root") == args.end()) {
    argv.insert(argv.end(), {"--spec-root", std::string(TAILOR_SOURCE_DIR) + "/configs"});
  }
  argv.insert(argv.end(), args.begin(), args.end());
  pid_ = fork();
  if (pid_ == 0) {
    const int fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> c;
    for (auto& a : argv) c.push_back(a.data());
    c.push_back(nullptr);
    execv(c[0], c.data());
    _exit(127);
  }
  const std::string address_file = (fs::path(data_dir) / "address").string();
  const bool up = wait_for(
      [&] {
        int status = 0;
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
          pid_ = -1;
          return true;  // exited: give up
        }
        std::ifstream a(address_file);
        std::string line;
        return static_cast<bool>(std::getline(a, line)) && !line.empty();
      },
      std::chrono::seconds(20));
  if (!up || pid_ < 0) return;
  std::ifstream a(address_file);
  std::getline(a, address_);
}

std::string DaemonProcess::log_tail(std::size_t bytes) const {
  std::ifstream f(log_path_, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  return text.size() > bytes ? text.substr(text.size() - bytes) : text;
}

std::string DaemonProcess::token() const {
  // Read at each use: a test may rotate it.
  std::ifstream t((fs::path(data_dir_) / "token").string());
  std::string token;
  std::getline(t, token);
  return token;
}

DaemonProcess::~DaemonProcess() {
  kill_runners();
  if (pid_ > 0) kill_daemon(SIGTERM);
}

void DaemonProcess::kill_daemon(int sig) {
  if (pid_ <= 0) return;
  ::kill(pid_, sig);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

bool DaemonProcess::exited_within(std::chrono::milliseconds timeout) {
  return wait_for(
      [&] {
        int status = 0;
        if (pid_ <= 0 || waitpid(pid_, &status, WNOHANG) == pid_) pid_ = -1;
        return pid_ < 0;
      },
      timeout);
}

void DaemonProcess::kill_runners() {
  if (pid_ > 0 && ok()) {
    const auto list = get("/v1/jobs?limit=500").json();
    if (list.is_object() && list.contains("jobs")) {
      for (const auto& j : list.at("jobs")) {
        if (j["pid"].is_number_integer()) runner_pids_.push_back(j["pid"].get<pid_t>());
      }
    }
  }
  for (pid_t p : runner_pids_) {
    if (p > 1) ::kill(-p, SIGKILL);
  }
  runner_pids_.clear();
}

HttpResult DaemonProcess::get(const std::string& target) const {
  return http_request(address_, "GET", target, {}, {{"Authorization", "Bearer " + token()}});
}

HttpResult DaemonProcess::post(const std::string& target, const std::string& body, const std::string& content_type,
                               std::map<std::string, std::string> headers) const {
  headers["Authorization"] = "Bearer " + token();
  headers["Content-Type"] = content_type;
  return http_request(address_, "POST", target, body, headers);
}

nlohmann::json DaemonProcess::job(const std::string& id) const { return get("/v1/jobs/" + id).json(); }

bool DaemonProcess::wait_state(const std::string& id, const std::string& state, std::chrono::milliseconds timeout) const {
  return wait_for(
      [&] {
        const auto j = job(id);
        if (!j.is_object() || !j.contains("state")) return false;
        const std::string s = j["state"].get<std::string>();
        if (state.empty()) return s == "succeeded" || s == "failed" || s == "cancelled";
        return s == state;
      },
      timeout);
}

bool DaemonProcess::wait_ended_while_moving(const std::string& id, std::chrono::milliseconds stall) const {
  std::string seen;
  for (;;) {
    bool ended = false;
    const bool moved = wait_for(
        [&] {
          const auto j = job(id);
          if (!j.is_object() || !j.contains("state")) return false;
          const std::string s = j["state"].get<std::string>();
          ended = s == "succeeded" || s == "failed" || s == "cancelled";
          const std::string now = s + " " + j["last_step"].dump();
          if (now == seen && !ended) return false;
          seen = now;
          return true;
        },
        stall);
    if (!moved) return false;
    if (ended) return true;
  }
}

}  // namespace tailor::daemon::testing
