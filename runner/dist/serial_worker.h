// Jobs run one at a time, in the order they were submitted, on a thread of
// their own. For collectives issued while the submitting thread computes:
// every rank must issue its collectives in the same order, and one worker
// per communicator keeps them in that order and off the compute thread.
// Torch-free.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "core/status.h"

namespace tailor::runner::dist {

class SerialWorker {
 public:
  using Ticket = std::uint64_t;  // 1, 2, ... in submission order; 0: none

  // `unblock`: called when the worker is stopped with a job running or
  // queued, to make a job blocked on its peers return (Communicator::abort).
  explicit SerialWorker(std::function<void()> unblock = {});
  ~SerialWorker();
  SerialWorker(const SerialWorker&) = delete;
  SerialWorker& operator=(const SerialWorker&) = delete;

  Ticket submit(std::function<Status()> job);
  // The newest ticket submitted (0 before the first).
  Ticket last() const;
  // Waits until job `t` and every job before it have run. Returns the first
  // error of any job so far: after one, the later jobs are skipped.
  Status wait(Ticket t);
  Status drain() { return wait(last()); }

 private:
  void run();

  std::function<void()> unblock_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<Status()>> queue_;
  Ticket submitted_ = 0, done_ = 0;
  bool busy_ = false, stop_ = false;
  Status error_;
  std::thread thread_;
};

}  // namespace tailor::runner::dist
