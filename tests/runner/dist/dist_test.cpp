// The ranks' collectives over real loopback sockets (threads as ranks), the
// rank variables, and how a multi-rank job's outcome is decided.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <thread>

#include "runner/dist/communicator.h"
#include "runner/dist/launcher.h"
#include "runner/dist/rank_env.h"

namespace tailor::runner::dist {
namespace {

using namespace std::chrono_literals;

RankEnv env_for(int rank, int world, int port) {
  RankEnv e;
  e.present = true;
  e.rank = rank;
  e.world = world;
  e.local_rank = rank;
  e.master_addr = "127.0.0.1";
  e.master_port = port;
  return e;
}

// Runs `body` on `world` connected ranks, one thread each; returns each
// rank's connect status message ("" when it joined).
std::vector<std::string> run_ranks(int world, const std::function<void(Communicator&)>& body,
                                   CommunicatorOptions options = {}) {
  const int port = free_loopback_port();
  EXPECT_GT(port, 0);
  std::vector<std::string> errors(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto comm = Communicator::connect(env_for(r, world, port), options);
      if (!comm.is_ok()) {
        errors[static_cast<std::size_t>(r)] = comm.status().message();
        return;
      }
      body(**comm);
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// Values whose float sums depend on the order they are added in.
float value_of(int rank, std::size_t i) {
  return static_cast<float>(std::sin(static_cast<double>(i) * 0.37 + rank) * std::pow(10.0, static_cast<int>((i + static_cast<std::size_t>(rank)) % 7) - 3));
}

TEST(CommunicatorTest, AllReduceSumsEveryElementAndEveryRankGetsTheSameBits) {
  for (int world : {2, 3, 4}) {
    for (std::size_t count : {std::size_t{1}, std::size_t{3}, std::size_t{1000}, std::size_t{262147}}) {
      std::vector<std::vector<float>> out(static_cast<std::size_t>(world));
      const auto errors = run_ranks(world, [&](Communicator& c) {
        std::vector<float> v(count);
        for (std::size_t i = 0; i < count; ++i) v[i] = value_of(c.rank(), i);
        ASSERT_TRUE(c.all_reduce_sum(v.data(), v.size()).is_ok());
        out[static_cast<std::size_t>(c.rank())] = v;
      });
      for (const auto& e : errors) ASSERT_EQ(e, "");
      for (std::size_t i = 0; i < count; ++i) {
        double expected = 0, magnitude = 0;
        for (int r = 0; r < world; ++r) {
          expected += value_of(r, i);
          magnitude += std::abs(value_of(r, i));
        }
        // fp32 rounding of each partial sum: a few ulps of the addends.
        ASSERT_NEAR(out[0][i], expected, 4e-7 * magnitude) << "world " << world << " element " << i;
      }
      for (int r = 1; r < world; ++r) {
        ASSERT_EQ(std::memcmp(out[0].data(), out[static_cast<std::size_t>(r)].data(), count * sizeof(float)), 0)
            << "rank " << r << " of " << world << " differs from rank 0 (" << count << " elements)";
      }
    }
  }
}

TEST(CommunicatorTest, ReduceScatterLeavesEachRankTheSumOfItsSegment) {
  const int world = 3;
  const std::size_t count = 1001;
  const auto errors = run_ranks(world, [&](Communicator& c) {
    std::vector<float> v(count);
    for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<float>(i * (c.rank() + 1));
    ASSERT_TRUE(c.reduce_scatter_sum(v.data(), count).is_ok());
    const auto [lo, hi] = c.segment_range(count, c.rank());
    for (std::size_t i = lo; i < hi; ++i) ASSERT_EQ(v[i], static_cast<float>(i * 6)) << "rank " << c.rank();
    // ...and all-gather completes the buffer on every rank.
    ASSERT_TRUE(c.all_gather(v.data(), count, sizeof(float)).is_ok());
    for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(v[i], static_cast<float>(i * 6));
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

// ZeRO-3 cuts 8-bit optimizer states at block boundaries.
TEST(CommunicatorTest, AlignedSegmentsStartOnMultiplesAndStillCoverTheBuffer) {
  const int world = 4;
  const std::size_t count = 10000, align = 2048;
  const auto errors = run_ranks(world, [&](Communicator& c) {
    std::size_t covered = 0;
    for (int r = 0; r < world; ++r) {
      const auto [lo, hi] = c.segment_range(count, r, align);
      ASSERT_EQ(lo, covered) << "segment " << r;
      ASSERT_TRUE(lo % align == 0 || lo == count) << "segment " << r << " starts at " << lo;
      covered = hi;
    }
    ASSERT_EQ(covered, count);
    std::vector<float> v(count);
    for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<float>(i % 97) * static_cast<float>(c.rank() + 1);
    ASSERT_TRUE(c.reduce_scatter_sum(v.data(), count, align).is_ok());
    const auto [lo, hi] = c.segment_range(count, c.rank(), align);
    for (std::size_t i = lo; i < hi; ++i) ASSERT_EQ(v[i], static_cast<float>(i % 97) * 10) << "rank " << c.rank();
    ASSERT_TRUE(c.all_gather(v.data(), count, sizeof(float), align).is_ok());
    for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(v[i], static_cast<float>(i % 97) * 10);
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

TEST(CommunicatorTest, BroadcastSendAndReceiveMoveBytesUnchanged) {
  const int world = 4;
  const auto errors = run_ranks(world, [&](Communicator& c) {
    std::vector<std::uint16_t> b(5000, 0);
    if (c.rank() == 2) std::iota(b.begin(), b.end(), std::uint16_t{7});
    ASSERT_TRUE(c.broadcast(b.data(), b.size() * 2, 2).is_ok());
    for (std::size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i], static_cast<std::uint16_t>(i + 7));
    // Every rank sends its number to rank 0.
    std::int64_t mine = 100 + c.rank();
    if (c.rank() == 0) {
      for (int r = 1; r < c.world(); ++r) {
        std::int64_t got = 0;
        ASSERT_TRUE(c.recv(r, &got, sizeof got).is_ok());
        EXPECT_EQ(got, 100 + r);
      }
    } else {
      ASSERT_TRUE(c.send(0, &mine, sizeof mine).is_ok());
    }
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

TEST(CommunicatorTest, ARankThatNeverJoinsIsNamedAfterTheRendezvousTimeout) {
  const int port = free_loopback_port();
  CommunicatorOptions o;
  o.rendezvous_timeout = 300ms;
  // World 3, only rank 0 and rank 2 start.
  std::string rank0, rank2;
  std::thread t2([&] {
    auto c = Communicator::connect(env_for(2, 3, port), o);
    rank2 = c.is_ok() ? "" : c.status().message();
  });
  auto c0 = Communicator::connect(env_for(0, 3, port), o);
  t2.join();
  ASSERT_FALSE(c0.is_ok());
  rank0 = c0.status().message();
  EXPECT_NE(rank0.find("rank 1 of 3 did not join"), std::string::npos) << rank0;
  EXPECT_NE(rank0.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << rank0;
  EXPECT_FALSE(rank2.empty());
}

TEST(CommunicatorTest, ARankWithNoRankZeroSaysSo) {
  CommunicatorOptions o;
  o.rendezvous_timeout = 200ms;
  auto c = Communicator::connect(env_for(1, 2, free_loopback_port()), o);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("found no rank 0"), std::string::npos) << c.status().message();
}

TEST(CommunicatorTest, APeerThatStopsFailsTheNextCollectiveAtOnceNamingIt) {
  const int port = free_loopback_port();
  std::string error;
  std::thread t1([&] {
    auto c = Communicator::connect(env_for(1, 2, port));
    ASSERT_TRUE(c.is_ok());
    // Leaves: its sockets close as a killed process' would.
  });
  auto c0 = Communicator::connect(env_for(0, 2, port));
  t1.join();
  ASSERT_TRUE(c0.is_ok());
  std::vector<float> v(100000, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  const Status s = (*c0)->all_reduce_sum(v.data(), v.size());
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("rank 1 stopped"), std::string::npos) << s.message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);  // not after the collective timeout
}

TEST(CommunicatorTest, ASilentPeerFailsTheCollectiveAfterItsTimeout) {
  const int port = free_loopback_port();
  CommunicatorOptions o;
  o.collective_timeout = 200ms;
  std::atomic<bool> done{false};
  std::unique_ptr<Communicator> keep;
  std::thread t1([&] {
    auto c = Communicator::connect(env_for(1, 2, port), o);
    ASSERT_TRUE(c.is_ok());
    keep = std::move(c).value();  // connected, never answers (a stopped process)
  });
  auto c0 = Communicator::connect(env_for(0, 2, port), o);
  t1.join();
  ASSERT_TRUE(c0.is_ok());
  float x = 1;
  const Status s = (*c0)->all_reduce_sum(&x, 1);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("rank 1 did not answer"), std::string::npos) << s.message();
}

TEST(RankEnvTest, ReadsTheUsualVariablesAndNamesOnesThatDoNotParse) {
  auto from = [](std::map<std::string, std::string> vars) {
    return rank_env_from([vars](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    });
  };
  auto none = from({});
  ASSERT_TRUE(none.is_ok());
  EXPECT_FALSE(none->present);
  EXPECT_EQ(none->world, 1);
  auto ok = from({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "10.0.0.2"}, {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(ok.is_ok());
  EXPECT_TRUE(ok->present);
  EXPECT_EQ(ok->rank, 3);
  EXPECT_EQ(ok->world, 4);
  EXPECT_EQ(ok->local_rank, 1);
  EXPECT_EQ(ok->master_addr, "10.0.0.2");
  EXPECT_EQ(ok->master_port, 29500);
  EXPECT_NE(from({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_PORT", "1"}}).status().message().find("RANK"), std::string::npos);
  EXPECT_NE(from({{"RANK", "0"}, {"WORLD_SIZE", "two"}}).status().message().find("WORLD_SIZE"), std::string::npos);
  EXPECT_NE(from({{"RANK", "0"}, {"WORLD_SIZE", "2"}}).status().message().find("MASTER_PORT"), std::string::npos);
  EXPECT_TRUE(from({{"RANK", "0"}, {"WORLD_SIZE", "1"}}).is_ok());  // one rank needs no port
  // torchrun's agent serves its store on MASTER_PORT.
  auto torchrun = from({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  ASSERT_TRUE(torchrun.is_ok());
  EXPECT_EQ(torchrun->master_port, 29501);
}

TEST(JobOutcomeTest, TheFirstRankToFailDecidesAndCancelledRanksDoNot) {
  auto exit = [](int rank, int status) { return RankExit{rank, status, false, 0}; };
  auto killed = [](int rank, int sig) { return RankExit{rank, 0, true, sig}; };
  struct Case {
    std::vector<RankExit> exits;
    RunnerExit expected;
    int deciding;
  };
  const std::vector<Case> cases = {
      {{exit(1, 0), exit(0, 0)}, RunnerExit::kOk, -1},
      {{exit(1, 3), exit(0, 1)}, RunnerExit::kOutOfMemory, 1},  // rank 0 failed because rank 1 left
      {{killed(1, 9), exit(0, 1)}, RunnerExit::kFailure, 1},
      {{exit(0, 2), exit(1, 1)}, RunnerExit::kBadInput, 0},
      {{exit(1, 4), exit(0, 4)}, RunnerExit::kCancelled, -1},
      {{exit(1, 4), exit(0, 1)}, RunnerExit::kFailure, 0},      // rank 0 failed writing the checkpoint
      {{exit(1, 127), exit(0, 0)}, RunnerExit::kFailure, 1},    // could not exec
  };
  for (const Case& c : cases) {
    const JobOutcome o = job_outcome(c.exits);
    EXPECT_EQ(o.exit, c.expected);
    EXPECT_EQ(o.deciding_rank, c.deciding);
  }
}

}  // namespace
}  // namespace tailor::runner::dist
