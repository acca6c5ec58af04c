#include "platform/cpu_contention.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>

namespace tailor::platform {
namespace {

double seconds_of(const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); }

}  // namespace

CpuTimes read_cpu_times() {
  CpuTimes t;
  t.wall = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  rusage self{};
  if (getrusage(RUSAGE_SELF, &self) == 0) t.self = seconds_of(self.ru_utime) + seconds_of(self.ru_stime);
  std::ifstream in("/proc/stat");
  const long ticks = sysconf(_SC_CLK_TCK);
  if (!in || ticks <= 0) return t;
  // Only the CPUs this process may run on: others busy elsewhere take
  // nothing from it.
  cpu_set_t mine;
  CPU_ZERO(&mine);
  const bool masked = sched_getaffinity(0, sizeof mine, &mine) == 0;
  std::string line;
  double busy_ticks = 0;
  while (std::getline(in, line)) {
    if (line.rfind("cpu", 0) != 0) break;             // the cpu lines come first
    if (line.size() < 4 || line[3] == ' ') continue;  // the total
    std::istringstream fields(line.substr(3));
    int id = -1;
    // user nice system idle iowait irq softirq steal (guest time is inside
    // user and nice already).
    unsigned long long v[8] = {};
    fields >> id;
    for (unsigned long long& x : v)
      fields >> x;
    if (!fields || id < 0) return t;
    if (masked && (id >= CPU_SETSIZE || !CPU_ISSET(id, &mine))) continue;
    busy_ticks += static_cast<double>(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]);
    ++t.cpus;
  }
  t.machine_busy = busy_ticks / static_cast<double>(ticks);
  t.known = t.cpus > 0;
  return t;
}

double contention_between(const CpuTimes& a, const CpuTimes& b, int needed) {
  const double wall = b.wall - a.wall;
  if (!a.known || !b.known || wall <= 0 || needed <= 0) return -1;
  // The tick counters are coarse (10 ms a tick): others' share below zero
  // is this process's time rounded differently.
  const double others = std::max(0.0, (b.machine_busy - a.machine_busy) - (b.self - a.self)) / wall;
  const int cpus = std::min(a.cpus, b.cpus);
  const int want = std::min(needed, cpus);
  const double free = static_cast<double>(cpus) - others;
  return std::clamp((static_cast<double>(want) - free) / static_cast<double>(want), 0.0, 1.0);
}

}  // namespace tailor::platform
