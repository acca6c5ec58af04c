// The shared POSIX edges: hardware facts from /proc, atomic file writes,
// child processes with an error pipe, and signal forwarding to a real child.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "platform/executable.h"
#include "platform/files.h"
#include "platform/hardware_detect.h"
#include "platform/process.h"
#include "platform/signals.h"
#include "tests/testing/temp_dir.h"

namespace tailor::platform {
namespace {

using tailor::testing::TempDir;

std::string read_all(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(HardwareDetectTest, ReadsHostMemoryFromProc) {
  auto mem = detect_host_memory();
  ASSERT_TRUE(mem.has_value());
  EXPECT_GT(*mem, Bytes::gib(1));
}

TEST(FilesTest, AtomicWriteReplacesTheWholeFileAndLeavesNoTemporary) {
  TempDir dir;
  const std::string path = dir.file("plan.json");
  ASSERT_TRUE(write_file_atomic(path, "old").is_ok());
  ASSERT_TRUE(write_file_atomic(path, "new content").is_ok());
  EXPECT_EQ(read_all(path), "new content");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(FilesTest, AtomicWriteIntoAMissingFolderIsAnErrorNamingIt) {
  TempDir dir;
  const Status s = write_file_atomic(dir.file("no/such/folder/x"), "x");
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_NE(s.message().find("no/such/folder/x"), std::string::npos) << s.message();
}

TEST(ProcessTest, ExitStatusAndCapturedOutputOfAChild) {
  TempDir dir;
  LaunchRequest req;
  req.argv = {"/bin/sh", "-c", "echo hello; exit 3"};
  req.log_path = dir.file("log");
  auto p = launch_process(req);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  auto exit = wait_child(p->pid);
  ASSERT_TRUE(exit.is_ok());
  EXPECT_EQ(exit->code, 3);
  EXPECT_EQ(exit->signal, 0);
  EXPECT_EQ(read_all(dir.file("log")), "hello\n");
}

TEST(ProcessTest, AnExecutableThatCannotStartIsAnErrorNotAnExit) {
  TempDir dir;
  LaunchRequest req;
  req.argv = {dir.file("missing-runner")};
  req.log_path = dir.file("log");
  auto p = launch_process(req);
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("No such file"), std::string::npos) << p.status().message();
}

TEST(ExecutableTest, ConfiguredPathMustBeExecutable) {
  TempDir dir;
  EXPECT_EQ(find_executable("tailor-runner", dir.file("nope"), "TAILOR_TEST_UNSET").status().code(),
            StatusCode::kNotFound);
  auto sh = find_executable("sh", "", "TAILOR_TEST_UNSET");
  ASSERT_TRUE(sh.is_ok()) << sh.status().to_string();
  EXPECT_EQ(access(sh->c_str(), X_OK), 0);
}

// SIGTERM to this process while it waits reaches the child (which reports
// what it got through its exit status) and does not kill this process.
TEST(SignalForwarderTest, SigtermWhileWaitingIsPassedToTheChild) {
  TempDir dir;
  const std::string ready = dir.file("ready");
  LaunchRequest req;
  // The child announces its handler, then waits; SIGTERM makes it exit 42.
  req.argv = {"/bin/sh", "-c", "trap 'exit 42' TERM; : > " + ready + "; while :; do sleep 0.05; done"};
  req.own_process_group = false;
  auto p = launch_process(req);
  ASSERT_TRUE(p.is_ok());
  Result<ProcessExit> exit = Status::internal("not waited");
  {
    SignalForwarder forward(p->pid);
    // Wait for the child's trap before signalling (no fixed sleep).
    for (int i = 0; i < 2000 && !std::filesystem::exists(ready); ++i) usleep(5000);
    ASSERT_TRUE(std::filesystem::exists(ready));
    ::kill(::getpid(), SIGTERM);
    exit = wait_child(p->pid);
    EXPECT_EQ(forward.received(), SIGTERM);
  }
  ASSERT_TRUE(exit.is_ok());
  EXPECT_EQ(exit->code, 42);
}

}  // namespace
}  // namespace tailor::platform
