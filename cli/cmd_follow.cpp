// `tailor logs ID [-f]` and `tailor top`: watching jobs as they run.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <ostream>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "cli/job_view.h"
#include "cli/rest_client.h"
#include "core/text.h"
#include "core/units.h"

namespace tailor::cli {
namespace {

constexpr const char* kLogsHelp = R"(usage: tailor logs [OPTIONS] ID

Prints a job's runner output (stdout and stderr). With -f, follows the job
until it ends: on a terminal as a live progress line (step/total, loss,
tokens/s, memory, ETA) with the job's notable events; otherwise (or with
--raw) as the raw log stream. Exits with the job's outcome when following:
0 succeeded, 4 cancelled, 5 failed; 6 when tailord stayed unreachable
(the job's outcome unknown).

options:
  -f, --follow         follow the job until it ends
  --raw                with -f, stream the log text even on a terminal
)";

constexpr const char* kTopHelp = R"(usage: tailor top [OPTIONS]

A table of running and queued jobs with their progress, refreshed until
interrupted (Ctrl-C).

options:
  --interval SECONDS   refresh period (default 2)
  --once               print the table once and exit
  --output FORMAT      text (default) or json: the jobs with their progress,
                       once
)";

// One job's progress from its newest metric and its runner's start event.
Progress progress_of(const RestClient& client, const Json& job) {
  Progress p;
  p.name = job.value("name", "");
  p.state = job.value("state", "");
  const std::string base = "/v1/jobs/" + url_encode(job.value("id", ""));
  const std::int64_t last = job.contains("last_step") && job["last_step"].is_number() ? job["last_step"].get<std::int64_t>() : 0;
  if (auto m = get_json(client, base + "/metrics?since_step=" + std::to_string(std::max<std::int64_t>(0, last - 1)));
      m.is_ok()) {
    for (const Json& row : m->value("metrics", Json::array())) {
      p.step = row.value("step", p.step);
      if (row.contains("loss") && row["loss"].is_number()) p.loss = row["loss"].get<double>();
      if (row.contains("tokens_per_second") && row["tokens_per_second"].is_number()) {
        p.tokens_per_second = row["tokens_per_second"].get<double>();
      }
      if (row.contains("mfu") && row["mfu"].is_number()) p.mfu = row["mfu"].get<double>();
      if (row.contains("memory") && row["memory"].is_object() && row["memory"].contains("peak_bytes") &&
          row["memory"]["peak_bytes"].is_number()) {
        p.peak_bytes = row["memory"]["peak_bytes"].get<std::int64_t>();
      }
      if (row.contains("step_seconds") && row["step_seconds"].is_number()) p.eta_seconds = row["step_seconds"].get<double>();
    }
  }
  if (auto e = get_json(client, base + "/events"); e.is_ok()) {
    for (const Json& ev : e->value("events", Json::array())) {
      if (ev.value("kind", "") == "runner.start" && ev.contains("data") && ev["data"].is_object()) {
        p.total = ev["data"].value("steps", p.total);
      }
    }
  }
  // eta_seconds held the last step's duration.
  p.eta_seconds = p.eta_seconds > 0 && p.total > 0 ? p.eta_seconds * static_cast<double>(p.total - p.step) : -1;
  return p;
}

}  // namespace

int run_logs(const Argv& argv, Streams io) {
  const std::string help = help_of((std::string(kLogsHelp) + kReconnectHelp).c_str());
  auto command =
      parse_command(argv, with_remote_flags({{"follow", false, false, 'f'}, {"raw", false}, {"reconnect", true}}),
                    "logs", help.c_str(), io);
  if (!command.args) return command.exit_code;
  const Args& args = *command.args;
  if (args.positional().size() != 1) {
    io.err << "tailor logs: expected one job id\n" << help;
    return kExitUsage;
  }
  auto endpoint = resolve_endpoint(args);
  if (!endpoint.is_ok()) {
    io.err << "tailor logs: " << endpoint.status().message() << "\n";
    return kExitUsage;
  }
  const RestClient client(*endpoint);
  const std::string id = args.positional()[0];
  const std::string base = "/v1/jobs/" + url_encode(id);
  if (!args.has("follow")) {
    auto r = client.request("GET", base + "/logs");
    if (!r.is_ok() || r->status != 200) {
      io.err << "tailor logs: " << (r.is_ok() ? http_error(*r, *endpoint).message() : r.status().message()) << "\n";
      return r.is_ok() && r->status == 404 ? kExitInvalid : kExitRunFailed;
    }
    io.out << r->body;
    return kExitOk;
  }
  auto reconnect = reconnect_options(args);
  if (!reconnect.is_ok()) {
    io.err << "tailor logs: " << reconnect.status().message() << "\n";
    return kExitUsage;
  }
  if (stderr_is_terminal(io) && !args.has("raw")) {
    auto job = follow_job(client, id, io, /*redraw=*/true, /*quiet=*/false, *reconnect);
    if (!job.is_ok()) {
      io.err << "tailor logs: " << job.status().message() << "\n";
      if (job.status().code() == StatusCode::kUnavailable) return kExitUnreachable;
      return job.status().code() == StatusCode::kNotFound ? kExitInvalid : kExitRunFailed;
    }
    if (job->contains("exit_reason") && (*job)["exit_reason"].is_string()) {
      io.err << id << ": " << (*job)["exit_reason"].get<std::string>() << "\n";
    }
    return exit_code_for_state(job->value("state", ""));
  }
  std::string error_body;
  auto status = client.stream(base + "/logs?follow=true", [&](const std::string& piece) {
    io.out << piece << std::flush;
    return true;
  });
  if (!status.is_ok()) {
    io.err << "tailor logs: " << status.status().message() << "\n";
    return kExitRunFailed;
  }
  if (*status != 200) return *status == 404 ? kExitInvalid : kExitRunFailed;
  auto job = get_json(client, base);
  return job.is_ok() ? exit_code_for_state(job->value("state", "")) : kExitRunFailed;
}

int run_top(const Argv& argv, Streams io) {
  const std::string help = help_of(kTopHelp);
  auto command =
      parse_command(argv, with_remote_flags({{"interval", true}, {"once", false}, {"output", true}}), "top",
                    help.c_str(), io);
  if (!command.args) return command.exit_code;
  const Args& args = *command.args;
  double interval = 2;
  if (args.has("interval")) {
    char* end = nullptr;
    const std::string v = args.get("interval");
    interval = std::strtod(v.c_str(), &end);
    if (end == v.c_str() || *end != '\0' || !(interval >= 0.1 && interval <= 3600)) {
      io.err << "tailor top: --interval must be a number of seconds from 0.1 to 3600, got " << quote(v) << "\n";
      return kExitUsage;
    }
  }
  auto endpoint = resolve_endpoint(args);
  if (!endpoint.is_ok()) {
    io.err << "tailor top: " << endpoint.status().message() << "\n";
    return kExitUsage;
  }
  const std::string output = args.get("output", "text");
  if (output != "text" && output != "json") {
    io.err << "tailor top: --output must be text or json, got " << quote(output) << "\n";
    return kExitUsage;
  }
  const bool json = output == "json";
  const RestClient client(*endpoint);
  const bool redraw = !args.has("once") && !json && &io.out == &std::cout;
  for (;;) {
    std::ostringstream table;
    Json rows = Json::array();
    std::size_t shown = 0;
    for (const char* state : {"running", "planning", "queued"}) {
      auto list = get_json(client, std::string("/v1/jobs?limit=500&state=") + state);
      if (!list.is_ok()) {
        io.err << "tailor top: " << list.status().message() << "\n";
        return kExitRunFailed;
      }
      for (const Json& j : list->value("jobs", Json::array())) {
        if (shown++ == 0) {
          table << pad_right("ID", 20) << pad_right("NAME", 20) << pad_right("STATE", 10) << "PROGRESS\n";
        }
        const Progress p = state == std::string("running") ? progress_of(client, j) : Progress{j.value("name", ""), state};
        rows.push_back({{"id", j.value("id", "")},
                        {"name", p.name},
                        {"state", p.state},
                        {"step", p.step},
                        {"total_steps", p.total},
                        {"loss", p.loss >= 0 ? Json(p.loss) : Json()},
                        {"tokens_per_second", p.tokens_per_second},
                        {"mfu", p.mfu >= 0 ? Json(p.mfu) : Json()},
                        {"peak_bytes", p.peak_bytes},
                        {"eta_seconds", p.eta_seconds >= 0 ? Json(p.eta_seconds) : Json()}});
        table << pad_right(j.value("id", ""), 20) << pad_right(p.name, 20) << pad_right(p.state, 10)
              << (state == std::string("running") ? progress_line(p, true) : "") << "\n";
      }
    }
    if (json) {
      io.out << rows.dump(2) << "\n";
      return kExitOk;
    }
    if (shown == 0) table << "no running or queued jobs\n";
    if (redraw) io.out << "\033[H\033[2J";  // home and clear: a refreshing screen
    io.out << "tailord " << endpoint->address() << "\n" << table.str() << std::flush;
    if (args.has("once")) return kExitOk;
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(interval * 1000)));
  }
}

}  // namespace tailor::cli
