#include "daemon/api/download_links.h"

#include <algorithm>

#include "daemon/http/auth.h"

namespace tailor::daemon {

Result<DownloadLink> DownloadLinks::make(const std::string& job_id, const std::string& path, double now,
                                         double ttl_seconds, bool archive) {
  TAILOR_ASSIGN_OR_RETURN(std::string id, random_hex(32));
  DownloadLink link{id, job_id, path, archive, now + ttl_seconds};
  std::lock_guard<std::mutex> lock(mu_);
  drop_expired(now);
  while (links_.size() >= capacity_) {
    const auto first = std::min_element(links_.begin(), links_.end(), [](const auto& a, const auto& b) {
      return a.second.expires_at < b.second.expires_at;
    });
    links_.erase(first);
  }
  links_[id] = link;
  return link;
}

std::optional<DownloadLink> DownloadLinks::find(const std::string& id, double now) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = links_.find(id);
  if (it == links_.end() || now >= it->second.expires_at) return std::nullopt;
  return it->second;
}

void DownloadLinks::drop_expired(double now) {
  for (auto it = links_.begin(); it != links_.end();) {
    it = now >= it->second.expires_at ? links_.erase(it) : std::next(it);
  }
}

}  // namespace tailor::daemon
