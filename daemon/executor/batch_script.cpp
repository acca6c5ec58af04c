#include "daemon/executor/batch_script.h"

#include <algorithm>
#include <sstream>

namespace tailor::daemon::slurm {

std::string shell_quote(const std::string& value) {
  std::string out = "'";
  for (const char c : value) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

void lay_out_ranks(int ranks, int plan_nodes, int gpus_per_node, BatchJob& job) {
  ranks = std::max(1, ranks);
  job.ranks = ranks;
  if (gpus_per_node <= 0) {
    job.nodes = 1;
    job.tasks_per_node = ranks;
    job.gpus_per_node = 0;
    return;
  }
  job.nodes = std::clamp((ranks + gpus_per_node - 1) / gpus_per_node, 1, std::max(1, plan_nodes));
  job.tasks_per_node = (ranks + job.nodes - 1) / job.nodes;
  job.gpus_per_node = job.tasks_per_node;
}

std::string batch_script(const BatchJob& job) {
  const int world = job.ranks;
  std::ostringstream s;
  s << "#!/bin/bash\n";
  s << "# Tailor job " << job.tailor_id << " (" << job.name << "), attempt " << job.attempt
    << ", as tailord submitted it to Slurm:\n";
  s << "# " << world << " tailor-runner rank" << (world > 1 ? "s" : "") << " on " << job.nodes << " node"
    << (job.nodes > 1 ? "s" : "") << ", meeting at the first node's address.\n";
  // Job names end up in squeue's narrow columns; the tag is the comment.
  s << "#SBATCH --job-name=tailor-" << job.name << "\n";
  s << "#SBATCH --comment=" << job.tailor_id << "\n";
  // tailord decides about retries (from the last checkpoint, with backoff,
  // re-planned after OOM); Slurm requeueing would run an attempt twice.
  s << "#SBATCH --no-requeue\n";
  s << "#SBATCH --open-mode=append\n";
  s << "#SBATCH --output=" << job.job_dir << "/runner.log\n";
  s << "#SBATCH --chdir=" << job.job_dir << "\n";
  s << "#SBATCH --nodes=" << job.nodes << "\n";
  s << "#SBATCH --ntasks-per-node=" << job.tasks_per_node << "\n";
  if (job.gpus_per_node > 0) s << "#SBATCH --gres=gpu:" << job.gpus_per_node << "\n";
  if (job.cpus_per_task > 0) s << "#SBATCH --cpus-per-task=" << job.cpus_per_task << "\n";
  if (!job.slurm.partition.empty()) s << "#SBATCH --partition=" << job.slurm.partition << "\n";
  if (!job.slurm.account.empty()) s << "#SBATCH --account=" << job.slurm.account << "\n";
  if (!job.slurm.qos.empty()) s << "#SBATCH --qos=" << job.slurm.qos << "\n";
  if (!job.slurm.time_limit.empty()) s << "#SBATCH --time=" << job.slurm.time_limit << "\n";
  for (const std::string& o : job.slurm.sbatch_options)
    s << "#SBATCH " << o << "\n";
  s << "\nset -u\n";
  for (const auto& [k, v] : job.env)
    s << "export " << k << "=" << shell_quote(v) << "\n";
  if (job.cpus_per_task > 0) {
    s << "export OMP_NUM_THREADS=" << job.cpus_per_task << " MKL_NUM_THREADS=" << job.cpus_per_task
      << " OPENBLAS_NUM_THREADS=" << job.cpus_per_task << "\n";
  }
  s << "first_node=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n";
  s << "MASTER_ADDR=$(scontrol show node \"$first_node\" -o | tr ' ' '\\n' | sed -n 's/^NodeAddr=//p')\n";
  s << "export MASTER_ADDR=${MASTER_ADDR:-$first_node}\n";
  // A port per Slurm job, so that two jobs sharing a node do not meet.
  s << "export MASTER_PORT=$(( 20000 + SLURM_JOB_ID % 20000 ))\n";
  s << "echo \"tailor: Slurm job $SLURM_JOB_ID on $SLURM_JOB_NODELIST, ranks meet at $MASTER_ADDR:$MASTER_PORT\"\n";
  // --kill-on-bad-exit: a rank that fails ends the others at once (their
  // next collective would only fail); the runner's events say which.
  s << "srun --kill-on-bad-exit=1 --nodes=" << job.nodes << " --ntasks=" << world
    << " --ntasks-per-node=" << job.tasks_per_node << " \\\n";
  s << "  bash -c 'export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS; exec \"$@\"' "
       "tailor-rank \\\n";
  s << "  " << shell_quote(job.runner);
  for (const std::string& a : job.runner_args)
    s << " " << shell_quote(a);
  s << "\n";
  return s.str();
}

}  // namespace tailor::daemon::slurm
