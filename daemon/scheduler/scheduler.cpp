#include "daemon/scheduler/scheduler.h"

#include "core/units.h"

namespace tailor::daemon {

std::vector<Placement> schedule(const std::vector<QueuedJob>& ordered, Capacity cap, double now) {
  std::vector<Placement> out;
  for (const QueuedJob& j : ordered) {
    if (j.not_before && *j.not_before > now) continue;
    if (j.gpus_needed > 0) {
      if (j.gpus_needed > cap.gpu_total) {
        out.push_back({j.id, Placement::Action::kNeverFits, {}, 0,
                       "needs " + std::to_string(j.gpus_needed) + " GPUs; this machine has " +
                           std::to_string(cap.gpu_total)});
        continue;
      }
      if (static_cast<std::int64_t>(cap.free_gpus.size()) < j.gpus_needed) break;
      Placement p{j.id, Placement::Action::kStart, {}, 0, {}};
      p.gpus.assign(cap.free_gpus.begin(), cap.free_gpus.begin() + j.gpus_needed);
      cap.free_gpus.erase(cap.free_gpus.begin(), cap.free_gpus.begin() + j.gpus_needed);
      out.push_back(std::move(p));
      continue;
    }
    if (j.bytes_needed > cap.host_total_bytes) {
      out.push_back({j.id, Placement::Action::kNeverFits, {}, 0,
                     "needs " + Bytes(j.bytes_needed).to_string() + " of host memory; the daemon's budget is " +
                         Bytes(cap.host_total_bytes).to_string()});
      continue;
    }
    if (j.bytes_needed > cap.host_free_bytes) break;
    cap.host_free_bytes -= j.bytes_needed;
    out.push_back({j.id, Placement::Action::kStart, {}, j.bytes_needed, {}});
  }
  return out;
}

}  // namespace tailor::daemon
