// tailord's settings, from (lowest to highest precedence) defaults, a YAML
// config file (--config FILE or TAILORD_CONFIG), environment variables
// (TAILORD_<KEY>, e.g. TAILORD_DATA_DIR) and command-line flags
// (--data-dir). Keys are the same everywhere, with '_' in files and env
// and '-' in flags.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/units.h"
#include "dsl/job_spec.h"

namespace tailor::daemon {

struct DaemonConfig {
  std::string data_dir;                     // data_dir: store, token, jobs/ (required)
  std::string listen = "127.0.0.1:8470";    // listen: HOST:PORT; port 0 picks a free one (see DATA/address)
  std::string runner;                       // runner: tailor-runner path; default TAILOR_RUNNER, beside tailord, PATH
  std::string spec_root;                    // spec_root: relative spec paths resolve here and every path must lie
                                            // inside it; default: the working directory
  std::vector<std::string> allowed_hosts;   // allowed_hosts: extra Host names accepted (comma-separated)
  std::string catalog_dir;                  // catalog_dir: models.yaml + gpus.yaml instead of the built-in catalog
  std::string gpus;                         // gpus: as tailor plan --gpus ("0" = none); default: detected
  std::optional<Bytes> memory_budget;       // memory_budget: host memory for CPU jobs; default 90% of detected RAM
  std::optional<Bytes> cache_max_size;      // cache_max_size: the runners' cache folder pruned to this after each job
  std::int64_t max_body_bytes = 1 << 20;    // max_body: largest request body (e.g. 1MiB)
  double read_timeout_seconds = 30;         // read_timeout: seconds to receive one request
  double poll_seconds = 0.2;                // poll_interval: supervisor tick in seconds
  double cancel_grace_seconds = 10;         // cancel_grace: SIGTERM to SIGKILL, seconds
  double heartbeat_timeout_seconds = 120;   // heartbeat_timeout: a silent runner is lost; 0 = never
  double retry_backoff_seconds = 5;         // retry_backoff: first retry delay, doubling per failure
  double max_backoff_seconds = 300;         // max_backoff
  int max_oom_replans = 3;                  // max_oom_replans: out-of-memory re-plans per job
  int http_threads = 2;                     // http_threads: threads reading and writing connections
  // workers: threads that plan and commit submissions and deletions. More
  // than the cores: each waits on its commit's fsync, when another can
  // plan (measured: 64 clients on 2 cores, 2 workers 680-730 submissions/s,
  // 16 workers 920-966/s; docs/benchmarks.md).
  int workers = 16;
  int max_connections = 512;                // max_connections: open at once; the longest-waiting goes first
  int max_streams = 256;                    // max_streams: streams open at once, apart from connections
  int max_streams_per_token = 128;          // max_streams_per_token: streams of one kind of token
  bool check_files = true;                  // check_files: data files must exist at submission
  // executor: where jobs run whose spec does not say: local, slurm, or auto
  // (Slurm for what this machine cannot hold).
  dsl::ExecutorKind executor = dsl::ExecutorKind::kLocal;
  dsl::SlurmSpec slurm;                     // slurm_partition, slurm_account, slurm_qos, slurm_time_limit,
                                            // slurm_options (whitespace-separated --flag[=value]s)
  std::string slurm_bin_dir;                // slurm_bin_dir: where sbatch & co. are; default PATH
  double slurm_poll_seconds = 1;            // slurm_poll_interval: squeue at most this often
  // tensorboard, mlflow_uri, mlflow_experiment: trackers for jobs whose
  // spec leaves them unset (job_planning.h's apply_tracking_defaults).
  dsl::TrackingSpec tracking;
};

// Parses argv (without the program name) and `env`. Errors name the key
// and where it came from ("TAILORD_MAX_BODY: ...", "tailord.yaml:3:1: ...").
// `help` is set when --help was given.
Result<DaemonConfig> load_config(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                                 bool& help);

extern const char* const kDaemonHelp;

}  // namespace tailor::daemon
