// Which rank of a multi-process job this process is, from the variables
// torchrun, srun wrappers and Kubernetes Jobs set (RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT) and tailor-runner's own launcher
// sets (launcher.h). Under torchrun (TORCHELASTIC_USE_AGENT_STORE=True) its
// agent's store holds MASTER_PORT, so the ranks meet on MASTER_PORT + 1.
// Torch-free.
#pragma once

#include <functional>
#include <string>

#include "core/status.h"

namespace tailor::runner::dist {

struct RankEnv {
  bool present = false;  // RANK or WORLD_SIZE was set
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
};

// Reads the variables through `get` (std::getenv by default). Set variables
// that do not parse, or that contradict each other, are an error naming them.
Result<RankEnv> rank_env_from(const std::function<const char*(const char*)>& get);
Result<RankEnv> rank_env_from_environment();

}  // namespace tailor::runner::dist
