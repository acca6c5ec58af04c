#include "daemon/daemon.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "daemon/api/api.h"
#include "daemon/http/errors.h"
#include "daemon/http/server.h"
#include "daemon/scheduler/supervisor.h"
#include "platform/executable.h"
#include "platform/files.h"
#include "platform/hardware_detect.h"
#include "strategies/hardware.h"

namespace tailor::daemon {
namespace {

namespace fs = std::filesystem;

}  // namespace

struct Daemon::Parts {
  int lock_fd = -1;
  std::unique_ptr<dsl::Catalog> catalog;
  std::unique_ptr<JobStore> store;
  std::unique_ptr<TokenFiles> tokens;
  std::unique_ptr<Sessions> sessions;
  std::unique_ptr<slurm::Cluster> slurm;
  DaemonMetrics metrics;
  std::unique_ptr<Supervisor> supervisor;
  std::atomic<Api*> api{nullptr};
  std::unique_ptr<Api> api_owner;
  std::unique_ptr<HttpServer> server;
  std::string address;

  ~Parts() {
    if (server) server->stop();
    if (supervisor) supervisor->stop();
    if (lock_fd >= 0) ::close(lock_fd);
  }
};

namespace {

// DATA/jobs made, DATA private to this user, and DATA/tailord.lock held for
// as long as this tailord runs.
Status open_data_folder(const fs::path& data, Daemon::Parts& parts) {
  std::error_code ec;
  fs::create_directories(data / "jobs", ec);
  if (ec) return Status::io_error("creating " + (data / "jobs").string() + ": " + ec.message());
  ::chmod(data.c_str(), 0700);
  parts.lock_fd = ::open((data / "tailord.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (parts.lock_fd < 0 || ::flock(parts.lock_fd, LOCK_EX | LOCK_NB) != 0) {
    return Status::failed_precondition("another tailord is using " + data.string() + " (tailord.lock is held)");
  }
  return Status::ok();
}

// The Slurm cluster of --executor slurm|auto, and the planner's view of its
// partitions.
Status attach_slurm(const DaemonConfig& config, const fs::path& data, Daemon::Parts& parts,
                    PlanningContext& planning) {
  // The job folders go into #SBATCH lines and must be the same path on
  // every node.
  if (data.string().find_first_of(" \t\n") != std::string::npos) {
    return Status::invalid_argument("executor " + std::string(dsl::to_string(config.executor)) +
                                    ": the data folder's path must not contain spaces (" + data.string() + ")");
  }
  slurm::ClientOptions co;
  co.bin_dir = config.slurm_bin_dir;
  parts.slurm = std::make_unique<slurm::Cluster>(co, config.slurm.partition);
  // Unavailable is not fatal: local jobs run, Slurm jobs are refused with
  // the reason until Slurm answers.
  if (Status probe = parts.slurm->probe(); probe.is_ok()) {
    log_info("tailord: Slurm executor: " + parts.slurm->describe());
  } else {
    log_error("tailord: Slurm executor unavailable: " + probe.message() +
              " (jobs for Slurm are refused until it answers; local jobs are unaffected)");
  }
  slurm::Cluster* exec = parts.slurm.get();
  // While Slurm is known to be down, submissions are refused at once; the
  // supervisor's poller asks again and lifts this when it answers.
  planning.slurm_partition = [exec](const std::string& name) -> Result<slurm::Partition> {
    if (!exec->available()) return Status::unavailable(exec->describe());
    return exec->partition(name);
  };
  return Status::ok();
}

struct Listen {
  std::string host;
  std::uint16_t port = 0;
};

// --listen HOST:PORT ([v6]:PORT).
Result<Listen> parse_listen(const std::string& listen) {
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos) return Status::invalid_argument("listen: expected HOST:PORT, got '" + listen + "'");
  std::string host_part = listen.substr(0, colon);
  if (host_part.size() >= 2 && host_part.front() == '[' && host_part.back() == ']') {
    host_part = host_part.substr(1, host_part.size() - 2);
  }
  int port = -1;
  try {
    std::size_t used = 0;
    port = std::stoi(listen.substr(colon + 1), &used);
    if (used != listen.size() - colon - 1) port = -1;
  } catch (...) {
  }
  if (port < 0 || port > 65535) return Status::invalid_argument("listen: bad port in '" + listen + "'");
  return Listen{host_part, static_cast<std::uint16_t>(port)};
}

SupervisorOptions supervisor_options(const DaemonConfig& config, const fs::path& data, const std::string& runner,
                                     const PlanningContext& planning, Bytes budget,
                                     const std::vector<strategies::Device>& gpus, slurm::Cluster* slurm) {
  SupervisorOptions so;
  so.data_dir = data.string();
  so.runner_path = runner;
  so.planning = planning;
  so.host_budget_bytes = budget.count();
  so.gpus = gpus;
  so.poll_seconds = config.poll_seconds;
  so.cancel_grace_seconds = config.cancel_grace_seconds;
  so.heartbeat_timeout_seconds = config.heartbeat_timeout_seconds;
  so.backoff_seconds = config.retry_backoff_seconds;
  so.max_backoff_seconds = config.max_backoff_seconds;
  so.max_oom_replans = config.max_oom_replans;
  so.slurm = slurm;
  if (config.cache_max_size) so.cache_max_bytes = config.cache_max_size->count();
  so.slurm_poll_seconds = config.slurm_poll_seconds;
  return so;
}

ServerOptions server_options(const DaemonConfig& config, const Listen& listen) {
  ServerOptions sopts;
  sopts.address = listen.host;
  sopts.port = listen.port;
  sopts.max_body_bytes = static_cast<std::size_t>(config.max_body_bytes);
  sopts.read_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(config.read_timeout_seconds * 1000));
  sopts.threads = config.http_threads;
  sopts.worker_threads = config.workers;
  sopts.offload = runs_on_a_worker;
  sopts.max_connections = config.max_connections;
  sopts.max_streams = config.max_streams;
  sopts.max_streams_per_owner = config.max_streams_per_token;
  return sopts;
}

// GET /v1/hardware: what this tailord plans for.
std::string hardware_json(const std::vector<strategies::Device>& gpus, const std::optional<Bytes>& host, Bytes budget,
                          const std::string& runner, const std::string& spec_root) {
  nlohmann::json hw = {{"cpu_only", gpus.empty()},
                       {"host_memory_bytes", host ? host->count() : 0},
                       {"memory_budget_bytes", budget.count()},
                       {"runner", runner},
                       {"spec_root", spec_root}};
  nlohmann::json gl = nlohmann::json::array();
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    gl.push_back({{"index", i},
                  {"name", gpus[i].name},
                  {"catalog_key", gpus[i].catalog_key},
                  {"memory_bytes", gpus[i].memory.count()},
                  {"free_memory_bytes", gpus[i].free_memory.count()},
                  {"bf16", gpus[i].bf16}});
  }
  hw["gpus"] = gl;
  return hw.dump();
}

}  // namespace

Daemon::Daemon(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {}
Daemon::~Daemon() { stop(); }

std::string Daemon::address() const { return parts_->address; }

void Daemon::stop() {
  if (parts_->server) parts_->server->stop();
  if (parts_->supervisor) parts_->supervisor->stop();
}

Result<std::unique_ptr<Daemon>> Daemon::start(const DaemonConfig& config) {
  auto parts = std::make_unique<Parts>();
  const fs::path data = fs::absolute(config.data_dir);
  TAILOR_RETURN_IF_ERROR(open_data_folder(data, *parts));
  TAILOR_ASSIGN_OR_RETURN(parts->tokens, TokenFiles::open((data / "token").string(), (data / "token.read").string()));
  TAILOR_ASSIGN_OR_RETURN(parts->sessions, Sessions::open((data / "sessions").string()));
  TAILOR_ASSIGN_OR_RETURN(const std::string runner, platform::find_executable("tailor-runner", config.runner, "TAILOR_RUNNER"));
  // cache_max_size is carried out by tailor-data: without it, refused here
  // rather than ignored.
  std::string cache_tool;
  if (config.cache_max_size) {
    auto tool = platform::find_executable("tailor-data", "", "TAILOR_DATA");
    if (!tool.is_ok()) return tool.status().prefixed("cache_max_size needs tailor-data");
    cache_tool = *tool;
  }

  if (!config.catalog_dir.empty()) {
    auto loaded = dsl::Catalog::load_dir(config.catalog_dir);
    if (!loaded.is_ok()) return loaded.status().prefixed("catalog_dir");
    parts->catalog = std::make_unique<dsl::Catalog>(std::move(loaded).value());
  }
  const dsl::Catalog& catalog = parts->catalog ? *parts->catalog : dsl::Catalog::builtin();
  std::vector<strategies::Device> gpus;
  if (!config.gpus.empty()) {
    auto parsed = strategies::parse_gpus_flag(config.gpus, catalog);
    if (!parsed.is_ok()) return parsed.status().prefixed("gpus");
    gpus = *parsed;
  } else {
    gpus = platform::detect_gpus(catalog);
  }
  const std::optional<Bytes> host = platform::detect_host_memory();
  const Bytes budget = config.memory_budget.value_or(
      Bytes(static_cast<std::int64_t>(static_cast<double>(host.value_or(Bytes::gib(8)).count()) * 0.9)));

  PlanningContext planning;
  planning.catalog = parts->catalog.get();
  planning.gpus = gpus;
  planning.host_memory = host;
  planning.cpu_native_bf16 = platform::detect_native_bf16();
  planning.cpu_model = platform::detect_cpu_model();
  planning.spec_root = fs::weakly_canonical(fs::absolute(config.spec_root.empty() ? "." : config.spec_root)).string();
  planning.check_files = config.check_files;
  planning.tracking = config.tracking;
  planning.calibration_path = (data / "calibration.db").string();
  planning.executor = config.executor;
  planning.slurm = config.slurm;
  if (config.executor != dsl::ExecutorKind::kLocal) TAILOR_RETURN_IF_ERROR(attach_slurm(config, data, *parts, planning));

  TAILOR_ASSIGN_OR_RETURN(parts->store, JobStore::open((data / "tailor.db").string()));
  SupervisorOptions so = supervisor_options(config, data, runner, planning, budget, gpus, parts->slurm.get());
  so.cache_tool = cache_tool;
  parts->supervisor = std::make_unique<Supervisor>(*parts->store, parts->metrics, std::move(so));
  TAILOR_RETURN_IF_ERROR(parts->supervisor->recover().prefixed("recovering jobs"));

  TAILOR_ASSIGN_OR_RETURN(const Listen listen, parse_listen(config.listen));
  Parts* p = parts.get();
  TAILOR_ASSIGN_OR_RETURN(parts->server, HttpServer::start(server_options(config, listen), [p](HttpRequest& req) {
                            Api* api = p->api.load();
                            if (!api) return error_response(ApiError::kUnavailable, "tailord is starting");
                            return api->handle(req);
                          }));

  ApiContext ctx;
  ctx.store = parts->store.get();
  ctx.supervisor = parts->supervisor.get();
  ctx.metrics = &parts->metrics;
  ctx.planning = planning;
  ctx.tokens = parts->tokens.get();
  ctx.sessions = parts->sessions.get();
  ctx.hosts = HostPolicy(parts->server->port(), parts->server->address(), config.allowed_hosts);
  ctx.host_budget_bytes = budget.count();
  ctx.hardware_json = hardware_json(gpus, host, budget, runner, planning.spec_root);
  ctx.slurm = parts->slurm.get();
  ctx.default_executor = config.executor;
  ctx.started_at = now_seconds();
  ctx.server = parts->server.get();
  ctx.runner_path = runner;
  ctx.data_dir = data.string();
  parts->api_owner = std::make_unique<Api>(std::move(ctx));
  parts->api.store(parts->api_owner.get());

  const std::string bound = parts->server->address();
  parts->address = (bound.find(':') != std::string::npos ? "[" + bound + "]" : bound) + ":" +
                   std::to_string(parts->server->port());
  TAILOR_RETURN_IF_ERROR(platform::write_file_atomic((data / "address").string(), parts->address + "\n"));
  parts->supervisor->start();
  log_info("tailord: listening on " + parts->address + ", data in " + data.string() + ", runner " + runner);
  // What a newcomer needs first: where the UI is and what signs them in.
  const bool everywhere = bound == "0.0.0.0" || bound == "::";
  const std::string ui_host =
      everywhere ? "127.0.0.1:" + std::to_string(parts->server->port()) : parts->address;
  log_info("tailord: web UI at http://" + ui_host + "/ui" + (everywhere ? " (or this machine's address)" : "") +
           "; sign in with the token in " + (data / "token").string() + " (read-only: " +
           (data / "token.read").string() + ")");
  return std::unique_ptr<Daemon>(new Daemon(std::move(parts)));
}

}  // namespace tailor::daemon
