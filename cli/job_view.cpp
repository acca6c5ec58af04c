#include "cli/job_view.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <thread>

#include "cli/sse_reader.h"
#include "core/units.h"

namespace tailor::cli {

bool is_terminal_state(const std::string& state) {
  return state == "succeeded" || state == "failed" || state == "cancelled";
}

int exit_code_for_state(const std::string& state) {
  if (state == "succeeded") return kExitOk;
  if (state == "cancelled") return kExitCancelled;
  return kExitRunFailed;
}

Status http_error(const HttpResponse& r, const Endpoint& e) {
  std::string msg = error_message(r);
  if (r.status == 401) {
    msg += e.token.empty() ? " (no token given: pass --token, set TAILOR_TOKEN, or --data-dir of the daemon)"
                           : " (the token was refused)";
  }
  if (r.status == 404) return Status::not_found(msg);
  if (r.status == 400 || r.status == 422 || r.status == 413 || r.status == 415) return Status::invalid_argument(msg);
  if (r.status == 503) return Status::unavailable(msg);
  if (r.status == 507) return Status::no_space(msg);
  return Status::failed_precondition(msg);
}

Result<Json> get_json(const RestClient& client, const std::string& target) {
  TAILOR_ASSIGN_OR_RETURN(HttpResponse r, client.request("GET", target));
  if (r.status < 200 || r.status >= 300) return http_error(r, client.endpoint());
  Json j = Json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::internal("tailord sent a response that is not JSON for " + target);
  return j;
}

std::string format_duration(double seconds) {
  if (seconds < 0) return "--";
  const auto s = static_cast<long long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, (s / 60) % 60);
  } else if (s >= 60) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%llds", s);
  }
  return buf;
}

std::string progress_line(const Progress& p, bool bar) {
  std::string out;
  if (bar) {
    const int width = 24;
    const int filled = p.total > 0 ? static_cast<int>(width * std::min(p.step, p.total) / p.total) : 0;
    out += "[" + std::string(static_cast<std::size_t>(filled), '#') +
           std::string(static_cast<std::size_t>(width - filled), '.') + "] ";
  }
  char buf[256];
  if (p.total > 0) {
    std::snprintf(buf, sizeof buf, "step %lld/%lld", static_cast<long long>(p.step), static_cast<long long>(p.total));
  } else {
    std::snprintf(buf, sizeof buf, "step %lld", static_cast<long long>(p.step));
  }
  out += buf;
  if (p.loss >= 0) {
    std::snprintf(buf, sizeof buf, "  loss %.4f", p.loss);
    out += buf;
  }
  if (p.tokens_per_second > 0) {
    std::snprintf(buf, sizeof buf, "  %.0f tok/s", p.tokens_per_second);
    out += buf;
  }
  if (p.mfu >= 0) {
    std::snprintf(buf, sizeof buf, "  MFU %.1f%%", 100 * p.mfu);
    out += buf;
  }
  if (p.peak_bytes > 0) out += "  mem " + Bytes(p.peak_bytes).to_string();
  if (p.eta_seconds >= 0 && p.state == "running") out += "  ETA " + format_duration(p.eta_seconds);
  out += "  " + p.state;
  return out;
}

std::string help_of(const char* usage) {
  return std::string(usage) + kRemoteFlagsHelp + "  -h, --help          show this help\n";
}

Remote connect_remote(const Args& args, const char* name, Streams io) {
  Remote r;
  r.output = args.get("output", "text");
  if (r.output != "text" && r.output != "json") {
    io.err << "tailor " << name << ": --output must be text or json, got \"" << r.output << "\"\n";
    r.exit_code = kExitUsage;
    return r;
  }
  auto e = resolve_endpoint(args);
  if (!e.is_ok()) {
    io.err << "tailor " << name << ": " << e.status().message() << "\n";
    r.exit_code = kExitUsage;
    return r;
  }
  r.client.emplace(*e);
  return r;
}

int fail_command(const char* name, const Status& s, Streams io) {
  io.err << "tailor " << name << ": " << s.message() << "\n";
  return s.code() == StatusCode::kNotFound ? kExitInvalid : kExitRunFailed;
}

bool stderr_is_terminal(Streams io) { return &io.err == &std::cerr && isatty(STDERR_FILENO) == 1; }

namespace {

// A connection to tailord that rides out its absence: after a failure,
// every `reconnect.interval` a fresh client (a restarted tailord may listen
// elsewhere), until one answers or `reconnect.window` has passed.
class Link {
 public:
  Link(const RestClient& client, const Reconnect& reconnect, Streams io, bool redraw, bool quiet)
      : client_(client), reconnect_(reconnect), io_(io), clear_(redraw ? "\r\033[K" : ""), quiet_(quiet) {}

  const RestClient& client() const { return client_; }

  // get_json, waiting out an unreachable tailord.
  Result<Json> get(const std::string& target) {
    for (;;) {
      auto r = get_json(client_, target);
      if (r.is_ok() || r.status().code() != StatusCode::kUnavailable) {
        if (r.is_ok()) answered();
        return r;
      }
      TAILOR_RETURN_IF_ERROR(wait_after(r.status()));
    }
  }

  // tailord answered: says so if it had been away.
  void answered() {
    if (!lost_) return;
    if (!quiet_) io_.err << clear_ << "tailord is back at " << client_.endpoint().address() << "\n";
    lost_.reset();
  }

  // After `failure` (tailord unreachable): Ok once it is time to try again
  // (with a fresh client), Unavailable when the window has passed.
  Status wait_after(const Status& failure) {
    const auto now = std::chrono::steady_clock::now();
    if (!lost_) {
      lost_ = now;
      if (!quiet_) {
        io_.err << clear_ << failure.message() << "\nwaiting up to "
                << format_duration(std::chrono::duration<double>(reconnect_.window).count())
                << " for tailord to come back\n";
      }
    }
    if (now - *lost_ >= reconnect_.window) {
      return Status::unavailable(failure.message() + "; gave up after " +
                                 format_duration(std::chrono::duration<double>(reconnect_.window).count()) +
                                 " (the job may still be running: tailor logs -f)");
    }
    std::this_thread::sleep_for(reconnect_.interval);
    if (reconnect_.client) {
      if (auto fresh = reconnect_.client(); fresh.is_ok()) client_ = std::move(fresh).value();
    }
    return Status::ok();
  }

 private:
  RestClient client_;
  const Reconnect& reconnect_;
  Streams io_;
  const char* clear_;  // the progress line's, on a terminal
  bool quiet_;
  std::optional<std::chrono::steady_clock::time_point> lost_;
};

// What following a job has seen, and how it shows it.
class FollowView {
 public:
  FollowView(Streams io, bool redraw, bool quiet) : io_(io), redraw_(redraw), quiet_(quiet) {}

  std::int64_t last_event() const { return last_event_; }
  std::int64_t step() const { return p_.step; }
  bool done() const { return is_terminal_state(p_.state); }

  void job(const Json& j) {
    if (!j.is_object()) return;
    p_.name = j.value("name", p_.name);
    p_.state = j.value("state", p_.state);
    if (j.contains("last_step") && j["last_step"].is_number_integer()) {
      p_.step = std::max(p_.step, j["last_step"].get<std::int64_t>());
    }
  }

  void event(std::int64_t id, const Json& e) {
    last_event_ = std::max(last_event_, id);
    const std::string kind = e.value("kind", "");
    if (kind == "runner.start" && e.contains("data") && e["data"].is_object()) {
      p_.total = e["data"].value("steps", p_.total);
    }
    // Transitions and what the daemon did about failures tell the story;
    // routine runner events (checkpoints) stay out of the way.
    const bool notable = kind == "state" || kind == "replan" || kind == "cancel" || kind == "recovered" ||
                         kind == "lost" || kind == "runner.oom" || kind == "runner.error" || kind == "retry" ||
                         kind == "runner.checkpoint_skipped" || kind == "runner.nonfinite_loss" ||
                         kind == "runner.probe_start" || kind == "runner.probe" || kind == "runner.probe_done";
    if (notable && !quiet_) {
      if (redraw_) io_.err << "\r\033[K";
      io_.err << e.value("message", kind) << "\n";
    }
  }

  void step_row(const Json& m) {
    if (m.value("rank", 0) != 0) return;
    p_.step = m.value("step", p_.step);
    if (m.contains("loss") && m["loss"].is_number()) p_.loss = m["loss"].get<double>();
    if (m.contains("tokens_per_second") && m["tokens_per_second"].is_number()) {
      p_.tokens_per_second = m["tokens_per_second"].get<double>();
    }
    if (m.contains("step_seconds") && m["step_seconds"].is_number()) {
      rate_sum_ += m["step_seconds"].get<double>();
      ++rate_steps_;
    }
    if (m.contains("memory") && m["memory"].is_object() && m["memory"].contains("peak_bytes") &&
        m["memory"]["peak_bytes"].is_number()) {
      p_.peak_bytes = std::max(p_.peak_bytes, m["memory"]["peak_bytes"].get<std::int64_t>());
    }
  }

  void draw() {
    if (rate_steps_ > 0 && p_.total > 0) {
      p_.eta_seconds = rate_sum_ / static_cast<double>(rate_steps_) * static_cast<double>(p_.total - p_.step);
    }
    if (quiet_) return;
    const bool finished = done();
    if (redraw_) {
      io_.err << "\r" << progress_line(p_, true) << "\033[K" << (finished ? "\n" : "") << std::flush;
      return;
    }
    const std::int64_t every = std::max<std::int64_t>(1, (p_.total + 19) / 20);
    // Nothing to show before the runner's first step but the events.
    if (p_.step != last_printed_ && (finished || (p_.step > 0 && p_.step / every != last_printed_ / every))) {
      io_.err << progress_line(p_, false) << "\n";
      last_printed_ = p_.step;
    }
  }

 private:
  Streams io_;
  bool redraw_, quiet_;
  Progress p_;
  std::int64_t last_event_ = 0, last_printed_ = -1;
  double rate_sum_ = 0;  // seconds per step, smoothed over this run's steps
  std::int64_t rate_steps_ = 0;
};

}  // namespace

const char* const kReconnectHelp =
    R"(  --reconnect SECONDS  while following, how long to wait for a tailord that
                       cannot be reached (a restart) before giving up with exit
                       6 (default 120)
)";

Result<Reconnect> reconnect_options(const Args& args) {
  Reconnect r;
  if (args.has("reconnect")) {
    const std::string v = args.get("reconnect");
    char* end = nullptr;
    const double s = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !(s >= 0) || s > 86400) {
      return Status::invalid_argument("--reconnect: expected seconds from 0 to 86400, got \"" + v + "\"");
    }
    r.window = std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000));
  }
  r.client = [&args]() -> Result<RestClient> {
    TAILOR_ASSIGN_OR_RETURN(Endpoint e, resolve_endpoint(args));
    return RestClient(std::move(e));
  };
  return r;
}

Result<Json> follow_job(const RestClient& client, const std::string& id, Streams io, bool redraw, bool quiet,
                        const Reconnect& reconnect) {
  Link link(client, reconnect, io, redraw, quiet);
  FollowView view(io, redraw, quiet);
  const std::string base = "/v1/jobs/" + url_encode(id);
  bool reconnecting = false;
  for (;;) {
    // The job's server-sent events (daemon/api/event_stream.h); after a
    // reconnect, from where the last stream stopped.
    std::string target = base + "/events?follow=true&after_id=" + std::to_string(view.last_event());
    if (reconnecting) target += "&since_step=" + std::to_string(view.step());
    SseReader reader;
    std::optional<Json> ended;
    std::optional<std::chrono::milliseconds> closed_for;
    std::string body;  // an error response's
    auto status = link.client().stream(
        target,
        [&](const std::string& piece) {
          link.answered();
          if (body.size() < (64 << 10)) body += piece;
          for (const SseMessage& m : reader.feed(piece)) {
            const Json data = Json::parse(m.data, nullptr, /*allow_exceptions=*/false);
            if (m.id) {
              view.event(*m.id, data);
            } else if (m.event == "step") {
              view.step_row(data);
            } else if (m.event == "job") {
              view.job(data);
            } else if (m.event == "end") {
              view.job(data);
              ended = data;
            } else if (m.event == "closed") {
              // tailord's stream budget made room for newer streams
              // (daemon/api/event_stream.h): it is there, so come back
              // after the delay it asks for, without counting it as lost.
              closed_for = std::chrono::milliseconds(data.is_object() ? data.value("retry_ms", 10'000) : 10'000);
            }
          }
          view.draw();
          return !ended;
        },
        // tailord sends a keep-alive every 15 s: a minute of silence is a lost connection.
        std::chrono::seconds(60));
    if (ended) {
      // The whole job (the stream leaves its plan out).
      auto full = link.get(base);
      if (full.is_ok()) return full;
      return *ended;
    }
    if (status.is_ok() && *status >= 300) return http_error(HttpResponse{*status, body, {}}, link.client().endpoint());
    if (closed_for) {
      std::this_thread::sleep_for(std::clamp(*closed_for, std::chrono::milliseconds(100), std::chrono::milliseconds(60'000)));
      reconnecting = true;
      continue;
    }
    // Unreachable, or the stream broke off (tailord stopped): wait for it.
    const Status lost = status.is_ok() ? Status::unavailable("tailord at " + link.client().endpoint().address() +
                                                             " closed the job's event stream")
                                       : status.status();
    if (lost.code() != StatusCode::kUnavailable) return lost;
    TAILOR_RETURN_IF_ERROR(link.wait_after(lost));
    reconnecting = true;
  }
}

std::string format_columns(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line.append(width[c] + 2 - row[c].size(), ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace tailor::cli
