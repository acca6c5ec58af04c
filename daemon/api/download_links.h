// Download links: a file of a job's folder at a URL that needs no token
// for a while, so that a browser can save it with its own download manager
// (streamed to disk, resumable) while the API token stays out of URLs. A
// link is 32 random bytes, names one job and one path, and expires; it is
// made by a caller holding a token (admin or read-only) and kept in memory
// only, so a restart of tailord ends every link. Times are a monotonic
// clock's seconds (the API passes steady_clock), so that a wall clock
// stepped back does not bring an expired link back.
#pragma once

#include <algorithm>
#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "core/status.h"

namespace tailor::daemon {

struct DownloadLink {
  std::string id;  // 64 hex digits, the URL's last segment
  std::string job_id;
  std::string path;       // inside the job's folder
  bool archive = false;   // the folder at path as one tar archive (job_files.h)
  std::string owner;      // who made it: the token's kind ("admin", "read")
  double expires_at = 0;  // on the clock make() was given
};

class DownloadLinks {
 public:
  // At most `capacity` live links, and `per_owner` of one owner's: an
  // owner at its quota makes room among its own links (the one expiring
  // first), and a full table among the links of the owner holding most, so
  // that one token cannot evict another's links.
  explicit DownloadLinks(std::size_t capacity = 1024, std::size_t per_owner = 256)
      : capacity_(capacity), per_owner_(std::max<std::size_t>(1, std::min(per_owner, capacity))) {}

  // A new link for `path` of `job_id` made by `owner`, valid from `now`
  // for `ttl_seconds`.
  Result<DownloadLink> make(const std::string& job_id, const std::string& path, const std::string& owner, double now,
                            double ttl_seconds, bool archive = false);

  // The link `id` while it is valid at `now` (usable any number of times
  // until then: a resumed download asks again); nullopt once expired or
  // never made.
  std::optional<DownloadLink> find(const std::string& id, double now) const;

 private:
  void drop_expired(double now);
  // Drops the link expiring first among `owner`'s (any owner's when empty).
  void drop_earliest(const std::string& owner);

  mutable std::mutex mu_;
  std::map<std::string, DownloadLink> links_;
  std::size_t capacity_;
  std::size_t per_owner_;
};

}  // namespace tailor::daemon
