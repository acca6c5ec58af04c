// Waiting in a test for a condition another thread or process makes true,
// polled, with a bound: never a fixed sleep standing in for the event.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace tailor::testing {

// Whether `cond` became true within `limit` (polled every 5 ms).
inline bool eventually(const std::function<bool()>& cond, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

}  // namespace tailor::testing
