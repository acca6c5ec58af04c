#include "runner/dist/rank_env.h"

#include <cstdlib>
#include <optional>

namespace tailor::runner::dist {
namespace {

// A decimal integer in [lo, hi], or nullopt.
std::optional<int> parse_int(const char* s, int lo, int hi) {
  if (s == nullptr || *s == '\0') return std::nullopt;
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (*end != '\0' || v < lo || v > hi) return std::nullopt;
  return static_cast<int>(v);
}

}  // namespace

Result<RankEnv> rank_env_from(const std::function<const char*(const char*)>& get) {
  RankEnv e;
  const char* rank = get("RANK");
  const char* world = get("WORLD_SIZE");
  if (rank == nullptr && world == nullptr) return e;
  e.present = true;
  constexpr int kMaxRanks = 4096;
  const auto w = parse_int(world, 1, kMaxRanks);
  if (!w) {
    return Status::invalid_argument("WORLD_SIZE must be an integer from 1 to " + std::to_string(kMaxRanks) + ", got \"" +
                                    std::string(world ? world : "") + "\"");
  }
  e.world = *w;
  const auto r = parse_int(rank, 0, e.world - 1);
  if (!r) {
    return Status::invalid_argument("RANK must be an integer from 0 to WORLD_SIZE-1 (" + std::to_string(e.world - 1) +
                                    "), got \"" + std::string(rank ? rank : "") + "\"");
  }
  e.rank = *r;
  if (const char* local = get("LOCAL_RANK")) {
    const auto l = parse_int(local, 0, kMaxRanks);
    if (!l) return Status::invalid_argument("LOCAL_RANK must be a non-negative integer, got \"" + std::string(local) + "\"");
    e.local_rank = *l;
  } else {
    e.local_rank = e.rank;
  }
  if (const char* addr = get("MASTER_ADDR"); addr != nullptr && *addr != '\0') e.master_addr = addr;
  const char* port = get("MASTER_PORT");
  const auto p = parse_int(port, 1, 65535);
  if (e.world > 1 && !p) {
    return Status::invalid_argument("MASTER_PORT must be a TCP port (1-65535) when WORLD_SIZE is " +
                                    std::to_string(e.world) + ", got \"" + std::string(port ? port : "") + "\"");
  }
  e.master_port = p.value_or(0);
  // torchrun's agent serves its own store on MASTER_PORT: meet on the next.
  if (const char* agent = get("TORCHELASTIC_USE_AGENT_STORE");
      agent != nullptr && std::string(agent) == "True" && e.master_port > 0) {
    if (e.master_port == 65535) return Status::invalid_argument("MASTER_PORT 65535 leaves no port after torchrun's store");
    ++e.master_port;
  }
  return e;
}

Result<RankEnv> rank_env_from_environment() {
  return rank_env_from([](const char* name) { return static_cast<const char*>(std::getenv(name)); });
}

}  // namespace tailor::runner::dist
