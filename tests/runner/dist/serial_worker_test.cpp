// The ordered job queue that keeps a rank's collectives in issue order off
// the compute thread.
#include "runner/dist/serial_worker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <vector>

namespace tailor::runner::dist {
namespace {

TEST(SerialWorkerTest, JobsRunInSubmissionOrderOnAThreadOfTheirOwn) {
  std::vector<int> ran;
  std::vector<std::thread::id> threads;
  SerialWorker w;
  EXPECT_EQ(w.last(), 0u);
  SerialWorker::Ticket third = 0;
  for (int i = 0; i < 5; ++i) {
    const auto t = w.submit([&, i] {
      ran.push_back(i);
      threads.push_back(std::this_thread::get_id());
      return Status::ok();
    });
    if (i == 2) third = t;
  }
  EXPECT_EQ(third, 3u);
  EXPECT_EQ(w.last(), 5u);
  ASSERT_TRUE(w.wait(third).is_ok());
  EXPECT_GE(ran.size(), 3u);  // the third and every one before it
  ASSERT_TRUE(w.drain().is_ok());
  EXPECT_EQ(ran, (std::vector<int>{0, 1, 2, 3, 4}));
  for (const auto& id : threads) EXPECT_NE(id, std::this_thread::get_id());
}

TEST(SerialWorkerTest, AFailedJobIsReportedByEveryLaterWaitAndTheRestAreSkipped) {
  std::atomic<int> ran{0};
  SerialWorker w;
  w.submit([&] {
    ++ran;
    return Status::ok();
  });
  const auto bad = w.submit([] { return Status::unavailable("rank 1 stopped"); });
  w.submit([&] {
    ++ran;
    return Status::ok();
  });
  const auto thrown = w.submit([]() -> Status { throw std::runtime_error("never runs"); });
  EXPECT_EQ(w.wait(bad).message(), "rank 1 stopped");
  EXPECT_EQ(w.wait(thrown).message(), "rank 1 stopped");
  EXPECT_EQ(ran.load(), 1);
}

TEST(SerialWorkerTest, AJobThatThrowsIsAnError) {
  SerialWorker w;
  const auto t = w.submit([]() -> Status { throw std::runtime_error("bad tensor"); });
  const Status s = w.wait(t);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("bad tensor"), std::string::npos) << s.message();
}

// A job blocked on peers that will never come is released by `unblock`
// when the worker is destroyed (as Communicator::abort fails the transfer).
TEST(SerialWorkerTest, StoppingWithABlockedJobUnblocksIt) {
  std::promise<void> started;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> unblocked{false};
  {
    SerialWorker w([&] {
      unblocked = true;
      release.set_value();
    });
    w.submit([&] {
      started.set_value();
      released.wait();
      return Status::unavailable("aborted");
    });
    started.get_future().wait();
  }
  EXPECT_TRUE(unblocked.load());
}

}  // namespace
}  // namespace tailor::runner::dist
