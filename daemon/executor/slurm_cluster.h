// tailord's view of a Slurm cluster: the client (slurm_client.h), the
// partitions it plans for (an answer is kept a few seconds, so that a burst
// of submissions does not become a burst of scontrol calls; a failure is
// not kept), and
// whether Slurm can be reached at all, with the reason when it cannot.
// Thread-safe.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include "core/status.h"
#include "daemon/executor/slurm_client.h"

namespace tailor::daemon::slurm {

class Cluster {
 public:
  Cluster(ClientOptions options, std::string default_partition, double cache_seconds = 5);

  const Client& client() const { return client_; }
  const std::string& default_partition() const { return default_partition_; }

  // The partition `name` (empty: tailord's default, else Slurm's).
  Result<Partition> partition(const std::string& name);
  // Reads the default partition now: ok, or why Slurm cannot be used.
  Status probe();
  // The last probe's or read's verdict, for GET /v1/hardware and the log:
  // "partition debug: 2 usable node(s) ..." or the reason it is unavailable.
  bool available() const;
  std::string describe() const;

 private:
  Client client_;
  std::string default_partition_;
  double cache_seconds_;
  mutable std::mutex mu_;
  struct Cached {
    double at = 0;
    Result<Partition> value = Status::unavailable("not read yet");
  };
  std::map<std::string, Cached> cache_;
  bool available_ = false;
  std::string describe_ = "not probed yet";
};

}  // namespace tailor::daemon::slurm
