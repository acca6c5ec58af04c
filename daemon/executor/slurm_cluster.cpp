#include "daemon/executor/slurm_cluster.h"

#include <chrono>

namespace tailor::daemon::slurm {
namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Cluster::Cluster(ClientOptions options, std::string default_partition, double cache_seconds)
    : client_(std::move(options)), default_partition_(std::move(default_partition)), cache_seconds_(cache_seconds) {}

Result<Partition> Cluster::partition(const std::string& name) {
  const std::string want = name.empty() ? default_partition_ : name;
  {
    std::lock_guard lock(mu_);
    auto it = cache_.find(want);
    if (it != cache_.end() && steady_seconds() - it->second.at < cache_seconds_) return it->second.value;
  }
  // Outside the lock: scontrol may take a while when the controller is slow.
  Result<Partition> read = client_.partition(want);
  std::lock_guard lock(mu_);
  // Only an answer is kept: once Slurm is back, the next call sees it.
  if (read.is_ok()) {
    cache_[want] = {steady_seconds(), read};
  } else {
    cache_.erase(want);
  }
  if (read.is_ok()) {
    available_ = true;
    if (want == default_partition_) describe_ = read->describe();
  } else if (read.status().code() == StatusCode::kUnavailable) {
    available_ = false;
    describe_ = read.status().message();
  }
  return read;
}

Status Cluster::probe() {
  {
    std::lock_guard lock(mu_);
    cache_.erase(default_partition_);
  }
  auto p = partition(default_partition_);
  if (!p.is_ok()) {
    std::lock_guard lock(mu_);
    available_ = false;
    describe_ = p.status().message();
  }
  return p.status();
}

bool Cluster::available() const {
  std::lock_guard lock(mu_);
  return available_;
}

std::string Cluster::describe() const {
  std::lock_guard lock(mu_);
  return describe_;
}

}  // namespace tailor::daemon::slurm
