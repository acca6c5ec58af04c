// The runner's heartbeat file: touched while the process is scheduled,
// named per process, configured from tailord's environment variable.
#include "runner/protocol/heartbeat.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "tests/testing/temp_dir.h"

namespace tailor::runner {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

TEST(HeartbeatTest, NamesAFileForEachProcessOfAJob) {
  EXPECT_EQ(heartbeat_file_name(std::nullopt), "heartbeat");
  EXPECT_EQ(heartbeat_file_name(3), "heartbeat.rank-3");
  EXPECT_TRUE(is_heartbeat_file_name("heartbeat"));
  EXPECT_TRUE(is_heartbeat_file_name("heartbeat.rank-12"));
  EXPECT_FALSE(is_heartbeat_file_name("events.jsonl"));
  EXPECT_FALSE(is_heartbeat_file_name("heartbeats"));
}

TEST(HeartbeatTest, TheIntervalComesFromTheEnvironmentWhenItIsASensibleNumber) {
  ::setenv(kHeartbeatEnv, "0.25", 1);
  EXPECT_EQ(heartbeat_interval_from_env(), std::chrono::milliseconds(250));
  for (const char* bad : {"", "0", "-1", "soon", "1e9"}) {
    ::setenv(kHeartbeatEnv, bad, 1);
    EXPECT_EQ(heartbeat_interval_from_env(), std::nullopt) << bad;
  }
  ::unsetenv(kHeartbeatEnv);
  EXPECT_EQ(heartbeat_interval_from_env(), std::nullopt);
}

TEST(HeartbeatTest, BeatsWhileAliveAndStopsWhenDestroyed) {
  tailor::testing::TempDir dir;
  const std::string path = dir.file("heartbeat");
  const auto long_ago = fs::file_time_type::clock::now() - 1h;
  {
    Heartbeat beat(path, 20ms);
    ASSERT_TRUE(fs::exists(path));  // the first beat is at once
    // Set back an hour, the file is touched again by the next beat.
    fs::last_write_time(path, long_ago);
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (fs::last_write_time(path) == long_ago && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(5ms);
    }
    EXPECT_NE(fs::last_write_time(path), long_ago);
  }
  // Destroyed: nothing touches it any more.
  fs::last_write_time(path, long_ago);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(fs::last_write_time(path), long_ago);
}

TEST(HeartbeatTest, AFolderThatIsNotThereYetIsSkippedUntilItIs) {
  tailor::testing::TempDir dir;
  const std::string path = dir.file("later/heartbeat");
  EXPECT_FALSE(touch_heartbeat(path));
  fs::create_directories(dir.file("later"));
  EXPECT_TRUE(touch_heartbeat(path));
  EXPECT_TRUE(fs::exists(path));
}

}  // namespace
}  // namespace tailor::runner
