// Feeds one tracker from the run's metrics.jsonl on a thread of its own.
// The file is the queue: the worker reads the lines after its cursor (a
// byte offset kept in TRACKING_DIR/<tracker>.cursor), sends them, and only
// then moves the cursor. So a tracker that is slow or down costs the
// training loop nothing (notify() only wakes the thread), nothing is held
// in memory beyond one write, and what was not sent (an outage, a crash, a
// runner killed) is sent by the next runner of the job (retries and
// re-plans resume in the same folder).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "runner/tracking/tracker.h"

namespace tailor::runner::tracking {

// A tracker's state as reported to the job (the runner's `tracker` event).
struct TrackerState {
  std::string tracker;
  std::string state;             // up, down, rejected (records skipped), closed, behind (left unsent)
  std::string error;             // why, for down, rejected and behind
  std::int64_t pending_bytes = 0;  // of metrics.jsonl not yet sent
  std::int64_t step = 0;           // the last step sent
};
using StateSink = std::function<void(const TrackerState&)>;

struct WorkerOptions {
  std::string metrics_path;   // the run's metrics.jsonl
  std::string cursor_path;    // where the worker keeps its offset
  std::chrono::milliseconds first_backoff{500};
  std::chrono::milliseconds max_backoff{10000};
  // Before the first record of a fresh run (e.g. the plan's estimates).
  std::optional<MetricRecord> preamble;
};

class TrackerWorker {
 public:
  TrackerWorker(std::unique_ptr<Tracker> tracker, WorkerOptions options, StateSink sink);
  ~TrackerWorker();  // stops without waiting for the tracker (finish() waits)
  TrackerWorker(const TrackerWorker&) = delete;
  TrackerWorker& operator=(const TrackerWorker&) = delete;

  void notify();  // metrics.jsonl grew; cheap, never blocks on the tracker
  // Asks the worker to send what is left and close with `outcome`, without
  // waiting (finish() waits): several trackers then drain at once.
  void request_finish(RunOutcome outcome);
  // Sends what is left, then closes the tracker's run with `outcome`,
  // waiting at most `timeout`. False (and a `behind` state) when the
  // tracker could not take everything in time: the rest stays for the
  // job's next runner.
  bool finish(RunOutcome outcome, std::chrono::milliseconds timeout);

 private:
  enum class Round { kSent, kIdle, kFailed, kClosed };
  void loop();
  // One step of the work: open, send one write's worth, or close.
  Round round();
  void report(const std::string& state, const std::string& error);
  void save_cursor();
  std::int64_t pending_bytes() const;

  std::unique_ptr<Tracker> tracker_;
  WorkerOptions o_;
  StateSink sink_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool woken_ = false;
  bool stopping_ = false;
  std::optional<RunOutcome> finishing_;
  bool done_ = false;

  // The thread's own (no lock).
  bool opened_ = false;
  bool fresh_ = true;
  std::int64_t offset_ = 0;
  std::int64_t step_ = 0;
  std::string last_state_;
  std::thread thread_;
};

}  // namespace tailor::runner::tracking
