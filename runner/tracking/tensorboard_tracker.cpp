#include "runner/tracking/tensorboard_tracker.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "runner/tracking/tensorboard_format.h"

namespace tailor::runner::tracking {
namespace {

namespace fs = std::filesystem;

double wall_now() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

TensorboardTracker::~TensorboardTracker() {
  if (file_ != nullptr) std::fclose(file_);
}

Status TensorboardTracker::open(const OpenContext& context) {
  std::error_code ec;
  fs::create_directories(run_.dir, ec);
  if (ec) return Status::unavailable("tensorboard: cannot create " + run_.dir + ": " + ec.message());
  // events.out.tfevents.<seconds>.<host>.<pid>.<n>, as TensorBoard's own
  // writers name them: readers take every file with "tfevents" in its name.
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  const double now = wall_now();
  for (int n = 0; file_ == nullptr; ++n) {
    const std::string name = "events.out.tfevents." + std::to_string(static_cast<std::int64_t>(now)) + "." + host +
                              "." + std::to_string(getpid()) + "." + std::to_string(n);
    path_ = (fs::path(run_.dir) / name).string();
    if (fs::exists(path_)) continue;
    file_ = std::fopen(path_.c_str(), "wb");
    if (file_ == nullptr) return Status::unavailable("tensorboard: cannot write " + path_ + ": " + std::strerror(errno));
  }
  std::string head = tf_record(file_version_event(now));
  // The spec once per job; the plan at each runner's first step (a
  // re-plan's new strategy shows beside the old one).
  if (context.fresh) head += tf_record(text_event(now, 0, "spec", run_.spec_yaml));
  head += tf_record(text_event(now, context.step, "plan", run_.plan_markdown));
  return append(head);
}

Status TensorboardTracker::write(const std::vector<MetricRecord>& records) {
  std::string out;
  for (const MetricRecord& r : records) {
    for (const Scalar& s : r.scalars) out += tf_record(scalar_event(r.time, r.step, s.tag, static_cast<float>(s.value)));
  }
  return append(out);
}

Status TensorboardTracker::close(RunOutcome) {
  if (file_ == nullptr) return Status::ok();
  const bool ok = std::fclose(file_) == 0;
  file_ = nullptr;
  return ok ? Status::ok() : Status::unavailable("tensorboard: closing " + path_ + " failed");
}

Status TensorboardTracker::append(const std::string& records) {
  if (file_ == nullptr) return Status::unavailable("tensorboard: no event file open");
  // Whole records only: a failed write (a full disk) is cut back, so the
  // retry does not follow half a record.
  const long at = std::ftell(file_);
  if (std::fwrite(records.data(), 1, records.size(), file_) != records.size() || std::fflush(file_) != 0) {
    const std::string why = std::strerror(errno);
    std::clearerr(file_);
    if (at >= 0 && ftruncate(fileno(file_), at) == 0) std::fseek(file_, at, SEEK_SET);
    return Status::unavailable("tensorboard: writing " + path_ + ": " + why);
  }
  return Status::ok();
}

}  // namespace tailor::runner::tracking
