// The shared POSIX edges: hardware facts from /proc, atomic file writes,
// child processes with an error pipe, and signal forwarding to a real child.
#include <gtest/gtest.h>

#include <sched.h>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

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

void write_tree_file(const TempDir& root, const std::string& path, const std::string& text) {
  const std::filesystem::path p = root.path().string() + path;
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// The processor names the calibration store's machine for CPU training:
// x86's model name, Arm's implementer and part, with this process's threads.
TEST(HardwareDetectTest, TheCpuModelIsReadFromCpuinfoWithTheThreadsThisProcessMayUse) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  const int n = CPU_COUNT(&set);
  const std::string threads = ", " + std::to_string(n) + (n == 1 ? " thread" : " threads");
  {
    TempDir root;
    write_tree_file(root, "/proc/cpuinfo",
                    "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu\n\n"
                    "processor\t: 1\nmodel name\t: AMD EPYC 7B13\n");
    EXPECT_EQ(detect_cpu_model(root.path().string()), "AMD EPYC 7B13" + threads);
  }
  {
    TempDir root;
    write_tree_file(root, "/proc/cpuinfo",
                    "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n");
    EXPECT_EQ(detect_cpu_model(root.path().string()), "Arm implementer 0x41 part 0xd0c" + threads);
  }
  TempDir empty;
  EXPECT_EQ(detect_cpu_model(empty.path().string()), "");
}

// A container's or pod's memory limit, not the host's RAM, is what its jobs
// may use: the smaller of the two is the host memory planned for.
TEST(HardwareDetectTest, AControlGroupsMemoryLimitBelowTheRamIsTheHostMemory) {
  const std::string meminfo = "MemTotal:       65536000 kB\nMemFree:        1000 kB\n";
  {  // cgroup v2 inside a cgroup namespace: the group is the mount's top.
    TempDir root;
    write_tree_file(root, "/proc/meminfo", meminfo);
    write_tree_file(root, "/proc/self/cgroup", "0::/\n");
    write_tree_file(root, "/sys/fs/cgroup/memory.max", "3221225472\n");
    EXPECT_EQ(detect_host_memory(root.path().string()), Bytes::gib(3));
  }
  {  // v2 without one: the group's own path, and a tighter limit on its parent.
    TempDir root;
    write_tree_file(root, "/proc/meminfo", meminfo);
    write_tree_file(root, "/proc/self/cgroup", "0::/kubepods/pod1/c1\n");
    write_tree_file(root, "/sys/fs/cgroup/kubepods/pod1/c1/memory.max", "max\n");
    write_tree_file(root, "/sys/fs/cgroup/kubepods/pod1/memory.max", "2147483648\n");
    EXPECT_EQ(detect_host_memory(root.path().string()), Bytes::gib(2));
  }
  {  // v1 (a hybrid host): the memory controller's line among others; the
     // host's path is absent under the container's mount, its top holds the limit.
    TempDir root;
    write_tree_file(root, "/proc/meminfo", meminfo);
    write_tree_file(root, "/proc/self/cgroup", "12:pids:/docker/abc\n4:memory:/docker/abc\n0::/docker/abc\n");
    write_tree_file(root, "/sys/fs/cgroup/memory/memory.limit_in_bytes", "1073741824\n");
    EXPECT_EQ(detect_host_memory(root.path().string()), Bytes::gib(1));
  }
  {  // No limit (v1 writes a number near 2^63), or one above the RAM: the RAM.
    TempDir root;
    write_tree_file(root, "/proc/meminfo", meminfo);
    write_tree_file(root, "/proc/self/cgroup", "4:cpu,memory:/\n");
    write_tree_file(root, "/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    EXPECT_EQ(detect_host_memory(root.path().string()), Bytes(65536000LL * 1024));
    write_tree_file(root, "/sys/fs/cgroup/memory/memory.limit_in_bytes", "137438953472\n");
    EXPECT_EQ(detect_host_memory(root.path().string()), Bytes(65536000LL * 1024));
  }
  EXPECT_EQ(parse_cgroup_memory_limit("max"), std::nullopt);
  EXPECT_EQ(parse_cgroup_memory_limit("12x"), std::nullopt);
  EXPECT_EQ(parse_cgroup_memory_limit(""), std::nullopt);
  EXPECT_EQ(parse_cgroup_memory_limit("99999999999999999999999"), std::nullopt);
  EXPECT_EQ(parse_cgroup_memory_limit("4096\n"), Bytes(4096));
}

TEST(FilesTest, AtomicWriteReplacesTheWholeFileAndLeavesNoTemporary) {
  TempDir dir;
  const std::string path = dir.file("plan.json");
  ASSERT_TRUE(write_file_atomic(path, "old").is_ok());
  ASSERT_TRUE(write_file_atomic(path, "new content").is_ok());
  EXPECT_EQ(read_all(path), "new content");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

// A secret (the token, the sessions file) is written 0600 from its first
// byte, also over a temporary file a crash left readable by all.
TEST(FilesTest, APrivateAtomicWriteIsOwnerOnlyEvenOverALeftoverTemporary) {
  TempDir dir;
  const std::string path = dir.file("sessions");
  { std::ofstream(path + ".tmp") << "left by a crash"; }
  std::filesystem::permissions(path + ".tmp", std::filesystem::perms(0644));
  ASSERT_TRUE(write_file_atomic(path, "secret", Durability::kPowerCut, 0600).is_ok());
  EXPECT_EQ(read_all(path), "secret");
  EXPECT_EQ(std::filesystem::status(path).permissions() & std::filesystem::perms::all, std::filesystem::perms(0600));
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

// What a child starts with, launched by posix_spawn (no parent-death
// signal: tailord's runners) or by fork (with one): descriptors 0-2 and the
// inherited one as 4, nothing else of this process (here a descriptor
// without close-on-exec; 3 left free); its own process group; the working
// folder and the added variable; no blocked signals and SIGPIPE's default
// action. Each state is read by the program the child execs, not by a
// shell, whose pipes, saved descriptors and masks around its forks are its
// own.
TEST(ProcessTest, BothLaunchPathsStartTheSameChild) {
  TempDir dir;
  const int stray = ::open("/dev/null", O_RDONLY);  // no O_CLOEXEC
  ASSERT_GE(stray, 0);
  const int kept = ::open(dir.write("kept", "").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(kept, 0);
  std::filesystem::create_directory(dir.file("work"));
  const auto old_pipe = ::signal(SIGPIPE, SIG_IGN);
  sigset_t block, previous;
  sigemptyset(&block);
  sigaddset(&block, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &block, &previous);
  int n = 0;
  for (const int death_signal : {0, SIGTERM}) {
    const std::string how = death_signal == 0 ? "posix_spawn" : "fork";
    // The lines `script` writes, run by a child launched this way.
    const auto child_says = [&](const std::string& script) {
      const std::string log = dir.file("log" + std::to_string(n++));
      LaunchRequest req;
      req.argv = {"/bin/sh", "-c", script};
      req.env["TAILOR_CHILD_TEST"] = "here";
      req.log_path = log;
      req.working_dir = dir.file("work");
      req.inherit_fd = kept;
      req.parent_death_signal = death_signal;
      std::vector<std::string> lines;
      auto p = launch_process(req);
      EXPECT_TRUE(p.is_ok()) << p.status().to_string();
      if (!p.is_ok() || !wait_child(p->pid).is_ok()) return lines;
      std::istringstream out(read_all(log));
      for (std::string line; std::getline(out, line);)
        lines.push_back(line);
      return lines;
    };
    // ls opens one descriptor of its own, the folder it lists: 3.
    EXPECT_EQ(child_says("exec ls /proc/self/fd"), (std::vector<std::string>{"0", "1", "2", "3", "4"})) << how;
    const std::vector<std::string> where =
        child_says("pwd; echo \"$TAILOR_CHILD_TEST\"; exec cut -d' ' -f1,5 /proc/self/stat");
    ASSERT_EQ(where.size(), 3u) << how;
    EXPECT_EQ(where[0], std::filesystem::canonical(dir.file("work")).string()) << how;
    EXPECT_EQ(where[1], "here") << how;
    const std::string pid = where[2].substr(0, where[2].find(' '));
    EXPECT_EQ(where[2], pid + " " + pid) << how << ": its own process group";
    const std::vector<std::string> signals = child_says("exec grep -E '^Sig(Blk|Ign)' /proc/self/status");
    ASSERT_EQ(signals.size(), 2u) << how;
    EXPECT_EQ(signals[0], "SigBlk:\t0000000000000000") << how;
    // SIGPIPE is bit 13 (value 0x1000): not ignored.
    ASSERT_EQ(signals[1].rfind("SigIgn:\t", 0), 0u) << how;
    EXPECT_EQ(std::stoull(signals[1].substr(8), nullptr, 16) & (1ULL << (SIGPIPE - 1)), 0u)
        << how << ": " << signals[1];
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  ::signal(SIGPIPE, old_pipe);
  ::close(stray);
  ::close(kept);
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
