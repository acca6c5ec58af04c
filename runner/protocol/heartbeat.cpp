#include "runner/protocol/heartbeat.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

namespace tailor::runner {

std::string heartbeat_file_name(std::optional<int> rank) {
  return rank ? "heartbeat.rank-" + std::to_string(*rank) : "heartbeat";
}

bool is_heartbeat_file_name(const std::string& name) {
  return name == "heartbeat" || name.rfind("heartbeat.rank-", 0) == 0;
}

std::optional<std::chrono::milliseconds> heartbeat_interval_from_env() {
  const char* v = std::getenv(kHeartbeatEnv);
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (*end != '\0' || !(s > 0) || s > 3600) return std::nullopt;
  return std::chrono::milliseconds(static_cast<long long>(s * 1000));
}

bool touch_heartbeat(const std::string& path) {
  if (::utimensat(AT_FDCWD, path.c_str(), nullptr, 0) == 0) return true;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

Heartbeat::Heartbeat(std::string path, std::chrono::milliseconds interval)
    : path_(std::move(path)), interval_(interval) {
  touch_heartbeat(path_);
  thread_ = std::thread([this] { run(); });
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Heartbeat::run() {
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, interval_, [this] { return stop_; })) {
    touch_heartbeat(path_);
  }
}

}  // namespace tailor::runner
