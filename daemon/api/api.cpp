#include "daemon/api/api.h"

#include <bit>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <cctype>
#include <filesystem>
#include <optional>
#include <variant>

#include <nlohmann/json.hpp>

#include "core/json_writer.h"
#include "core/text.h"
#include "core/units.h"
#include "daemon/api/data_preview.h"
#include "daemon/api/event_stream.h"
#include "daemon/api/job_files.h"
#include "daemon/api/openapi_document.h"
#include "daemon/api/resource_json.h"
#include "daemon/api/web_ui.h"
#include "dsl/catalog.h"
#include "dsl/spec_fields.h"
#include "dsl/yaml_tree.h"
#include "daemon/executor/run_files.h"
#include "daemon/http/errors.h"
#include "runner/protocol/serve_protocol.h"

namespace tailor::daemon {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr std::int64_t kMaxPageSize = 500;

HttpResponse json_response(int status, const json& body) { return HttpResponse::json(status, json_text(body)); }

// A strong validator of a response body (a change detector, not a
// security measure), quoted as RFC 9110 wants. Eight bytes a step: each
// step is a bijection of the state for a given word and of the word for a
// given state, so two bodies that differ in one word always get different
// tags; the finaliser is MurmurHash3's fmix64. A page of jobs is 75 KB and
// a byte-wise FNV-1a over it was a tenth of the listing's time.
std::string etag_of(const std::string& body) {
  std::uint64_t h = 0xcbf29ce484222325ull ^ body.size();
  std::size_t i = 0;
  for (; i + 8 <= body.size(); i += 8) {
    std::uint64_t w;
    std::memcpy(&w, body.data() + i, 8);
    h = std::rotl((h ^ w) * 0x9e3779b97f4a7c15ull, 31);
  }
  std::uint64_t tail = 0;
  std::memcpy(&tail, body.data() + i, body.size() - i);
  h = std::rotl((h ^ tail) * 0x9e3779b97f4a7c15ull, 31);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  char buf[24];
  std::snprintf(buf, sizeof buf, "\"%016llx\"", static_cast<unsigned long long>(h));
  return buf;
}

// Whether If-None-Match (a list of tags, or *) names `tag`. A weak tag
// (W/"...") matches too: If-None-Match compares weakly (RFC 9110 13.1.2).
bool none_match_names(const std::string& header, const std::string& tag) {
  std::size_t at = 0;
  while (at < header.size()) {
    std::size_t end = header.find(',', at);
    if (end == std::string::npos) end = header.size();
    std::string t = header.substr(at, end - at);
    t.erase(0, t.find_first_not_of(" \t"));
    t.erase(t.find_last_not_of(" \t") + 1);
    if (t.rfind("W/", 0) == 0) t.erase(0, 2);
    if (t == "*" || t == tag) return true;
    at = end + 1;
  }
  return false;
}

// A query parameter given with no value ("?limit=") is malformed, not
// absent: a client that sends one meant something and gets told.
bool given(const HttpRequest& r, const std::string& key) { return r.query.count(key) != 0; }

// Content-Disposition for saving `path` under its last name (RFC 6266): a
// plain ASCII fallback, and the exact name percent-encoded (RFC 8187).
std::string attachment_header(const std::string& path) {
  const std::string name = path.substr(path.rfind('/') + 1);
  std::string plain, encoded;
  static const char kHex[] = "0123456789ABCDEF";
  for (const char ch : name) {
    const auto c = static_cast<unsigned char>(ch);
    plain += (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') ? '_' : ch;
    if (std::isalnum(c) || c == '.' || c == '-' || c == '_') {
      encoded += ch;
    } else {
      encoded += '%';
      encoded += kHex[c >> 4];
      encoded += kHex[c & 15];
    }
  }
  return "attachment; filename=\"" + plain + "\"; filename*=UTF-8''" + encoded;
}

Result<std::int64_t> int_param(const HttpRequest& r, const std::string& key, std::int64_t fallback, std::int64_t lo,
                               std::int64_t hi) {
  if (!given(r, key)) return fallback;
  const std::string v = r.query_value(key);
  std::int64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec == std::errc() && end == v.data() + v.size() && n >= lo && n <= hi) return n;
  return Status::invalid_argument("query parameter " + key + ": expected an integer in [" + std::to_string(lo) + ", " +
                                  std::to_string(hi) + "], got " + quote(v));
}

Result<bool> bool_param(const HttpRequest& r, const std::string& key) {
  if (!given(r, key)) return false;
  const std::string v = r.query_value(key);
  if (v == "false" || v == "0") return false;
  if (v == "true" || v == "1") return true;
  return Status::invalid_argument("query parameter " + key + ": expected true or false, got " + quote(v));
}

// FNV-1a (64 bit): tells two requests sent under one Idempotency-Key apart.
std::string request_hash(const std::string& body, const std::string& extra) {
  std::uint64_t h = 1469598103934665603ULL;
  for (const std::string* s : {&body, &extra}) {
    for (unsigned char c : *s) {
      h ^= c;
      h *= 1099511628211ULL;
    }
    h ^= 0xff;
    h *= 1099511628211ULL;
  }
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

json diagnostics_json(const dsl::Diagnostics& d) {
  json arr = json::array();
  for (const auto& item : d.items()) {
    arr.push_back({{"severity", item.severity == dsl::Severity::kError     ? "error"
                                : item.severity == dsl::Severity::kWarning ? "warning"
                                                                           : "note"},
                   {"file", item.location.file},
                   {"line", item.location.line},
                   {"column", item.location.column},
                   {"path", item.path},
                   {"message", item.message},
                   {"text", item.to_string()}});
  }
  return arr;
}

}  // namespace

std::string job_to_json(const JobRecord& job, const std::string& output_dir) {
  // Written straight out: a submission's answer carries the whole plan,
  // which a DOM would parse and print again.
  JsonWriter w(0);
  write_job(w, job, output_dir, json::accept(job.plan_json) ? std::string_view(job.plan_json) : "null");
  return w.str();
}

Api::Api(ApiContext context)
    : ctx_(std::move(context)),
      generations_(ctx_.runner_path, ctx_.data_dir.empty() ? std::string() : (fs::path(ctx_.data_dir) / "generate").string()),
      completions_(ctx_.runner_path, ctx_.data_dir.empty() ? std::string() : (fs::path(ctx_.data_dir) / "serve").string()),
      exports_(ctx_.runner_path, ctx_.data_dir.empty() ? std::string() : (fs::path(ctx_.data_dir) / "serve").string()) {
  auto bind = [this](HttpResponse (Api::*fn)(HttpRequest&)) {
    return [this, fn](HttpRequest& r) { return (this->*fn)(r); };
  };
  router_.add({"GET", "/healthz", false, [this](HttpRequest&) {
                 // Degraded while the store cannot be written: what tailord
                 // has seen happen is then only in its memory. As the last
                 // write or the supervisor's probe found it: a liveness
                 // check never waits on the store.
                 const StoreHealth h = ctx_.store->health();
                 if (!h.writable) {
                   HttpResponse r = json_response(503, {{"status", "degraded"},
                                                        {"reason", "the store cannot be written: " + h.error},
                                                        {"failing_since", h.failing_since},
                                                        {"uptime_seconds", now_seconds() - ctx_.started_at}});
                   r.headers.emplace_back("Retry-After", "1");
                   return r;
                 }
                 return json_response(200, {{"status", "ok"}, {"uptime_seconds", now_seconds() - ctx_.started_at}});
               }});
  router_.add({"GET", "/metrics", false, [this](HttpRequest&) {
                 ctx_.supervisor->publish_metrics();
                 const WriteStats w = ctx_.store->write_stats();
                 ctx_.metrics->set_store_writes(w.commits, w.writes, w.waiting);
                 if (ctx_.server) {
                   ctx_.metrics->set_http_connections(ctx_.server->connections(), ctx_.server->evicted_connections(),
                                                     ctx_.server->streams(), ctx_.server->evicted_streams());
                 }
                 HttpResponse r;
                 r.content_type = "text/plain; version=0.0.4; charset=utf-8";
                 r.body = ctx_.metrics->render();
                 return r;
               }});
  // The API's description, public like the liveness check.
  router_.add({"GET", "/openapi.yaml", false, [](HttpRequest&) {
                 HttpResponse r;
                 r.content_type = "application/yaml";
                 r.body = std::string(openapi_yaml());
                 return r;
               }});
  router_.add({"GET", "/openapi.json", false, [](HttpRequest&) {
                 HttpResponse r;
                 r.body = openapi_json();
                 return r;
               }});
  // The web UI: / leads to it; its page and files need no token.
  router_.add({"GET", "/", false, [](HttpRequest&) {
                 HttpResponse r;
                 r.status = 302;
                 r.content_type = "text/plain; charset=utf-8";
                 r.body = "the web UI is at /ui\n";
                 r.headers.emplace_back("Location", "/ui");
                 return r;
               }});
  router_.add({"GET", "/ui", false, [](HttpRequest&) { return *web_ui_file("index.html"); }});
  router_.add({"GET", "/ui/{file}", false, [](HttpRequest& r) {
                 auto f = web_ui_file(r.params["file"]);
                 if (!f) return error_response(ApiError::kNotFound, "no such file of the web UI: " + quote(r.params["file"]));
                 return *f;
               }});
  // The job spec's JSON Schema (`tailor schema`) with this daemon's catalog
  // names as examples: the web UI's editor completes keys and values from
  // it. A description, public like the API's.
  router_.add({"GET", "/v1/spec-schema", false,
               [schema = dsl::job_spec_json_schema(ctx_.planning.catalog ? ctx_.planning.catalog
                                                                         : &dsl::Catalog::builtin())](HttpRequest&) {
                 HttpResponse r;
                 r.content_type = "application/schema+json";
                 r.body = schema;
                 return r;
               }});
  router_.add({"GET", "/v1/hardware", true, [this](HttpRequest&) {
                 json hw = json::parse(ctx_.hardware_json);
                 json slurm = {{"configured", ctx_.slurm != nullptr}};
                 if (ctx_.slurm) {
                   slurm["available"] = ctx_.slurm->available();
                   slurm["partition"] = ctx_.slurm->default_partition();
                   slurm["status"] = ctx_.slurm->describe();
                 }
                 hw["executors"] = {{"default", dsl::to_string(ctx_.default_executor)}, {"slurm", slurm}};
                 return HttpResponse::json(200, json_text(hw));
               }});
  router_.add({"POST", "/v1/jobs", true, bind(&Api::submit)});
  // Reads the spec's data, writes nothing that stays: a read-only token may.
  router_.add({"POST", "/v1/data/preview", true, bind(&Api::data_preview), /*reads_only=*/true});
  router_.add({"GET", "/v1/jobs", true, bind(&Api::list)});
  router_.add({"GET", "/v1/jobs/{id}", true, bind(&Api::get)});
  router_.add({"GET", "/v1/jobs/{id}/plan", true, bind(&Api::plan)});
  router_.add({"GET", "/v1/jobs/{id}/metrics", true, bind(&Api::metrics_of)});
  router_.add({"GET", "/v1/jobs/{id}/events", true, bind(&Api::events)});
  router_.add({"GET", "/v1/events", true, bind(&Api::all_events)});
  router_.add({"GET", "/v1/jobs/{id}/logs", true, bind(&Api::logs)});
  router_.add({"GET", "/v1/jobs/{id}/files", true, bind(&Api::files)});
  router_.add({"GET", "/v1/jobs/{id}/archive", true, bind(&Api::archive)});
  router_.add({"POST", "/v1/jobs/{id}/files/link", true, bind(&Api::file_link), /*reads_only=*/true});
  // The link is the credential: no token, so a browser's own download
  // manager can fetch it.
  router_.add({"GET", "/v1/downloads/{link}", false, bind(&Api::download)});
  router_.add({"POST", "/v1/jobs/{id}/cancel", true, bind(&Api::cancel)});
  router_.add({"POST", "/v1/jobs/{id}/generate", true, bind(&Api::generate)});
  router_.add({"POST", "/v1/jobs/{id}/completions", true, bind(&Api::completions)});
  router_.add({"POST", "/v1/jobs/{id}/chat/completions", true, bind(&Api::chat_completions)});
  router_.add({"POST", "/v1/jobs/{id}/exports", true, bind(&Api::exports)});
  router_.add({"POST", "/v1/jobs/{id}/retry", true, bind(&Api::retry)});
  router_.add({"DELETE", "/v1/jobs/{id}", true, bind(&Api::remove)});
  // The web UI's sign-in (sessions.h): the token is the credential here.
  router_.add({"POST", "/v1/session", false, bind(&Api::sign_in)});
  router_.add({"DELETE", "/v1/session", false, bind(&Api::sign_out)});
  router_.add({"GET", "/v1/session", true, bind(&Api::session)});
}

Access Api::access_of(const HttpRequest& r, bool& by_cookie) {
  by_cookie = false;
  if (!ctx_.tokens) return Access::kNone;
  const Access bearer = ctx_.tokens->access(r);
  if (bearer != Access::kNone || !ctx_.sessions) return bearer;
  const auto s = ctx_.sessions->find(r, static_cast<std::int64_t>(now_seconds()));
  if (!s || !ctx_.tokens->holds(s->access, s->fingerprint)) return Access::kNone;
  by_cookie = true;
  return s->access;
}

HttpResponse Api::handle(HttpRequest& request) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string route = "unmatched";
  HttpResponse res;
  std::string why;
  if (!ctx_.hosts.allows(request, why)) {
    res = error_response(ApiError::kForbiddenHost, why);
  } else {
    const Router::Match m = router_.match(request);
    if (!m.route) {
      if (m.status == 405) {
        res = error_response(ApiError::kMethodNotAllowed, request.method + " is not allowed on " + request.path,
                             json_text(json({{"allow", m.allow}})));
        res.headers.emplace_back("Allow", m.allow);
      } else {
        res = error_response(ApiError::kNotFound, "no such endpoint: " + request.path);
      }
    } else {
      route = m.route->pattern;
      bool by_cookie = false;
      const Access access = m.route->authenticated ? access_of(request, by_cookie) : Access::kNone;
      const bool changes = request.method != "GET" && request.method != "HEAD";
      if (m.route->authenticated && access == Access::kNone) {
        res = error_response(ApiError::kUnauthorized, "missing or wrong bearer token (see DATA_DIR/token)");
        res.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"tailord\"");
      } else if (by_cookie && changes && request.header("origin").empty()) {
        // A session's cookie goes out with whatever asks for it from this
        // origin; a change must also say where it comes from, which the
        // Host policy has checked above (a browser always sends Origin on
        // such requests).
        res = error_response(ApiError::kForbidden,
                             "a request signed in by the web UI's session must carry an Origin header");
      } else if (m.route->authenticated && access == Access::kRead && request.method != "GET" &&
                 !m.route->reads_only) {
        res = error_response(ApiError::kForbidden,
                             "this token may only read (DATA_DIR/token.read); " + request.method + " " + m.route->pattern +
                                 " needs the admin token (DATA_DIR/token)");
      } else {
        res = m.route->handler(request);
        if (res.stream) {
          // The stream budget is per kind of token: a read-only token's
          // streams cannot crowd out the admin's.
          res.stream_owner = access == Access::kAdmin ? "admin" : "read";
          if (!res.stream_farewell && res.content_type == "text/event-stream") res.stream_farewell = stream_closed_event;
        }
        // Conditional reads: a poller that sends back the ETag it had gets
        // 304 and no body while nothing changed.
        if (request.method == "GET" && res.status == 200 && !res.stream && !res.file && m.route->authenticated) {
          const std::string tag = etag_of(res.body);
          res.headers.emplace_back("ETag", tag);
          if (none_match_names(request.header("if-none-match"), tag)) {
            res.status = 304;
            res.body.clear();
          }
        }
      }
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ctx_.metrics->observe_request(request.method, route, res.status, seconds);
  return res;
}

namespace {

// A job spec's request body: YAML or JSON, not empty.
std::optional<HttpResponse> refuse_spec_body(const HttpRequest& r) {
  std::string type = r.header("content-type");
  type = type.substr(0, type.find(';'));
  static const char* kTypes[] = {"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml",
                                 "application/json", "text/plain", ""};
  if (std::find(std::begin(kTypes), std::end(kTypes), type) == std::end(kTypes)) {
    return error_response(ApiError::kUnsupportedMediaType,
                          "send the job spec as application/yaml or application/json, not " + type);
  }
  if (r.body.find_first_not_of(" \t\r\n") == std::string::npos) {
    return error_response(ApiError::kInvalidSpec, "empty request body: expected a job spec");
  }
  return std::nullopt;
}

}  // namespace

HttpResponse Api::submit(HttpRequest& r) {
  if (auto refused = refuse_spec_body(r)) return std::move(*refused);
  auto dry = bool_param(r, "dry_run");
  if (!dry.is_ok()) return error_response(dry.status());
  std::optional<std::int64_t> memory_limit;
  if (given(r, "memory_limit")) {
    auto b = parse_bytes(r.query_value("memory_limit"));
    if (!b.is_ok()) return error_response(Status::invalid_argument("query parameter memory_limit: " + b.status().message()));
    if (b->count() <= 0) return error_response(Status::invalid_argument("query parameter memory_limit: must be positive"));
    memory_limit = b->count();
  }
  const std::string key = r.header("idempotency-key");
  const bool sent_empty = key.empty() && r.headers.count("idempotency-key") != 0;
  if (sent_empty || key.size() > 200 ||
      std::any_of(key.begin(), key.end(), [](char c) { return c < 0x21 || c > 0x7e; })) {
    return error_response(ApiError::kInvalidIdempotencyKey, "Idempotency-Key: at most 200 visible ASCII characters");
  }
  // A dry run is a what-if: a preset plans without its weights.
  auto planned = load_and_plan(r.body, "<request>", ctx_.planning, {}, *dry ? PlanPurpose::kWhatIf : PlanPurpose::kTrain);
  if (auto* e = std::get_if<PlanningError>(&planned)) {
    if (e->status.code() == StatusCode::kInvalidArgument) {
      return error_response(ApiError::kInvalidSpec, e->status.message(),
                            json_text(json({{"diagnostics", diagnostics_json(e->diagnostics)}})));
    }
    // Slurm cannot be asked now: try again later.
    if (e->status.code() == StatusCode::kUnavailable) return error_response(e->status);
    json details = json::object();
    if (e->plan) {
      details["shortfall_bytes"] = e->plan->shortfall.count() + e->plan->host_shortfall.count();
      details["smallest_fitting_gpu"] = e->plan->smallest_fitting_gpu;
    }
    return error_response(ApiError::kDoesNotFit, e->status.message(), json_text(details));
  }
  PlannedJob& job = std::get<PlannedJob>(planned);
  if (*dry) {
    return HttpResponse::json(200, job.plan_json);
  }
  const std::int64_t reserve = estimated_job_bytes(job.plan, memory_limit);
  const std::int64_t gpus = job.plan.on_cpu ? 0 : job.plan.chosen.strategy.num_gpus;
  if (job.executor == dsl::ExecutorKind::kLocal && gpus == 0 && reserve > ctx_.host_budget_bytes) {
    return error_response(ApiError::kDoesNotFit,
                          job.spec.name + " needs " + Bytes(reserve).to_string() +
                              " of host memory; tailord's budget for CPU jobs is " +
                              Bytes(ctx_.host_budget_bytes).to_string() + " (see --memory-budget)",
                          json_text(json({{"shortfall_bytes", reserve - ctx_.host_budget_bytes}})));
  }
  NewJob nj;
  nj.name = job.spec.name;
  nj.priority = job.spec.priority;
  nj.spec_text = r.body;
  nj.spec_json = dsl::emit_json(dsl::write_job_spec(job.spec), 0);  // as the plan document embeds it
  nj.labels = job.spec.labels;
  nj.plan_json = job.plan_json;
  nj.estimated_bytes = reserve;
  nj.gpus_needed = gpus;
  nj.memory_limit_bytes = memory_limit;
  nj.retries = job.spec.retries;
  nj.executor = job.executor;
  nj.idempotency_key = key;
  nj.request_hash = request_hash(r.body, r.query_value("memory_limit"));
  auto made = ctx_.store->create(nj);
  if (!made.is_ok()) {
    if (made.status().code() == StatusCode::kFailedPrecondition) {
      return error_response(ApiError::kIdempotencyKeyReused, made.status().message());
    }
    return error_response(made.status());
  }
  HttpResponse res = HttpResponse::json(made->created ? 201 : 200, job_to_json(made->job, ctx_.supervisor->job_dir(made->job.id)));
  res.headers.emplace_back("Location", "/v1/jobs/" + made->job.id);
  if (!made->created) res.headers.emplace_back("Idempotent-Replayed", "true");
  if (made->created) {
    ctx_.metrics->add_submitted();
    ctx_.supervisor->wake();
  }
  return res;
}

HttpResponse Api::data_preview(HttpRequest& r) {
  if (auto refused = refuse_spec_body(r)) return std::move(*refused);
  auto n = int_param(r, "n", 3, 1, 20);
  if (!n.is_ok()) return error_response(n.status());
  // Checked as a submission is: paths from the spec root, nothing outside it.
  const dsl::LoadedSpec loaded = load_checked_spec(r.body, "<request>", ctx_.planning);
  if (!loaded.ok()) {
    std::string text = loaded.diagnostics.to_string();
    while (!text.empty() && text.back() == '\n') text.pop_back();
    return error_response(ApiError::kInvalidSpec, text,
                          json_text(json({{"diagnostics", diagnostics_json(loaded.diagnostics)}})));
  }
  auto preview = preview_data_json(*loaded.spec, *n, ctx_.planning.spec_root,
                                   ctx_.data_dir.empty() ? std::string() : (fs::path(ctx_.data_dir) / "preview").string());
  if (!preview.is_ok()) {
    if (preview.status().code() == StatusCode::kInvalidArgument) {
      return error_response(ApiError::kInvalidSpec, preview.status().message());
    }
    return error_response(preview.status());
  }
  HttpResponse res;
  res.body = std::move(*preview);
  return res;
}

bool runs_on_a_worker(const HttpRequest& r) {
  // A sign-in writes the sessions file with fsync; a completion waits on a
  // model, an export on a runner process.
  auto ends_with = [&](std::string_view s) {
    return r.path.size() > s.size() && r.path.compare(r.path.size() - s.size(), s.size(), s) == 0;
  };
  const bool model = ends_with("/completions") || ends_with("/exports");
  return (r.method == "POST" && (r.path == "/v1/jobs" || r.path == "/v1/data/preview" || r.path == "/v1/session" || model)) ||
         r.method == "DELETE";
}

HttpResponse Api::list(HttpRequest& r) {
  JobFilter f;
  if (given(r, "state")) {
    const std::string s = r.query_value("state");
    f.state = parse_job_state(s);
    if (!f.state) {
      return error_response(Status::invalid_argument(
          "query parameter state: expected queued, planning, running, succeeded, failed or cancelled, got " + quote(s)));
    }
  }
  // label=key=value[,key=value...]: all must match.
  if (given(r, "label")) {
    const std::string l = r.query_value("label");
    std::size_t start = 0;
    while (start <= l.size()) {
      const auto comma = l.find(',', start);
      const std::string one = l.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      const auto eq = one.find('=');
      if (eq == std::string::npos || eq == 0) {
        return error_response(Status::invalid_argument("query parameter label: expected key=value, got " + quote(one)));
      }
      f.labels.emplace_back(one.substr(0, eq), one.substr(eq + 1));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    // No job has more labels, and each pair is a subquery of the store's.
    if (f.labels.size() > dsl::kMaxLabels) {
      return error_response(Status::invalid_argument("query parameter label: " + std::to_string(f.labels.size()) +
                                                     " key=value pairs; at most " + std::to_string(dsl::kMaxLabels) +
                                                     ", as many as a job has labels"));
    }
  }
  auto limit = int_param(r, "limit", 50, 1, kMaxPageSize);
  if (!limit.is_ok()) return error_response(limit.status());
  auto after = int_param(r, "after", 0, 0, INT64_MAX);
  if (!after.is_ok()) return error_response(after.status());
  auto full = bool_param(r, "full_plan");
  if (!full.is_ok()) return error_response(full.status());
  f.limit = *limit;
  f.after_seq = *after;
  f.full_plan = *full;
  auto page = ctx_.store->list(f);
  if (!page.is_ok()) return error_response(page.status());
  // Written straight out: a page is the API's most frequent answer, and a
  // DOM per job cost more than the store's query.
  JsonWriter w(0);
  w.reserve(page->jobs.size() * 2048 + 64);
  w.begin_object().key("jobs").begin_array();
  for (const auto& j : page->jobs) {
    // The summary is JSON by construction (the store's trigger); a whole
    // document is checked before it is written into the page.
    const bool is_json = !*full || json::accept(j.plan_json);
    write_job(w, j, ctx_.supervisor->job_dir(j.id), is_json ? j.plan_json : "null", j.seq);
  }
  w.end_array().key("next_after");
  if (page->next_after) {
    w.value(*page->next_after);
  } else {
    w.null();
  }
  w.end_object();
  return HttpResponse::json(200, w.take());
}

namespace {

// Each attempt's strategy and estimate (its "runner started" event), its
// measured peak (its steps, or the allocation refused when it ran out of
// memory) and how it ended, so that an estimate is compared with its own
// attempt's measurement.
Result<json> attempt_history(JobStore& store, const std::string& id) {
  TAILOR_ASSIGN_OR_RETURN(const std::vector<EventRecord> events, store.events(id));
  TAILOR_ASSIGN_OR_RETURN(const auto peaks, store.peak_by_attempt(id));
  std::map<std::int64_t, json> by_attempt;
  for (const EventRecord& e : events) {
    const json data = e.data_json.empty() ? json() : json::parse(e.data_json, nullptr, false);
    if (!data.is_object() || !data.contains("attempt") || !data["attempt"].is_number_integer()) continue;
    json& a = by_attempt[data["attempt"].get<std::int64_t>()];
    if (e.to_state == "running") {
      a["strategy"] = data.value("strategy", "");
      a["estimated_bytes"] = data.value("estimated_bytes", std::int64_t{0});
    } else if (e.kind == "replan") {
      a["outcome"] = "out_of_memory";
      a["oom_at_bytes"] = data.value("measured_peak_bytes", std::int64_t{0});
      a["budget_bytes"] = data.value("budget_bytes", std::int64_t{0});
    }
  }
  json out = json::array();
  for (auto& [attempt, a] : by_attempt) {
    a["attempt"] = attempt;
    if (auto it = peaks.find(attempt); it != peaks.end()) a["measured_peak_bytes"] = it->second;
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace

HttpResponse Api::get(HttpRequest& r) {
  auto job = ctx_.store->get(r.params["id"]);
  if (!job.is_ok()) return error_response(job.status());
  json o = job_json(*job, ctx_.supervisor->job_dir(job->id));
  auto history = attempt_history(*ctx_.store, job->id);
  if (!history.is_ok()) return error_response(history.status());
  o["attempt_history"] = std::move(*history);
  return json_response(200, o);
}



HttpResponse Api::plan(HttpRequest& r) {
  auto job = ctx_.store->get(r.params["id"]);
  if (!job.is_ok()) return error_response(job.status());
  return HttpResponse::json(200, job->plan_json);
}

HttpResponse Api::metrics_of(HttpRequest& r) {
  auto since = int_param(r, "since_step", 0, 0, INT64_MAX);
  if (!since.is_ok()) return error_response(since.status());
  auto limit = int_param(r, "limit", 1000, 1, 100000);
  if (!limit.is_ok()) return error_response(limit.status());
  const std::string id = r.params["id"];
  auto job = ctx_.store->get(id);
  if (!job.is_ok()) return error_response(job.status());
  auto rows = ctx_.store->metrics(id, *since, *limit);
  if (!rows.is_ok()) return error_response(rows.status());
  json arr = json::array();
  for (const StepMetric& m : *rows) arr.push_back(step_json(m));
  return json_response(200, {{"job_id", id}, {"metrics", arr}});
}

namespace {

// Where a stream resumes: a reconnecting EventSource says where it stopped
// (Last-Event-ID), else `fallback` (the after_id parameter).
Result<std::int64_t> last_event_id(const HttpRequest& r, std::int64_t fallback) {
  if (r.headers.count("last-event-id") == 0) return fallback;
  const std::string last = r.header("last-event-id");
  std::int64_t from = 0;
  const auto [end, ec] = std::from_chars(last.data(), last.data() + last.size(), from);
  if (ec != std::errc() || end != last.data() + last.size() || from < 0) {
    return Status::invalid_argument("Last-Event-ID: expected an event id, got " + quote(last));
  }
  return from;
}

}  // namespace

HttpResponse Api::all_events(HttpRequest& r) {
  auto follow = bool_param(r, "follow");
  if (!follow.is_ok()) return error_response(follow.status());
  auto limit = int_param(r, "limit", 100, 1, kMaxPageSize);
  if (!limit.is_ok()) return error_response(limit.status());
  // A stream starts at what is new unless told where (a page, at the start).
  const bool from_given = given(r, "after_id") || r.headers.count("last-event-id") != 0;
  auto after = int_param(r, "after_id", 0, 0, INT64_MAX);
  if (!after.is_ok()) return error_response(after.status());
  auto from = last_event_id(r, *after);
  if (!from.is_ok()) return error_response(from.status());
  if (*follow) {
    std::int64_t start = *from;
    if (!from_given) {
      auto newest = ctx_.store->last_event_id();
      if (!newest.is_ok()) return error_response(newest.status());
      start = *newest;
    }
    HttpResponse res;
    res.content_type = "text/event-stream";
    res.headers.emplace_back("Cache-Control", "no-cache");
    res.stream = fleet_event_stream(*ctx_.store, start);
    return res;
  }
  auto rows = ctx_.store->all_events(*from, *limit);
  if (!rows.is_ok()) return error_response(rows.status());
  json arr = json::array();
  for (const EventRecord& e : *rows) arr.push_back(event_json(e));
  json next = rows->size() == static_cast<std::size_t>(*limit) ? json(rows->back().id) : json(nullptr);
  return json_response(200, {{"events", arr}, {"next_after", next}});
}

HttpResponse Api::events(HttpRequest& r) {
  auto after = int_param(r, "after_id", 0, 0, INT64_MAX);
  if (!after.is_ok()) return error_response(after.status());
  auto follow = bool_param(r, "follow");
  if (!follow.is_ok()) return error_response(follow.status());
  // Checked with or without follow: a malformed parameter is an error
  // even where it would not be used.
  auto since = int_param(r, "since_step", -1, 0, INT64_MAX);
  if (!since.is_ok()) return error_response(since.status());
  auto resumed = last_event_id(r, *after);
  if (!resumed.is_ok()) return error_response(resumed.status());
  const std::int64_t from = *resumed;
  const std::string id = r.params["id"];
  auto job = ctx_.store->get(id);
  if (!job.is_ok()) return error_response(job.status());
  if (*follow) {
    const std::int64_t since_step = *since >= 0 ? *since : job->last_step.value_or(0);
    HttpResponse res;
    res.content_type = "text/event-stream";
    res.headers.emplace_back("Cache-Control", "no-cache");
    res.stream = job_event_stream(*ctx_.store, id, ctx_.supervisor->job_dir(id), from, since_step);
    return res;
  }
  auto rows = ctx_.store->events(id, *after);
  if (!rows.is_ok()) return error_response(rows.status());
  json arr = json::array();
  for (const EventRecord& e : *rows) arr.push_back(event_json(e));
  return json_response(200, {{"job_id", id}, {"events", arr}});
}

HttpResponse Api::logs(HttpRequest& r) {
  auto follow = bool_param(r, "follow");
  if (!follow.is_ok()) return error_response(follow.status());
  auto offset = int_param(r, "offset", 0, 0, INT64_MAX);
  if (!offset.is_ok()) return error_response(offset.status());
  const std::string id = r.params["id"];
  auto job = ctx_.store->get(id);
  if (!job.is_ok()) return error_response(job.status());
  const std::string path = (fs::path(ctx_.supervisor->job_dir(id)) / "runner.log").string();
  HttpResponse res;
  res.content_type = "text/plain; charset=utf-8";
  if (!*follow) {
    std::int64_t off = *offset;
    auto text = read_bytes_from(path, off, 16 << 20);
    if (!text.is_ok()) return error_response(text.status());
    res.body = std::move(*text);
    res.headers.emplace_back("X-Log-Offset", std::to_string(off));
    return res;
  }
  // Streams until the job has finished and the log is read to its end.
  JobStore* store = ctx_.store;
  auto pos = std::make_shared<std::int64_t>(*offset);
  res.stream = [store, id, path, pos](std::string& out) {
    auto chunk = read_bytes_from(path, *pos, 256 << 10);
    if (!chunk.is_ok()) return false;
    out = std::move(*chunk);
    if (!out.empty()) return true;
    auto j = store->get(id);
    return j.is_ok() && !is_terminal(j->state);
  };
  return res;
}

HttpResponse Api::files(HttpRequest& r) {
  const std::string id = r.params["id"];
  auto job = ctx_.store->get(id);
  if (!job.is_ok()) return error_response(job.status());
  if (!given(r, "path")) return list_job_files(id, ctx_.supervisor->job_dir(id));
  const std::string path = r.query_value("path");
  if (path.empty()) return error_response(Status::invalid_argument("query parameter path: empty; leave it out to list the job's files"));
  return job_file(ctx_.supervisor->job_dir(id), path, r);
}

HttpResponse Api::archive(HttpRequest& r) {
  const std::string id = r.params["id"];
  auto job = ctx_.store->get(id);
  if (!job.is_ok()) return error_response(job.status());
  return job_archive(id, ctx_.supervisor->job_dir(id), r.query_value("path"));
}

HttpResponse Api::file_link(HttpRequest& r) {
  const std::string id = r.params["id"];
  auto job = ctx_.store->get(id);
  if (!job.is_ok()) return error_response(job.status());
  const std::string path = r.query_value("path");
  if (path.empty()) {
    return error_response(Status::invalid_argument(
        "query parameter path: required: a file of the job's folder (GET /v1/jobs/{id}/files lists them)"));
  }
  const std::string archive = r.query_value("archive", "false");
  if (archive != "true" && archive != "false") {
    return error_response(Status::invalid_argument("query parameter archive: expected true or false, got '" + archive + "'"));
  }
  if (archive == "true") {
    // A folder as one tar archive: made only for one that can be archived.
    const HttpResponse tar = job_archive(id, ctx_.supervisor->job_dir(id), path);
    if (tar.status != 200) return tar;
    auto link = links_.make(id, path, link_owner(r), monotonic_seconds(), ctx_.download_link_seconds,
                            /*archive=*/true);
    if (!link.is_ok()) return error_response(link.status());
    std::uint64_t bytes = 0;
    for (const BodyPart& p : tar.file->parts) bytes += p.size();
    return json_response(201, {{"url", "/v1/downloads/" + link->id},
                               {"job_id", id},
                               {"path", path},
                               {"archive", true},
                               {"bytes", bytes},
                               {"expires_at", time_json(now_seconds() + ctx_.download_link_seconds)}});
  }
  // The download's own checks, now: a link is made only for a file that
  // can be downloaded (inside the folder, regular, the job's output).
  const HttpRequest plain;
  const HttpResponse file = job_file(ctx_.supervisor->job_dir(id), path, plain);
  if (file.status != 200) return file;
  auto link = links_.make(id, path, link_owner(r), monotonic_seconds(), ctx_.download_link_seconds);
  if (!link.is_ok()) return error_response(link.status());
  return json_response(201, {{"url", "/v1/downloads/" + link->id},
                             {"job_id", id},
                             {"path", path},
                             {"bytes", file.file ? file.file->length : file.body.size()},
                             {"expires_at", time_json(now_seconds() + ctx_.download_link_seconds)}});
}

// Download links expire on the monotonic clock: a wall clock stepped back
// does not revive one.
double Api::monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A link's owner is the kind of token that made it: each kind has its own
// quota of links (download_links.h).
std::string Api::link_owner(const HttpRequest& r) {
  bool by_cookie = false;
  return access_of(r, by_cookie) == Access::kAdmin ? "admin" : "read";
}

HttpResponse Api::download(HttpRequest& r) {
  const std::optional<DownloadLink> link = links_.find(r.params["link"], monotonic_seconds());
  if (!link) {
    return error_response(ApiError::kNotFound,
                          "no such download link: it expired or was never made (POST /v1/jobs/{id}/files/link)");
  }
  if (!ctx_.store->get(link->job_id).is_ok()) {
    return error_response(ApiError::kNotFound, "the job " + link->job_id + " of this link is gone");
  }
  HttpResponse res = link->archive ? job_archive(link->job_id, ctx_.supervisor->job_dir(link->job_id), link->path)
                                    : job_file(ctx_.supervisor->job_dir(link->job_id), link->path, r);
  if (!link->archive && (res.status == 200 || res.status == 206)) {
    res.headers.emplace_back("Content-Disposition", attachment_header(link->path));
  }
  // The URL stays out of caches and other sites' Referer headers.
  res.headers.emplace_back("Cache-Control", "no-store");
  res.headers.emplace_back("Referrer-Policy", "no-referrer");
  return res;
}

HttpResponse Api::remove(HttpRequest& r) {
  const std::string id = r.params["id"];
  if (Status s = ctx_.supervisor->remove(id); !s.is_ok()) return error_response(s);
  return json_response(200, {{"id", id}, {"deleted", true}});
}

HttpResponse Api::retry(HttpRequest& r) {
  auto job = ctx_.supervisor->retry_job(r.params["id"]);
  if (!job.is_ok()) return error_response(job.status());
  return HttpResponse::json(202, job_to_json(*job, ctx_.supervisor->job_dir(job->id)));
}

HttpResponse Api::cancel(HttpRequest& r) {
  auto job = ctx_.supervisor->cancel(r.params["id"]);
  if (!job.is_ok()) return error_response(job.status());
  return HttpResponse::json(202, job_to_json(*job, ctx_.supervisor->job_dir(job->id)));
}

HttpResponse Api::generate(HttpRequest& r) {
  auto job = ctx_.store->get(r.params["id"]);
  if (!job.is_ok()) return error_response(job.status());
  return generations_.start(*job, ctx_.supervisor->job_dir(job->id), r.body);
}

HttpResponse Api::completions(HttpRequest& r) {
  auto job = ctx_.store->get(r.params["id"]);
  if (!job.is_ok()) return error_response(job.status());
  return completions_.complete(*job, ctx_.supervisor->job_dir(job->id), runner::kCompletionsRoute, r.body,
                               r.client_left);
}

HttpResponse Api::chat_completions(HttpRequest& r) {
  auto job = ctx_.store->get(r.params["id"]);
  if (!job.is_ok()) return error_response(job.status());
  return completions_.complete(*job, ctx_.supervisor->job_dir(job->id), runner::kChatCompletionsRoute, r.body,
                               r.client_left);
}

HttpResponse Api::exports(HttpRequest& r) {
  auto job = ctx_.store->get(r.params["id"]);
  if (!job.is_ok()) return error_response(job.status());
  return exports_.run(*job, ctx_.supervisor->job_dir(job->id), r.body);
}

HttpResponse Api::sign_in(HttpRequest& r) {
  if (!ctx_.tokens || !ctx_.sessions) return error_response(ApiError::kNotFound, "this tailord has no sign-in");
  const json body = json::parse(r.body, nullptr, false);
  if (!body.is_object() || !body.contains("token") || !body["token"].is_string()) {
    return error_response(ApiError::kInvalidArgument,
                          "expected {\"token\": \"...\"} with the token of DATA_DIR/token or DATA_DIR/token.read");
  }
  const std::string token = body["token"].get<std::string>();
  const Access access = ctx_.tokens->access_of(token);
  if (access == Access::kNone) {
    return error_response(ApiError::kUnauthorized, "that token is not tailord's (see DATA_DIR/token)");
  }
  auto id = ctx_.sessions->create(access, token, static_cast<std::int64_t>(now_seconds()));
  if (!id.is_ok()) return error_response(id.status());
  HttpResponse res = HttpResponse::json(200, json_text(json({{"access", access == Access::kAdmin ? "admin" : "read"}})));
  res.headers.emplace_back("Set-Cookie", Sessions::set_cookie(*id));
  res.headers.emplace_back("Cache-Control", "no-store");
  return res;
}

HttpResponse Api::sign_out(HttpRequest& r) {
  if (ctx_.sessions) {
    if (Status s = ctx_.sessions->remove(r); !s.is_ok()) return error_response(s);
  }
  HttpResponse res;
  res.status = 204;
  res.headers.emplace_back("Set-Cookie", Sessions::clear_cookie());
  return res;
}

HttpResponse Api::session(HttpRequest& r) {
  bool by_cookie = false;
  const Access access = access_of(r, by_cookie);
  return HttpResponse::json(200, json_text(json({{"access", access == Access::kAdmin ? "admin" : "read"},
                                                 {"by", by_cookie ? "session" : "token"}})));
}

}  // namespace tailor::daemon
