// The batch script tailord gives sbatch for one attempt of a job: #SBATCH
// lines for what Tailor decides (the job's tag, folders, size, GPUs, no
// requeue, appended output) and what the spec and tailord's settings ask
// (partition, account, QoS, time limit, extra options), then one srun that
// starts a tailor-runner rank per task with RANK, LOCAL_RANK, WORLD_SIZE,
// MASTER_ADDR (the first node's address: node names need not resolve) and
// MASTER_PORT. It is kept in the job's folder, so what ran can be read and
// submitted again by hand. Pure.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "dsl/job_spec.h"

namespace tailor::daemon::slurm {

struct BatchJob {
  std::string tailor_id;  // the tag: --comment, and what reconciliation looks for
  std::string name;       // the job's name
  std::int64_t attempt = 1;
  std::string job_dir;                     // on a path every node sees: plan in, run files out
  std::string runner;                      // tailor-runner's path on the nodes
  std::vector<std::string> runner_args;    // after the program
  std::map<std::string, std::string> env;  // exported before srun
  int ranks = 1;                           // tailor-runner processes in all
  int nodes = 1;
  int tasks_per_node = 1;  // ranks on each node (at most)
  int gpus_per_node = 0;   // --gres=gpu:N; 0 on CPU nodes
  int cpus_per_task = 0;   // 0: Slurm's default
  dsl::SlurmSpec slurm;    // the spec's settings over tailord's
};

// How `ranks` ranks of a plan spread over the nodes it was made for
// (`gpus_per_node` 0: CPU ranks, all on one node): as few nodes as hold
// them, one GPU each.
void lay_out_ranks(int ranks, int plan_nodes, int gpus_per_node, BatchJob& job);

// The script's text.
std::string batch_script(const BatchJob& job);

// `value` quoted for bash: '...' with each ' written as '\''.
std::string shell_quote(const std::string& value);

}  // namespace tailor::daemon::slurm
