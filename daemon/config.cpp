#include "daemon/config.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/args.h"
#include "dsl/yaml_tree.h"

namespace tailor::daemon {
namespace {

struct Key {
  const char* name;      // as in files and env (with '_')
  bool takes_value;
};

const std::vector<Key>& keys() {
  static const std::vector<Key> kKeys = {{"data_dir", true},
                                         {"listen", true},
                                         {"runner", true},
                                         {"spec_root", true},
                                         {"allowed_hosts", true},
                                         {"catalog_dir", true},
                                         {"gpus", true},
                                         {"memory_budget", true},
                                         {"cache_max_size", true},
                                         {"max_body", true},
                                         {"read_timeout", true},
                                         {"poll_interval", true},
                                         {"cancel_grace", true},
                                         {"retry_backoff", true},
                                         {"max_backoff", true},
                                         {"max_oom_replans", true},
                                         {"http_threads", true},
                                         {"workers", true},
                                         {"check_files", true},
                                         {"heartbeat_timeout", true},
                                         {"max_connections", true},
                                         {"max_streams", true},
                                         {"max_streams_per_token", true},
                                         {"executor", true},
                                         {"slurm_partition", true},
                                         {"slurm_account", true},
                                         {"slurm_qos", true},
                                         {"slurm_time_limit", true},
                                         {"slurm_options", true},
                                         {"slurm_bin_dir", true},
                                         {"slurm_poll_interval", true},
                                         {"tensorboard", true},
                                         {"mlflow_uri", true},
                                         {"mlflow_experiment", true}};
  return kKeys;
}

std::string flag_name(std::string key) {
  for (char& c : key) c = c == '_' ? '-' : c;
  return key;
}

std::string env_name(std::string key) {
  for (char& c : key) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return "TAILORD_" + key;
}

Result<double> parse_seconds(const std::string& v, const std::string& where) {
  try {
    std::size_t used = 0;
    const double d = std::stod(v, &used);
    if (used == v.size() && d >= 0) return d;
  } catch (...) {
  }
  return Status::invalid_argument(where + ": expected a non-negative number of seconds, got '" + v + "'");
}

Result<int> parse_int(const std::string& v, const std::string& where, int lo, int hi) {
  try {
    std::size_t used = 0;
    const int n = std::stoi(v, &used);
    if (used == v.size() && n >= lo && n <= hi) return n;
  } catch (...) {
  }
  return Status::invalid_argument(where + ": expected an integer in [" + std::to_string(lo) + ", " +
                                  std::to_string(hi) + "], got '" + v + "'");
}

// A value with where it came from, for messages.
struct Setting {
  std::string value;
  std::string where;
};

Status read_config_file(const std::string& path, std::map<std::string, Setting>& out) {
  std::ifstream f(path);
  if (!f) return Status::not_found("config file " + path + " cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  dsl::Diagnostics d;
  auto root = dsl::parse_yaml(ss.str(), path, d);
  if (!root || d.has_errors()) return Status::invalid_argument(d.to_string());
  if (root->is_null()) return Status::ok();
  if (!root->is_map()) return Status::invalid_argument(path + ": expected a map of settings");
  for (const auto& e : root->entries) {
    const std::string where = e.key_location.to_string() + ": " + e.key;
    bool known = false;
    for (const Key& k : keys()) known = known || e.key == k.name;
    if (!known) return Status::invalid_argument(where + ": unknown setting");
    std::string value;
    if (e.value.is_scalar()) {
      value = e.value.scalar;
    } else if (e.value.is_sequence()) {
      for (const auto& item : e.value.items) {
        if (!item.is_scalar()) return Status::invalid_argument(where + ": expected a list of strings");
        // slurm_options are separated by spaces (an option may hold a comma).
        value += (value.empty() ? "" : e.key == "slurm_options" ? " " : ",") + item.scalar;
      }
    } else {
      return Status::invalid_argument(where + ": expected a value");
    }
    out[e.key] = {value, where};
  }
  return Status::ok();
}

}  // namespace

const char* const kDaemonHelp = R"(usage: tailord --data-dir DIR [OPTIONS]
       tailord serve MODEL [OPTIONS]   (one model on OpenAI's completions API:
                                        tailord serve --help)

The Tailor daemon: a REST API (daemon/openapi.yaml) that queues, plans and
runs training jobs with tailor-runner, stores them in DIR/tailor.db and
serves Prometheus metrics at /metrics.

options (also TAILORD_<KEY> environment variables and keys of --config):
  --data-dir DIR        store, API token (DIR/token), job folders (DIR/jobs/ID)
  --listen HOST:PORT    default 127.0.0.1:8470; port 0 picks a free port; the
                        bound address is written to DIR/address
  --config FILE         YAML file of these settings (data_dir: ..., listen: ...)
  --runner PATH         tailor-runner (default: $TAILOR_RUNNER, beside tailord, PATH)
  --spec-root DIR       relative spec paths resolve here; every path a spec
                        names must lie inside it (default: working directory)
  --allowed-hosts LIST  extra Host names accepted, comma-separated (bound to
                        0.0.0.0 or ::, as in a container, any IP address is
                        accepted as Host too: probes and scrapes use it)
  --catalog-dir DIR     models.yaml and gpus.yaml instead of the built-in catalog
  --gpus SPEC           GPUs to schedule on, as in `tailor plan --gpus` ("0": none)
  --memory-budget SIZE  host memory CPU jobs share (default: 90% of RAM)
  --cache-max-size SIZE after each job, the runners' cache folder (tokenized
                        data, DPO references) is pruned to SIZE, least
                        recently used first, by `tailor-data cache prune`
                        (default: never pruned; `tailor cache`)
  --max-body SIZE       largest request body (default 1MiB)
  --read-timeout S      seconds to receive a request (default 30)
  --poll-interval S     supervisor tick (default 0.2)
  --cancel-grace S      SIGTERM to SIGKILL on cancel (default 10)
  --heartbeat-timeout S a runner silent this long (stopped, frozen) is lost:
                        killed and retried from its last checkpoint
                        (default 120; 0: never)
  --retry-backoff S     first retry delay, doubling per failure (default 5)
  --max-backoff S       longest retry delay (default 300)
  --max-oom-replans N   re-plans after out-of-memory per job (default 3)
  --http-threads N      threads reading and writing connections (default 2)
  --workers N           threads that plan and commit submissions and
                        deletions (default 16: each waits on its commit's
                        fsync while others plan)
  --max-connections N   connections open at once (default 512); at the limit
                        a new one closes the connection that has waited
                        longest for a request, never one being answered
  --max-streams N       event and log streams open at once (default 256),
                        apart from the connections; at the limit a new one
                        closes the oldest stream of the token that holds
                        the most, with a last event saying why
  --max-streams-per-token N
                        streams of one token (default 128): past it, a new
                        one closes that token's oldest
  --check-files BOOL    data files must exist at submission (default true)

executors (where a job runs; its spec's executor.kind decides, else this):
  --executor KIND       local (default): tailor-runner processes on this machine;
                        slurm: sbatch to a Slurm cluster whose nodes see DIR
                        and the spec root at the same paths; auto: Slurm for
                        what this machine cannot hold
  --slurm-partition P   partition to plan for and submit to (default: Slurm's)
  --slurm-account A     --slurm-qos Q     --slurm-time-limit T (e.g. 2:00:00)
  --slurm-options "--exclusive --constraint=a100"
                        extra sbatch options, whitespace-separated
  --slurm-bin-dir DIR   where sbatch, squeue, scontrol, sacct, scancel are (default PATH;
                        SLURM_CONF is passed on from the environment)
  --slurm-poll-interval S  read Slurm's queue at most this often (default 1)

experiment trackers (for jobs whose spec's tracking section leaves them unset):
  --tensorboard BOOL    every job writes TensorBoard event files into its folder
                        (default false; tracking.tensorboard.enabled: false opts out)
  --mlflow-uri URI      every job logs to this MLflow tracking server
                        (http(s)://host:port; credentials from MLFLOW_TRACKING_TOKEN
                        or MLFLOW_TRACKING_USERNAME/PASSWORD in tailord's environment)
  --mlflow-experiment NAME  their experiment (default "Default")
  -h, --help

Every endpoint but /healthz and /metrics needs "Authorization: Bearer TOKEN"
with the token in DIR/token (created on first start, mode 0600).
)";

Result<DaemonConfig> load_config(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                                 bool& help) {
  std::vector<FlagSpec> flags = {{"config", true}, {"help", false, false, 'h'}};
  for (const Key& k : keys()) flags.push_back({flag_name(k.name), k.takes_value});
  TAILOR_ASSIGN_OR_RETURN(Args args, Args::parse(argv, flags));
  help = args.has("help");
  if (!args.positional().empty()) return Status::invalid_argument("unexpected argument '" + args.positional()[0] + "'");

  std::map<std::string, Setting> settings;
  std::string config_file = args.get("config");
  if (config_file.empty()) {
    if (auto it = env.find("TAILORD_CONFIG"); it != env.end()) config_file = it->second;
  }
  if (!config_file.empty()) TAILOR_RETURN_IF_ERROR(read_config_file(config_file, settings));
  for (const Key& k : keys()) {
    if (auto it = env.find(env_name(k.name)); it != env.end()) settings[k.name] = {it->second, env_name(k.name)};
    if (args.has(flag_name(k.name))) settings[k.name] = {args.get(flag_name(k.name)), "--" + flag_name(k.name)};
  }

  DaemonConfig c;
  for (const auto& [key, s] : settings) {
    const std::string& v = s.value;
    const std::string where = s.where;
    if (key == "data_dir") c.data_dir = v;
    else if (key == "listen") c.listen = v;
    else if (key == "runner") c.runner = v;
    else if (key == "spec_root") c.spec_root = v;
    else if (key == "catalog_dir") c.catalog_dir = v;
    else if (key == "gpus") c.gpus = v;
    else if (key == "allowed_hosts") {
      std::stringstream ss(v);
      for (std::string h; std::getline(ss, h, ',');) {
        if (!h.empty()) c.allowed_hosts.push_back(h);
      }
    } else if (key == "memory_budget" || key == "max_body" || key == "cache_max_size") {
      auto b = parse_bytes(v);
      if (!b.is_ok()) return b.status().prefixed(where);
      if (b->count() <= 0) return Status::invalid_argument(where + ": must be positive");
      if (key == "memory_budget") c.memory_budget = *b;
      else if (key == "cache_max_size")
        c.cache_max_size = *b;
      else c.max_body_bytes = b->count();
    } else if (key == "read_timeout") {
      TAILOR_ASSIGN_OR_RETURN(c.read_timeout_seconds, parse_seconds(v, where));
    } else if (key == "poll_interval") {
      TAILOR_ASSIGN_OR_RETURN(c.poll_seconds, parse_seconds(v, where));
      if (c.poll_seconds < 0.01) return Status::invalid_argument(where + ": at least 0.01 seconds");
    } else if (key == "cancel_grace") {
      TAILOR_ASSIGN_OR_RETURN(c.cancel_grace_seconds, parse_seconds(v, where));
    } else if (key == "heartbeat_timeout") {
      TAILOR_ASSIGN_OR_RETURN(c.heartbeat_timeout_seconds, parse_seconds(v, where));
      if (c.heartbeat_timeout_seconds > 0 && c.heartbeat_timeout_seconds < 1) {
        return Status::invalid_argument(where + ": at least 1 second (or 0 to turn the check off)");
      }
    } else if (key == "retry_backoff") {
      TAILOR_ASSIGN_OR_RETURN(c.retry_backoff_seconds, parse_seconds(v, where));
    } else if (key == "max_backoff") {
      TAILOR_ASSIGN_OR_RETURN(c.max_backoff_seconds, parse_seconds(v, where));
    } else if (key == "max_oom_replans") {
      TAILOR_ASSIGN_OR_RETURN(c.max_oom_replans, parse_int(v, where, 0, 100));
    } else if (key == "http_threads") {
      TAILOR_ASSIGN_OR_RETURN(c.http_threads, parse_int(v, where, 1, 64));
    } else if (key == "workers") {
      TAILOR_ASSIGN_OR_RETURN(c.workers, parse_int(v, where, 1, 256));
    } else if (key == "max_connections") {
      TAILOR_ASSIGN_OR_RETURN(c.max_connections, parse_int(v, where, 2, 1 << 20));
    } else if (key == "max_streams") {
      TAILOR_ASSIGN_OR_RETURN(c.max_streams, parse_int(v, where, 1, 1 << 20));
    } else if (key == "max_streams_per_token") {
      TAILOR_ASSIGN_OR_RETURN(c.max_streams_per_token, parse_int(v, where, 1, 1 << 20));
    } else if (key == "executor") {
      bool known = false;
      for (const dsl::ExecutorKind k : {dsl::ExecutorKind::kLocal, dsl::ExecutorKind::kSlurm, dsl::ExecutorKind::kAuto}) {
        if (v == dsl::to_string(k)) {
          c.executor = k;
          known = true;
        }
      }
      if (!known) return Status::invalid_argument(where + ": expected local, slurm or auto, got '" + v + "'");
    } else if (key == "slurm_partition" || key == "slurm_account" || key == "slurm_qos") {
      if (v.empty() || v.find_first_of(" \t\n") != std::string::npos) {
        return Status::invalid_argument(where + ": expected a name without spaces, got '" + v + "'");
      }
      (key == "slurm_partition" ? c.slurm.partition : key == "slurm_account" ? c.slurm.account : c.slurm.qos) = v;
    } else if (key == "slurm_time_limit") {
      if (auto why = dsl::check_slurm_time_limit(v)) return Status::invalid_argument(where + ": " + *why + ", got '" + v + "'");
      c.slurm.time_limit = v;
    } else if (key == "slurm_options") {
      std::stringstream ss(v);
      for (std::string o; ss >> o;) {
        if (auto why = dsl::check_sbatch_option(o)) return Status::invalid_argument(where + ": '" + o + "': " + *why);
        c.slurm.sbatch_options.push_back(o);
      }
    } else if (key == "slurm_bin_dir") {
      c.slurm_bin_dir = v;
    } else if (key == "slurm_poll_interval") {
      TAILOR_ASSIGN_OR_RETURN(c.slurm_poll_seconds, parse_seconds(v, where));
      if (c.slurm_poll_seconds < 0.1) return Status::invalid_argument(where + ": at least 0.1 seconds");
    } else if (key == "tensorboard") {
      if (v == "true" || v == "1") c.tracking.tensorboard.enabled = true;
      else if (v == "false" || v == "0") c.tracking.tensorboard.enabled.reset();
      else return Status::invalid_argument(where + ": expected true or false, got '" + v + "'");
    } else if (key == "mlflow_uri") {
      if (v.rfind("http://", 0) != 0 && v.rfind("https://", 0) != 0) {
        return Status::invalid_argument(where + ": expected an http:// or https:// URI of an MLflow tracking server, got '" +
                                        v + "'");
      }
      c.tracking.mlflow.uri = v;
      c.tracking.mlflow.enabled = true;
    } else if (key == "mlflow_experiment") {
      if (v.empty()) return Status::invalid_argument(where + ": expected an experiment name");
      c.tracking.mlflow.experiment = v;
    } else if (key == "check_files") {
      if (v == "true" || v == "1") c.check_files = true;
      else if (v == "false" || v == "0") c.check_files = false;
      else return Status::invalid_argument(where + ": expected true or false, got '" + v + "'");
    }
  }
  if (help) return c;
  if (c.data_dir.empty()) return Status::invalid_argument("--data-dir is required (or TAILORD_DATA_DIR)");
  return c;
}

}  // namespace tailor::daemon
