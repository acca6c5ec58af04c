// The ranks' collectives (runner/dist/communicator.h) on loopback: all-reduce
// and broadcast time for buffers of 1-64 MiB between N ranks (threads of one
// process, each with its own sockets, as separate processes would have), and
// the bus bandwidth 2(N-1)/N x bytes / time that the planner's
// kCpuLoopbackGBps stands for.
//   comm_bench [--ranks N] [--repeat R]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "runner/dist/communicator.h"
#include "runner/dist/launcher.h"

using namespace tailor::runner::dist;

int main(int argc, char** argv) {
  int ranks = 2, repeat = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--ranks") == 0) ranks = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--repeat") == 0) repeat = std::atoi(argv[i + 1]);
  }
  std::printf("%-10s %6s %10s %12s %14s\n", "op", "ranks", "MiB", "ms", "bus GB/s");
  for (std::size_t mib : {1, 4, 16, 64}) {
    const std::size_t count = mib * 1024 * 1024 / 4;
    double reduce_ms = 0, bcast_ms = 0;
    const int port = free_loopback_port();
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        RankEnv e;
        e.present = true;
        e.rank = r;
        e.world = ranks;
        e.master_port = port;
        auto comm = Communicator::connect(e);
        if (!comm.is_ok()) {
          std::fprintf(stderr, "comm_bench: %s\n", comm.status().message().c_str());
          std::exit(1);
        }
        std::vector<float> v(count, 1.0f);
        (void)(*comm)->all_reduce_sum(v.data(), count);  // warm-up
        const auto t0 = std::chrono::steady_clock::now();
        for (int k = 0; k < repeat; ++k) (void)(*comm)->all_reduce_sum(v.data(), count);
        const auto t1 = std::chrono::steady_clock::now();
        for (int k = 0; k < repeat; ++k) (void)(*comm)->broadcast(v.data(), count * 4, 0);
        const auto t2 = std::chrono::steady_clock::now();
        if (r == 0) {
          reduce_ms = std::chrono::duration<double, std::milli>(t1 - t0).count() / repeat;
          bcast_ms = std::chrono::duration<double, std::milli>(t2 - t1).count() / repeat;
        }
      });
    }
    for (auto& t : threads) t.join();
    const double bytes = static_cast<double>(mib) * 1048576.0;
    const double bus = 2.0 * (ranks - 1) / ranks * bytes;
    std::printf("%-10s %6d %10zu %12.2f %14.2f\n", "allreduce", ranks, mib, reduce_ms, bus / reduce_ms / 1e6);
    std::printf("%-10s %6d %10zu %12.2f %14.2f\n", "broadcast", ranks, mib, bcast_ms,
                (ranks - 1) * bytes / bcast_ms / 1e6);
  }
  return 0;
}
