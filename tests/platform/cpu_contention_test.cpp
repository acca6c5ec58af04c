// The contention meter on this machine's own counters: processes spinning on
// every core are seen as others holding them, and the share follows the
// cores a run needs.
#include "platform/cpu_contention.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <vector>

namespace tailor::platform {
namespace {

CpuTimes at(double wall, double busy, double self, int cpus) { return {wall, busy, self, cpus, true}; }

TEST(CpuContentionTest, TheShareOfTheNeededCoresOthersHeld) {
  // Eight CPUs; over 10 s others kept 5 busy on average (this process used 2).
  const CpuTimes a = at(100, 1000, 50, 8);
  EXPECT_DOUBLE_EQ(contention_between(a, at(110, 1070, 70, 8), 2), 0.0) << "3 cores left free for 2";
  EXPECT_DOUBLE_EQ(contention_between(a, at(110, 1090, 70, 8), 2), 0.5) << "others held 7: one of the 2 left";
  EXPECT_DOUBLE_EQ(contention_between(a, at(110, 1100, 70, 8), 8), 1.0) << "every core busy with others";
  EXPECT_DOUBLE_EQ(contention_between(a, at(110, 1060, 70, 8), 16), 0.5)
      << "wanting more cores than there are: all 8, of which others held 4";
  EXPECT_DOUBLE_EQ(contention_between(a, at(110, 1015, 20, 8), 1), 0.0) << "coarse ticks: never below zero";
  EXPECT_EQ(contention_between(a, a, 2), -1) << "no time between the readings";
  EXPECT_EQ(contention_between(CpuTimes{}, at(110, 1070, 70, 8), 2), -1) << "no counters";
  EXPECT_EQ(contention_between(a, at(110, 1070, 70, 8), 0), -1);
}

// Children that spin until killed, each telling the parent over a pipe once
// it has burned `cpu_seconds` of its own CPU time.
std::vector<pid_t> spinners(int n, double cpu_seconds, int report_fd) {
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      bool told = false;
      volatile unsigned long x = 0;
      for (;;) {
        for (int k = 0; k < 100000; ++k)
          x = x + 1;
        timespec t{};
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
        if (!told && static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec) >= cpu_seconds) {
          const char c = 1;
          told = write(report_fd, &c, 1) == 1;
        }
      }
    }
    pids.push_back(pid);
  }
  return pids;
}

TEST(CpuContentionTest, ProcessesSpinningOnEveryCoreHoldThem) {
  const CpuTimes probe = read_cpu_times();
  ASSERT_TRUE(probe.known) << "/proc/stat unreadable";
  ASSERT_GT(probe.cpus, 0);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const CpuTimes a = read_cpu_times();
  const std::vector<pid_t> pids = spinners(probe.cpus, 0.3, fds[1]);
  // Blocked on the pipe, this process uses no CPU while they burn theirs.
  int reported = 0;
  char c = 0;
  while (reported < probe.cpus && read(fds[0], &c, 1) == 1)
    ++reported;
  const CpuTimes b = read_cpu_times();
  for (const pid_t pid : pids)
    kill(pid, SIGKILL);
  for (const pid_t pid : pids)
    waitpid(pid, nullptr, 0);
  close(fds[0]);
  close(fds[1]);
  ASSERT_EQ(reported, probe.cpus);
  EXPECT_EQ(b.cpus, probe.cpus);
  EXPECT_GT(b.machine_busy - a.machine_busy, 0.25 * probe.cpus) << "the spinners' time is in the machine's";
  EXPECT_LT(b.self - a.self, 0.2) << "this process waited";
  // A run wanting every core would have had at most half of them.
  EXPECT_GE(contention_between(a, b, probe.cpus), 0.5);
}

}  // namespace
}  // namespace tailor::platform
