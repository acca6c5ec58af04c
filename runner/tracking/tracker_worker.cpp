#include "runner/tracking/tracker_worker.h"

#include <nlohmann/json.hpp>

#include <ctime>
#include <filesystem>
#include <fstream>

#include "platform/files.h"

namespace tailor::runner::tracking {
namespace {

namespace fs = std::filesystem;

std::int64_t file_size(const std::string& path) {
  std::error_code ec;
  const auto n = fs::file_size(path, ec);
  return ec ? 0 : static_cast<std::int64_t>(n);
}

}  // namespace

const char* to_string(RunOutcome o) {
  switch (o) {
    case RunOutcome::kFinished: return "FINISHED";
    case RunOutcome::kFailed: return "FAILED";
    case RunOutcome::kKilled: return "KILLED";
  }
  return "FAILED";
}

TrackerWorker::TrackerWorker(std::unique_ptr<Tracker> tracker, WorkerOptions options, StateSink sink)
    : tracker_(std::move(tracker)), o_(std::move(options)), sink_(std::move(sink)) {
  if (std::ifstream in(o_.cursor_path); in) {
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_object()) {
      offset_ = j.value("offset", std::int64_t{0});
      step_ = j.value("step", std::int64_t{0});
      fresh_ = false;
    }
  }
  // A metrics file shorter than the cursor was started again: all of it is new.
  if (offset_ > file_size(o_.metrics_path)) offset_ = 0;
  thread_ = std::thread([this] { loop(); });
}

TrackerWorker::~TrackerWorker() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void TrackerWorker::notify() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    woken_ = true;
  }
  cv_.notify_all();
}

void TrackerWorker::request_finish(RunOutcome outcome) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    finishing_ = outcome;
    woken_ = true;
  }
  cv_.notify_all();
}

bool TrackerWorker::finish(RunOutcome outcome, std::chrono::milliseconds timeout) {
  request_finish(outcome);
  bool done;
  {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait_for(lk, timeout, [&] { return done_; });
    done = done_;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (!done) {
    report("behind", "not everything was sent within " + std::to_string(timeout.count() / 1000) +
                         " s; the job's next runner sends the rest");
  }
  return done;
}

void TrackerWorker::loop() {
  std::chrono::milliseconds backoff = o_.first_backoff;
  bool failing = false;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      if (failing) {
        // Woken early only to stop or to finish (one prompt try).
        cv_.wait_for(lk, backoff, [&] { return stopping_ || (woken_ && finishing_.has_value()); });
      } else {
        cv_.wait(lk, [&] { return woken_ || stopping_; });
      }
      if (stopping_) return;
      woken_ = false;
    }
    for (;;) {
      const Round r = round();
      if (r == Round::kClosed) {
        {
          std::lock_guard<std::mutex> lk(mu_);
          done_ = true;
        }
        cv_.notify_all();
        return;
      }
      if (r == Round::kIdle || r == Round::kFailed) {
        failing = r == Round::kFailed;
        backoff = failing ? std::min(o_.max_backoff, backoff * 2) : o_.first_backoff;
        break;
      }
      std::lock_guard<std::mutex> lk(mu_);
      if (stopping_) return;
    }
  }
}

TrackerWorker::Round TrackerWorker::round() {
  if (!opened_) {
    const Status s = tracker_->open(OpenContext{fresh_, step_});
    if (!s.is_ok()) {
      report("down", s.message());
      return Round::kFailed;
    }
    opened_ = true;
    report("up", "");
  }
  if (fresh_ && o_.preamble) {
    const Status s = tracker_->write({*o_.preamble});
    if (!s.is_ok() && s.code() != StatusCode::kInvalidArgument) {
      report("down", s.message());
      return Round::kFailed;
    }
    fresh_ = false;
    save_cursor();
  }
  // The complete lines after the cursor, up to a write's worth of scalars.
  std::vector<MetricRecord> records;
  std::int64_t consumed = 0;
  {
    // Line by line from the cursor, so a long backlog is read a write's
    // worth at a time, and a line of any length is taken whole.
    std::ifstream in(o_.metrics_path, std::ios::binary);
    if (in && in.seekg(offset_)) {
      std::size_t scalars = 0;
      const double now = static_cast<double>(std::time(nullptr));
      for (std::string line; std::getline(in, line);) {
        if (in.eof()) break;  // no newline yet: the runner is still writing it
        auto r = parse_metrics_line(line, now);
        if (r) {
          if (!records.empty() && scalars + r->scalars.size() > tracker_->max_scalars_per_write()) break;
          scalars += r->scalars.size();
          records.push_back(std::move(*r));
        }
        consumed += static_cast<std::int64_t>(line.size()) + 1;
      }
    }
  }
  bool finishing;
  RunOutcome outcome = RunOutcome::kFailed;
  {
    std::lock_guard<std::mutex> lk(mu_);
    finishing = finishing_.has_value();
    if (finishing) outcome = *finishing_;
  }
  if (consumed == 0) {
    if (!finishing) return Round::kIdle;
    const Status s = tracker_->close(outcome);
    if (!s.is_ok()) {
      report("down", s.message());
      return Round::kFailed;
    }
    report("closed", "");
    return Round::kClosed;
  }
  const Status s = records.empty() ? Status::ok() : tracker_->write(records);
  if (!s.is_ok() && s.code() != StatusCode::kInvalidArgument) {
    report("down", s.message());
    return Round::kFailed;
  }
  offset_ += consumed;
  if (!records.empty()) step_ = records.back().step;
  save_cursor();
  report(s.is_ok() ? "up" : "rejected", s.message());
  return Round::kSent;
}

void TrackerWorker::report(const std::string& state, const std::string& error) {
  // Steady states once per change; the others (rejected, closed, behind) every time.
  if ((state == "up" || state == "down") && state == last_state_) return;
  last_state_ = state;
  if (sink_) sink_(TrackerState{tracker_->name(), state, error, pending_bytes(), step_});
}

void TrackerWorker::save_cursor() {
  nlohmann::json j{{"offset", offset_}, {"step", step_}};
  // Losing the newest cursor to a power cut only sends some lines twice.
  (void)platform::write_file_atomic(o_.cursor_path, j.dump() + "\n", platform::Durability::kProcess);
}

std::int64_t TrackerWorker::pending_bytes() const {
  return std::max<std::int64_t>(0, file_size(o_.metrics_path) - offset_);
}

}  // namespace tailor::runner::tracking
