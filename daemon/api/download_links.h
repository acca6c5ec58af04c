// Download links: a file of a job's folder at a URL that needs no token
// for a while, so that a browser can save it with its own download manager
// (streamed to disk, resumable) while the API token stays out of URLs. A
// link is 32 random bytes, names one job and one path, and expires; it is
// made by a caller holding a token (admin or read-only) and kept in memory
// only, so a restart of tailord ends every link.
#pragma once

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
  double expires_at = 0;  // Unix seconds
};

class DownloadLinks {
 public:
  // At most `capacity` live links; the one expiring first makes room.
  explicit DownloadLinks(std::size_t capacity = 1024) : capacity_(capacity) {}

  // A new link for `path` of `job_id`, valid from `now` for `ttl_seconds`.
  Result<DownloadLink> make(const std::string& job_id, const std::string& path, double now, double ttl_seconds,
                            bool archive = false);

  // The link `id` while it is valid at `now` (usable any number of times
  // until then: a resumed download asks again); nullopt once expired or
  // never made.
  std::optional<DownloadLink> find(const std::string& id, double now) const;

 private:
  void drop_expired(double now);

  mutable std::mutex mu_;
  std::map<std::string, DownloadLink> links_;
  std::size_t capacity_;
};

}  // namespace tailor::daemon
