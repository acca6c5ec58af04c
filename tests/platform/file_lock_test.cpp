// FileLock: one holder at a time, and a lock handed to a launched child
// outlives the parent's descriptor, stays visible to a probe, and names its
// holder, until the child ends.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>

#include "platform/file_lock.h"
#include "platform/process.h"
#include "tests/testing/temp_dir.h"

namespace tailor::platform {
namespace {

using tailor::testing::TempDir;

TEST(FileLockTest, ASecondAcquireFailsUntilTheFirstIsReleased) {
  TempDir dir;
  const std::string path = dir.file("runner.lock");
  EXPECT_FALSE(*file_lock_held(path));  // no file yet
  {
    auto first = FileLock::acquire(path);
    ASSERT_TRUE(first.is_ok()) << first.status().to_string();
    auto second = FileLock::acquire(path);
    ASSERT_FALSE(second.is_ok());
    EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(second.status().message().find(path), std::string::npos) << second.status().message();
    EXPECT_TRUE(*file_lock_held(path));
  }
  EXPECT_FALSE(*file_lock_held(path));
  EXPECT_TRUE(FileLock::acquire(path).is_ok());
}

TEST(FileLockTest, ALockHandedToAChildIsHeldUntilTheChildEnds) {
  TempDir dir;
  const std::string path = dir.file("runner.lock");
  Result<Process> child = Status::internal("not launched");
  {
    auto lock = FileLock::acquire(path);
    ASSERT_TRUE(lock.is_ok());
    LaunchRequest req;
    req.argv = {"/bin/sleep", "60"};
    req.log_path = dir.file("log");
    req.inherit_fd = lock->fd();
    child = launch_process(req);
    ASSERT_TRUE(child.is_ok()) << child.status().to_string();
  }  // this process' descriptor is closed here
  EXPECT_TRUE(*file_lock_held(path));
  EXPECT_FALSE(FileLock::acquire(path).is_ok());
  const auto holders = processes_with_file_open(path);
  EXPECT_NE(std::find(holders.begin(), holders.end(), child->pid), holders.end());
  signal_group(child->pid, SIGKILL);
  ASSERT_TRUE(wait_child(child->pid).is_ok());
  EXPECT_FALSE(*file_lock_held(path));
  EXPECT_TRUE(processes_with_file_open(path).empty());
}

TEST(FileLockTest, AChildWithoutTheDescriptorDoesNotHoldTheLock) {
  TempDir dir;
  const std::string path = dir.file("runner.lock");
  Result<Process> child = Status::internal("not launched");
  {
    auto lock = FileLock::acquire(path);
    ASSERT_TRUE(lock.is_ok());
    LaunchRequest req;
    req.argv = {"/bin/sleep", "60"};
    req.log_path = dir.file("log");
    child = launch_process(req);
    ASSERT_TRUE(child.is_ok());
  }
  EXPECT_FALSE(*file_lock_held(path));
  signal_group(child->pid, SIGKILL);
  ASSERT_TRUE(wait_child(child->pid).is_ok());
}

}  // namespace
}  // namespace tailor::platform
