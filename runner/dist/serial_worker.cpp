#include "runner/dist/serial_worker.h"

#include <exception>

namespace tailor::runner::dist {

SerialWorker::SerialWorker(std::function<void()> unblock) : unblock_(std::move(unblock)) {
  thread_ = std::thread([this] { run(); });
}

SerialWorker::~SerialWorker() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    if ((busy_ || !queue_.empty()) && unblock_) unblock_();
  }
  cv_.notify_all();
  thread_.join();
}

SerialWorker::Ticket SerialWorker::submit(std::function<Status()> job) {
  Ticket t = 0;
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(job));
    t = ++submitted_;
  }
  cv_.notify_all();
  return t;
}

SerialWorker::Ticket SerialWorker::last() const {
  std::lock_guard lock(mu_);
  return submitted_;
}

Status SerialWorker::wait(Ticket t) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return done_ >= t; });
  return error_;
}

void SerialWorker::run() {
  for (;;) {
    std::function<Status()> job;
    bool skip = false;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      // After an error (or once stopping) the rest are skipped, but still
      // counted done, so that no waiter hangs.
      skip = !error_.is_ok() || stop_;
    }
    Status s;
    if (!skip) {
      try {
        s = job();
      } catch (const std::exception& e) {
        s = Status::internal(std::string("a queued job threw: ") + e.what());
      }
    }
    job = nullptr;  // what it holds is freed before anyone learns it is done
    {
      std::lock_guard lock(mu_);
      if (!s.is_ok() && error_.is_ok()) error_ = s;
      ++done_;
      busy_ = false;
    }
    cv_.notify_all();
  }
}

}  // namespace tailor::runner::dist
