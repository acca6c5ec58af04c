// What Slurm's commands print, read into structs: `scontrol show
// node|partition -o` lines, the squeue and sacct formats the Slurm
// client asks for, and Slurm's job states mapped to the ones Tailor
// reports. Pure (no process is run here), so the parsing is unit-tested on
// the text Slurm 22.05 prints.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tailor::daemon::slurm {

// The Key=Value fields of one `scontrol show ... -o` line. A word without
// "Key=" continues the previous value (values such as Reason or Command
// may hold spaces).
std::map<std::string, std::string> scontrol_fields(std::string_view line);

// Where a Slurm job is, for tailord: waiting, running (its ranks beat), or
// ended (judge it).
enum class Phase { kPending, kRunning, kEnded };

// Slurm's state (JobState=RUNNING, "CANCELLED by 0") -> phase.
Phase phase_of(const std::string& slurm_state);
// Slurm's state as Tailor names it: pending, running, completed, failed,
// cancelled, timeout, node_fail, preempted (others fold into the nearest:
// BOOT_FAIL is node_fail, DEADLINE timeout, OUT_OF_MEMORY failed).
std::string tailor_state_name(const std::string& slurm_state);

struct Job {
  std::string id;       // JobId
  std::string comment;  // the Tailor job id tailord submitted it with
  std::string state;    // PENDING, RUNNING, COMPLETED, CANCELLED, ...
  std::string reason;   // why it is pending ("Resources", "Priority"), or None
  std::string nodes;    // NodeList, e.g. "n[1-2]"
  int exit_code = 0;    // ExitCode=code:signal of the batch script
  int exit_signal = 0;

  Phase phase() const { return phase_of(state); }
  // "PENDING (Resources)", "RUNNING on n[1-2]", "COMPLETED", "FAILED (exit 1)"
  std::string describe() const;
};

// The squeue format the client asks for (kSqueueFormat): one job a line.
inline constexpr const char* kSqueueFormat = "%i|%k|%T|%r|%N";
std::vector<Job> parse_squeue(std::string_view text);

// `sacct -c -n -P -o JobID,State,ExitCode,NodeList -j ID`: the completion
// log's record of `id` (the last one, should Slurm have reused the id).
inline constexpr const char* kSacctFields = "JobID,State,ExitCode,NodeList";
std::optional<Job> parse_sacct(std::string_view text, const std::string& id);

struct Node {
  std::string name;
  std::string addr;   // NodeAddr: node names need not resolve
  std::string state;  // IDLE, MIXED, ALLOCATED, DOWN*, DRAIN, ...
  int cpus = 0;
  std::int64_t memory_mib = 0;  // RealMemory
  int gpus = 0;                 // Gres gpu count
  std::string gpu_type;         // Gres gpu type ("a100"), empty when untyped
  std::vector<std::string> partitions;

  // DOWN, DRAIN, FAIL, NOT_RESPONDING ('*'), INVAL, FUTURE: takes no job.
  bool usable() const;
};
std::optional<Node> parse_scontrol_node(std::string_view line);

// "gpu:2", "gpu:a100:2(S:0-1)", "gpu:a100:2,shard:4", "(null)" -> count and type.
void parse_gres_gpus(const std::string& gres, int& count, std::string& type);

struct Partition {
  std::string name;
  std::string state;  // UP, DOWN, DRAIN, INACTIVE
  bool is_default = false;
  std::int64_t max_nodes = 0;  // 0: unlimited
  std::string max_time;        // "UNLIMITED", "1-00:00:00"
  std::vector<Node> nodes;     // every node of the partition, usable or not

  // The nodes a job can use now; the smallest of them sets the per-node
  // figures a plan is made for.
  std::vector<Node> usable_nodes() const;
  // "partition debug: 2 nodes (n1, n2) x 1 GPU, 1 CPU, 3.91 GiB"
  std::string describe() const;
};

// `scontrol show partition -o` lines and `scontrol show node -o` lines:
// the partition `name` (empty: the default partition) with its nodes.
Result<Partition> parse_partition(std::string_view partitions_text, std::string_view nodes_text,
                                  const std::string& name);

}  // namespace tailor::daemon::slurm
