// `tailor submit JOB.yaml`: validate locally, send the resolved spec to
// tailord, and optionally follow the job to its end.
#include <random>

#include "cli/commands.h"
#include "cli/job_view.h"
#include "cli/rest_client.h"
#include "cli/spec_options.h"
#include "core/text.h"
#include "core/units.h"
#include "dsl/spec_fields.h"
#include "dsl/spec_loader.h"
#include "dsl/yaml_tree.h"

namespace tailor::cli {
namespace {

constexpr const char* kSubmitHelp = R"(usage: tailor submit [OPTIONS] JOB.yaml

Validates the job spec here (extends, vars and --set applied, every problem
with file:line:col), then submits the resolved spec to tailord, which plans,
queues and runs it. Prints the job's id; with --wait follows it to the end
with a progress line and exits with its outcome: 0 succeeded, 4 cancelled,
5 failed, 6 tailord stayed unreachable (the job's outcome unknown). A
tailord that restarts meanwhile is waited for (--reconnect).

options:
  --wait               follow the job until it ends (progress on stderr)
  --dry-run            only plan it on the daemon; print the plan, queue nothing
  --memory-limit SIZE  a byte budget the runner enforces below the plan's
                       (CPU jobs), e.g. 300MiB
  --idempotency-key K  reuse K on a retried submission: it never creates two
                       jobs (default: a fresh key, reused for the automatic
                       retry after a dropped connection)
  --output FORMAT      text (default) or json (the job object)
  -q, --quiet          print only the job id (and errors)
  --set KEY=VALUE      override a spec key (repeatable)
  --catalog DIR        use models.yaml and gpus.yaml from DIR
  --no-check-files     do not require data files to exist here, nor read them
)";

std::string random_key() {
  std::random_device rd;
  std::uniform_int_distribution<std::uint64_t> dist;
  char buf[40];
  std::snprintf(buf, sizeof buf, "tailor-%016llx%016llx", static_cast<unsigned long long>(dist(rd)),
                static_cast<unsigned long long>(dist(rd)));
  return buf;
}

}  // namespace

int run_submit(const Argv& argv, Streams io) {
  const std::string help =
      std::string(kSubmitHelp) + kReconnectHelp + kRemoteFlagsHelp + "  -h, --help          show this help\n";
  auto command = parse_command(argv,
                               with_remote_flags(with_spec_flags({{"wait", false},
                                                                  {"dry-run", false},
                                                                  {"memory-limit", true},
                                                                  {"idempotency-key", true},
                                                                  {"output", true},
                                                                  {"reconnect", true},
                                                                  {"quiet", false, false, 'q'}})),
                               "submit", help.c_str(), io);
  if (!command.args) return command.exit_code;
  const Args& args = *command.args;
  const std::string output = args.get("output", "text");
  if (output != "text" && output != "json") {
    io.err << "tailor submit: --output must be text or json, got " << quote(output) << "\n";
    return kExitUsage;
  }
  if (args.positional().size() != 1) {
    io.err << "tailor submit: expected one job spec file\n" << help;
    return kExitUsage;
  }
  const auto reconnect = reconnect_options(args);
  if (!reconnect.is_ok()) {
    io.err << "tailor submit: " << reconnect.status().message() << "\n";
    return kExitUsage;
  }
  std::string query;
  if (args.has("memory-limit")) {
    auto limit = parse_bytes(args.get("memory-limit"));
    if (!limit.is_ok()) {
      io.err << "tailor submit: --memory-limit: " << limit.status().message() << "\n";
      return kExitUsage;
    }
    query += "&memory_limit=" + std::to_string(limit->count());
  }
  if (args.has("dry-run")) query += "&dry_run=true";
  if (!query.empty()) query[0] = '?';

  auto options = spec_options(args);
  if (!options.is_ok()) {
    io.err << "tailor submit: " << options.status().message() << "\n";
    return kExitInvalid;
  }
  const std::string& file = args.positional()[0];
  const dsl::LoadedSpec loaded = dsl::load_job_spec(file, options->load);
  io.err << loaded.diagnostics.to_string();
  if (!loaded.ok()) return kExitInvalid;
  const std::string body = dsl::emit_yaml(dsl::write_job_spec(*loaded.spec));

  auto endpoint = resolve_endpoint(args);
  if (!endpoint.is_ok()) {
    io.err << "tailor submit: " << endpoint.status().message() << "\n";
    return kExitUsage;
  }
  const RestClient client(*endpoint);
  const std::string key = args.get("idempotency-key", random_key());
  auto response = client.request("POST", "/v1/jobs" + query, body, "application/yaml", {{"Idempotency-Key", key}});
  if (!response.is_ok() && response.status().code() == StatusCode::kUnavailable) {
    // The request may have arrived: the same key makes the retry safe.
    response = client.request("POST", "/v1/jobs" + query, body, "application/yaml", {{"Idempotency-Key", key}});
  }
  if (!response.is_ok()) {
    io.err << "tailor submit: " << response.status().message() << "\n";
    return kExitRunFailed;
  }
  if (response->status < 200 || response->status >= 300) {
    const Status s = http_error(*response, *endpoint);
    io.err << "tailor submit: " << file << ": " << s.message() << "\n";
    return response->status == 422 && response->body.find("does_not_fit") != std::string::npos ? kExitNoFit
                                                                                               : kExitInvalid;
  }
  Json job = Json::parse(response->body, nullptr, false);
  if (job.is_discarded()) {
    io.err << "tailor submit: tailord answered with something that is not JSON\n";
    return kExitRunFailed;
  }
  if (args.has("dry-run")) {
    io.out << job.dump(2) << "\n";
    return job.value("fits", true) ? kExitOk : kExitNoFit;
  }
  const std::string id = job.value("id", "");
  const bool quiet = args.has("quiet");
  if (!args.has("wait")) {
    if (output == "json") {
      io.out << job.dump(2) << "\n";
    } else if (quiet) {
      io.out << id << "\n";
    } else {
      io.out << "submitted " << id << " (" << job.value("name", "") << "), " << job.value("state", "") << "\n"
             << "follow it with: tailor logs -f " << id << "\n";
    }
    return kExitOk;
  }
  if (!quiet && output == "text") io.err << "submitted " << id << " (" << job.value("name", "") << ")\n";
  auto final_job = follow_job(client, id, io, stderr_is_terminal(io), quiet || output == "json", *reconnect);
  if (!final_job.is_ok()) {
    io.err << "tailor submit: following " << id << ": " << final_job.status().message() << "\n";
    return final_job.status().code() == StatusCode::kUnavailable ? kExitUnreachable : kExitRunFailed;
  }
  const std::string state = final_job->value("state", "");
  if (output == "json") {
    io.out << final_job->dump(2) << "\n";
  } else {
    io.out << id << " " << state;
    if ((*final_job).contains("exit_reason") && (*final_job)["exit_reason"].is_string()) {
      io.out << ": " << (*final_job)["exit_reason"].get<std::string>();
    }
    io.out << "\n";
  }
  return exit_code_for_state(state);
}

}  // namespace tailor::cli
