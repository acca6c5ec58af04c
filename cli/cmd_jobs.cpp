// `tailor list`, `tailor status ID`, `tailor cancel ID`, `tailor retry ID`,
// `tailor delete ID`: reading, cancelling, retrying and deleting tailord's jobs.
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>

#include "cli/commands.h"
#include "cli/job_view.h"
#include "cli/rest_client.h"
#include "core/text.h"
#include "core/units.h"
#include "runner/protocol/probe.h"

namespace tailor::cli {
namespace {

constexpr const char* kListHelp = R"(usage: tailor list [OPTIONS]

Lists tailord's jobs, oldest first.

options:
  --state STATE        only jobs in STATE (queued, planning, running,
                       succeeded, failed, cancelled)
  --label KEY=VALUE    only jobs with these labels (comma-separated)
  --limit N            at most N jobs (default 50, at most 500)
  --after SEQ          jobs submitted after SEQ (pagination; see next_after)
  --output FORMAT      text (default) or json
)";

constexpr const char* kStatusHelp = R"(usage: tailor status [OPTIONS] ID

Shows one job: its state, plan, progress and how it ended.

options:
  --output FORMAT      text (default) or json (the job object)
)";

constexpr const char* kCancelHelp = R"(usage: tailor cancel [OPTIONS] ID

Cancels a job: a queued one at once; a running one's runner gets SIGTERM
(it writes a checkpoint and stops), SIGKILL after the daemon's grace period.

options:
  --wait               wait until the job has stopped
  --output FORMAT      text (default) or json (the job object)
)";

constexpr const char* kDeleteHelp = R"(usage: tailor delete [OPTIONS] ID

Deletes a finished job (succeeded, failed or cancelled): its records in
tailord and its folder (checkpoints, model, logs). A queued or running job
is refused: cancel it first.

options:
  --output FORMAT      text (default) or json
)";

constexpr const char* kRetryHelp = R"(usage: tailor retry [OPTIONS] ID

Puts a failed or cancelled job back in tailord's queue with a fresh budget of
retries and out-of-memory re-plans; it resumes from its newest complete
checkpoint, with the plan it had. A queued, running or succeeded job is
refused (submit a succeeded job's spec again to train anew).

options:
  --wait               follow the job until it ends; the exit code says how
  --output FORMAT      text (default) or json (the job object)
)";

std::string str(const Json& j, const char* key, const std::string& fallback = "-") {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (j[key].is_string()) return j[key].get<std::string>();
  return j[key].dump();
}

// The strategy of a plan document in one line (the planner's own summary).
std::string describe_strategy(const Json& plan) {
  return plan.is_object() && plan.contains("summary") && plan["summary"].is_string() ? plan["summary"].get<std::string>()
                                                                                      : "-";
}

}  // namespace

int run_list(const Argv& argv, Streams io) {
  const std::string help = help_of(kListHelp);
  auto command = parse_command(
      argv, with_remote_flags({{"state", true}, {"label", true}, {"limit", true}, {"after", true}, {"output", true}}),
      "list", help.c_str(), io);
  if (!command.args) return command.exit_code;
  const Args& args = *command.args;
  if (!args.positional().empty()) {
    io.err << "tailor list: unexpected argument " << quote(args.positional()[0]) << "\n" << help;
    return kExitUsage;
  }
  Remote r = connect_remote(args, "list", io);
  if (!r.client) return r.exit_code;
  std::string query;
  for (const char* key : {"state", "label", "limit", "after"}) {
    if (args.has(key)) query += std::string(query.empty() ? "?" : "&") + key + "=" + url_encode(args.get(key));
  }
  auto list = get_json(*r.client, "/v1/jobs" + query);
  if (!list.is_ok()) return fail_command("list", list.status(), io);
  if (r.output == "json") {
    io.out << list->dump(2) << "\n";
    return kExitOk;
  }
  const Json jobs = list->value("jobs", Json::array());
  if (jobs.empty()) {
    io.out << "no jobs\n";
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {{"ID", "NAME", "STATE", "STEP", "CREATED", "REASON"}};
  for (const Json& j : jobs) {
    rows.push_back({str(j, "id"), str(j, "name"), str(j, "state"), str(j, "last_step"), str(j, "created_at"),
                    str(j, "exit_reason", "")});
  }
  io.out << format_columns(rows);
  if (list->contains("next_after") && (*list)["next_after"].is_number()) {
    io.out << "(more: --after " << (*list)["next_after"].dump() << ")\n";
  }
  return kExitOk;
}

int run_status(const Argv& argv, Streams io) {
  const std::string help = help_of(kStatusHelp);
  auto command = parse_command(argv, with_remote_flags({{"output", true}}), "status", help.c_str(), io);
  if (!command.args) return command.exit_code;
  const Args& args = *command.args;
  if (args.positional().size() != 1) {
    io.err << "tailor status: expected one job id\n" << help;
    return kExitUsage;
  }
  Remote r = connect_remote(args, "status", io);
  if (!r.client) return r.exit_code;
  const std::string id = args.positional()[0];
  auto job = get_json(*r.client, "/v1/jobs/" + url_encode(id));
  if (!job.is_ok()) return fail_command("status", job.status(), io);
  if (r.output == "json") {
    io.out << job->dump(2) << "\n";
    return kExitOk;
  }
  const Json& j = *job;
  auto row = [&](const char* k, const std::string& v) { io.out << "  " << pad_right(k, 14) << v << "\n"; };
  io.out << str(j, "id") << " (" << str(j, "name") << ")\n";
  row("state", str(j, "state"));
  row("priority", str(j, "priority", "0"));
  row("created", str(j, "created_at"));
  row("started", str(j, "started_at"));
  row("finished", str(j, "finished_at"));
  row("strategy", describe_strategy(j.value("plan", Json())));
  // strategy.probe: measuring before training, or what it measured.
  if (const Json plan = j.value("plan", Json()); plan.is_object() && plan.contains("probe")) {
    auto table = runner::parse_probe(plan.dump(), "the job's plan");
    if (table.is_ok() && *table && (*table)->measured()) {
      io.out << "  probe (predicted beside measured):\n";
      std::istringstream lines(
          runner::format_probe_table(**table, plan.value("hardware", Json()).value("num_gpus", 0) > 0));
      for (std::string line; std::getline(lines, line);)
        io.out << "    " << line << "\n";
    } else if (table.is_ok() && *table && str(j, "state") == "running") {
      row("phase", "probing " + std::to_string((*table)->candidates.size()) + " plans before training");
    }
  }
  if (const Json plan = j.value("plan", Json()); plan.is_object() && plan.contains("memory")) {
    const Json& per = plan["memory"].value("per_gpu", Json());
    if (per.is_object() && per.contains("total") && per["total"].is_number()) {
      row("estimate", Bytes(per["total"].get<std::int64_t>()).to_string() + " peak per device");
    }
  }
  // The measurement of the attempt the estimate is for (the newest), not
  // a failed attempt's refused allocation.
  const Json history = j.value("attempt_history", Json::array());
  const Json newest = history.is_array() && !history.empty() ? history.back() : Json();
  if (newest.is_object() && newest.contains("measured_peak_bytes")) {
    row("measured", Bytes(newest["measured_peak_bytes"].get<std::int64_t>()).to_string() + " peak (attempt " +
                        std::to_string(newest.value("attempt", 0)) + ")");
  } else if (history.empty() && j.contains("peak_bytes") && j["peak_bytes"].is_number()) {
    row("measured", Bytes(j["peak_bytes"].get<std::int64_t>()).to_string() + " peak");
  }
  row("step", str(j, "last_step"));
  if (j.contains("last_step") && j["last_step"].is_number()) {
    // The newest step's figures.
    const std::int64_t last = j["last_step"].get<std::int64_t>();
    auto m = get_json(*r.client, "/v1/jobs/" + url_encode(id) + "/metrics?since_step=" + std::to_string(last - 1));
    if (m.is_ok()) {
      for (const Json& row_json : m->value("metrics", Json::array())) {
        char buf[96];
        if (row_json.contains("loss") && row_json["loss"].is_number()) {
          std::snprintf(buf, sizeof buf, "%.4f", row_json["loss"].get<double>());
          row("loss", buf);
        }
        if (row_json.contains("tokens_per_second") && row_json["tokens_per_second"].is_number()) {
          std::snprintf(buf, sizeof buf, "%.0f", row_json["tokens_per_second"].get<double>());
          row("tokens/s", buf);
        }
      }
    }
  }
  if (j.contains("last_eval_loss") && j["last_eval_loss"].is_number()) {
    const double eval = j["last_eval_loss"].get<double>();
    // A preference loss is no next-token loss: it has no perplexity.
    const Json::json_pointer at("/plan/spec/training/method");
    const Json method = j.contains(at) ? j.at(at) : Json();
    const bool next_token = !method.is_string() || method == "sft";
    char buf[96];
    if (next_token) {
      std::snprintf(buf, sizeof buf, "%.4f (perplexity %.2f) after step %s", eval, std::exp(eval),
                    str(j, "last_eval_step").c_str());
    } else {
      std::snprintf(buf, sizeof buf, "%.4f (%s) after step %s", eval, method.get<std::string>().c_str(),
                    str(j, "last_eval_step").c_str());
    }
    row("eval loss", buf);
  }
  row("attempts", str(j, "attempts", "0") + " (" + str(j, "oom_restarts", "0") + " after out-of-memory)");
  // Where the job reports besides tailord, with the commands that open it.
  const Json::json_pointer tracking_at("/plan/spec/tracking");
  if (const Json t = j.contains(tracking_at) ? j.at(tracking_at) : Json(); t.is_object()) {
    const Json tb = t.value("tensorboard", Json::object()), ml = t.value("mlflow", Json::object());
    if (tb.value("enabled", false)) {
      const std::string dir = str(j, "output_dir") + (tb.value("dir", std::string()).empty() ? "" : "/" + tb.value("dir", std::string()));
      row("tensorboard", "tensorboard --logdir " + dir);
      row("wandb", "tailor-wandb " + dir + "   (an offline W&B run; then wandb sync)");
    }
    if (ml.value("enabled", false)) {
      row("mlflow", ml.value("uri", std::string()) + " experiment " + ml.value("experiment", std::string("Default")));
    }
  }
  if (history.is_array() && history.size() > 1) {
    // Estimate against measurement, attempt by attempt.
    for (const Json& a : history) {
      auto bytes = [&](const char* key) {
        return a.contains(key) && a[key].is_number() ? Bytes(a[key].get<std::int64_t>()).to_string() : std::string("-");
      };
      std::string line = "#" + std::to_string(a.value("attempt", 0)) + " " + a.value("strategy", std::string("?")) +
                         ": estimate " + bytes("estimated_bytes") + ", measured " + bytes("measured_peak_bytes");
      if (a.value("outcome", std::string()) == "out_of_memory") {
        line += ", out of memory at " + bytes("oom_at_bytes") + " of a " + bytes("budget_bytes") + " budget";
      }
      io.out << "    " << line << "\n";
    }
  }
  if (j.contains("exit_reason") && j["exit_reason"].is_string()) row("exit", str(j, "exit_reason"));
  // Where its files are (on the daemon's machine); the model once it succeeded.
  if (j.contains("output_dir") && j["output_dir"].is_string()) {
    const std::string dir = str(j, "output_dir");
    row("output", str(j, "state") == "succeeded" ? dir + " (model: " + dir + "/model)" : dir);
  }
  return kExitOk;
}

int run_cancel(const Argv& argv, Streams io) {
  const std::string help = help_of(kCancelHelp);
  auto command =
      parse_command(argv, with_remote_flags({{"wait", false}, {"output", true}}), "cancel", help.c_str(), io);
  if (!command.args) return command.exit_code;
  const Args& args = *command.args;
  if (args.positional().size() != 1) {
    io.err << "tailor cancel: expected one job id\n" << help;
    return kExitUsage;
  }
  Remote r = connect_remote(args, "cancel", io);
  if (!r.client) return r.exit_code;
  const std::string id = args.positional()[0];
  auto res = r.client->request("POST", "/v1/jobs/" + url_encode(id) + "/cancel");
  if (!res.is_ok()) return fail_command("cancel", res.status(), io);
  if (res->status < 200 || res->status >= 300) return fail_command("cancel", http_error(*res, r.client->endpoint()), io);
  Json job = Json::parse(res->body, nullptr, false);
  if (args.has("wait")) {
    auto done = follow_job(*r.client, id, io, false, /*quiet=*/true);
    if (!done.is_ok()) return fail_command("cancel", done.status(), io);
    job = *done;
  }
  if (r.output == "json") {
    io.out << job.dump(2) << "\n";
  } else {
    io.out << id << " " << (job.is_object() ? str(job, "state") : "cancel requested")
           << (job.is_object() && job.value("state", "") == "running" ? " (stopping)" : "") << "\n";
  }
  return kExitOk;
}

int run_retry(const Argv& argv, Streams io) {
  const std::string help = help_of(kRetryHelp);
  auto command =
      parse_command(argv, with_remote_flags({{"wait", false}, {"output", true}}), "retry", help.c_str(), io);
  if (!command.args) return command.exit_code;
  const Args& args = *command.args;
  if (args.positional().size() != 1) {
    io.err << "tailor retry: expected one job id\n" << help;
    return kExitUsage;
  }
  Remote r = connect_remote(args, "retry", io);
  if (!r.client) return r.exit_code;
  const std::string id = args.positional()[0];
  auto res = r.client->request("POST", "/v1/jobs/" + url_encode(id) + "/retry");
  if (!res.is_ok()) return fail_command("retry", res.status(), io);
  if (res->status < 200 || res->status >= 300) return fail_command("retry", http_error(*res, r.client->endpoint()), io);
  Json job = Json::parse(res->body, nullptr, false);
  if (args.has("wait")) {
    auto done = follow_job(*r.client, id, io, false, /*quiet=*/r.output == "json");
    if (!done.is_ok()) return fail_command("retry", done.status(), io);
    job = *done;
  }
  if (r.output == "json") {
    io.out << job.dump(2) << "\n";
  } else {
    io.out << id << " " << (job.is_object() ? str(job, "state") : "queued") << "\n";
  }
  return args.has("wait") ? exit_code_for_state(job.is_object() ? str(job, "state") : "") : kExitOk;
}

int run_delete(const Argv& argv, Streams io) {
  const std::string help = help_of(kDeleteHelp);
  auto command = parse_command(argv, with_remote_flags({{"output", true}}), "delete", help.c_str(), io);
  if (!command.args) return command.exit_code;
  const Args& args = *command.args;
  if (args.positional().size() != 1) {
    io.err << "tailor delete: expected one job id\n" << help;
    return kExitUsage;
  }
  Remote r = connect_remote(args, "delete", io);
  if (!r.client) return r.exit_code;
  const std::string id = args.positional()[0];
  auto res = r.client->request("DELETE", "/v1/jobs/" + url_encode(id));
  if (!res.is_ok()) return fail_command("delete", res.status(), io);
  if (res->status < 200 || res->status >= 300) return fail_command("delete", http_error(*res, r.client->endpoint()), io);
  if (r.output == "json") {
    io.out << res->body;
  } else {
    io.out << id << " deleted\n";
  }
  return kExitOk;
}

}  // namespace tailor::cli
