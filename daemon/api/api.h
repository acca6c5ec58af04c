// The REST API v1 (daemon/openapi.yaml is its contract): request checks in
// order — Host/Origin (DNS rebinding), routing (404/405), bearer token
// (401) — then the handler; every error is {error, message, details}; every
// request is counted and timed in /metrics under its route pattern.
// Thread-safe: handlers share only thread-safe components.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "daemon/executor/slurm_cluster.h"
#include "daemon/planning/job_planning.h"
#include "daemon/api/download_links.h"
#include "daemon/api/generation.h"
#include "daemon/api/job_completions.h"
#include "daemon/api/job_exports.h"
#include "daemon/http/auth.h"
#include "daemon/http/server.h"
#include "daemon/http/sessions.h"
#include "daemon/http/tokens.h"
#include "daemon/http/message.h"
#include "daemon/http/router.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/scheduler/supervisor.h"
#include "daemon/store/job_store.h"

namespace tailor::daemon {

struct ApiContext {
  JobStore* store = nullptr;
  Supervisor* supervisor = nullptr;
  DaemonMetrics* metrics = nullptr;
  PlanningContext planning;
  TokenFiles* tokens = nullptr;  // null: every authenticated route is refused
  Sessions* sessions = nullptr;  // the web UI's sign-ins (sessions.h); null: bearer tokens only
  HostPolicy hosts{0, "", {}};
  std::int64_t host_budget_bytes = 0;
  std::string hardware_json;  // GET /v1/hardware
  slurm::Cluster* slurm = nullptr;       // null: no Slurm executor
  dsl::ExecutorKind default_executor = dsl::ExecutorKind::kLocal;  // --executor
  double started_at = 0;
  const HttpServer* server = nullptr;  // its connection figures go to /metrics
  double download_link_seconds = 600;  // how long a download link works
  std::string runner_path;  // tailor-runner, for POST /v1/jobs/{id}/generate and /completions
  std::string data_dir;     // their scratch files and logs go under data_dir/generate and data_dir/serve
};

// Requests whose work (planning a job, removing a job's folder, a model
// answering a completion) would hold an I/O thread: the server runs them on
// its workers.
bool runs_on_a_worker(const HttpRequest& r);

class Api {
 public:
  explicit Api(ApiContext context);
  HttpResponse handle(HttpRequest& request);
  const Router& router() const { return router_; }

 private:
  HttpResponse submit(HttpRequest& r);
  HttpResponse data_preview(HttpRequest& r);
  HttpResponse list(HttpRequest& r);
  HttpResponse get(HttpRequest& r);
  HttpResponse plan(HttpRequest& r);
  HttpResponse metrics_of(HttpRequest& r);
  HttpResponse events(HttpRequest& r);
  HttpResponse all_events(HttpRequest& r);
  HttpResponse logs(HttpRequest& r);
  HttpResponse cancel(HttpRequest& r);
  HttpResponse generate(HttpRequest& r);
  HttpResponse completions(HttpRequest& r);
  HttpResponse chat_completions(HttpRequest& r);
  HttpResponse exports(HttpRequest& r);
  HttpResponse retry(HttpRequest& r);
  HttpResponse files(HttpRequest& r);
  HttpResponse file_link(HttpRequest& r);
  HttpResponse archive(HttpRequest& r);
  HttpResponse download(HttpRequest& r);
  static double monotonic_seconds();
  std::string link_owner(const HttpRequest& r);
  HttpResponse remove(HttpRequest& r);
  HttpResponse sign_in(HttpRequest& r);
  HttpResponse sign_out(HttpRequest& r);
  HttpResponse session(HttpRequest& r);
  // What the request may do: its bearer token's scope, else its session's.
  // `by_cookie` says which.
  Access access_of(const HttpRequest& r, bool& by_cookie);

  ApiContext ctx_;
  Router router_;
  Generations generations_;
  JobCompletions completions_;
  JobExports exports_;
  DownloadLinks links_;
};

// A job as the API shows it.
// `output_dir`: its folder (metrics, events, checkpoints, the model).
std::string job_to_json(const JobRecord& job, const std::string& output_dir);

}  // namespace tailor::daemon
