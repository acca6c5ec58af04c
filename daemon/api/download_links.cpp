#include "daemon/api/download_links.h"

#include <algorithm>

#include "daemon/http/auth.h"

namespace tailor::daemon {

Result<DownloadLink> DownloadLinks::make(const std::string& job_id, const std::string& path, const std::string& owner,
                                         double now, double ttl_seconds, bool archive) {
  TAILOR_ASSIGN_OR_RETURN(std::string id, random_hex(32));
  DownloadLink link{id, job_id, path, archive, owner, now + ttl_seconds};
  std::lock_guard<std::mutex> lock(mu_);
  drop_expired(now);
  std::map<std::string, std::size_t> held;
  for (const auto& [key, l] : links_) ++held[l.owner];
  if (held[owner] >= per_owner_) {
    drop_earliest(owner);
  } else if (links_.size() >= capacity_) {
    const auto most = std::max_element(held.begin(), held.end(),
                                       [](const auto& a, const auto& b) { return a.second < b.second; });
    drop_earliest(most->first);
  }
  links_[id] = link;
  return link;
}

void DownloadLinks::drop_earliest(const std::string& owner) {
  auto first = links_.end();
  for (auto it = links_.begin(); it != links_.end(); ++it) {
    if (it->second.owner != owner) continue;
    if (first == links_.end() || it->second.expires_at < first->second.expires_at) first = it;
  }
  if (first != links_.end()) links_.erase(first);
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
