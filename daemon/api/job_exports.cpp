#include "daemon/api/job_exports.h"

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "daemon/api/job_completions.h"
#include "daemon/http/errors.h"
#include "platform/process.h"

namespace tailor::daemon {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::set<std::string> kOuttypes = {"f16", "bf16", "f32", "q8_0"};
const std::set<std::string> kDtypes = {"auto", "fp32", "bf16", "fp16"};

// The runner's --output json object: its last line that is one.
json last_json_line(const std::string& text) {
  std::istringstream in(text);
  json found;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] != '{') continue;
    json j = json::parse(line, nullptr, false);
    if (j.is_object()) found = std::move(j);
  }
  return found;
}

// What the runner said on failure: its lines without the JSON.
std::string message_of(const std::string& text) {
  std::istringstream in(text);
  std::string out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '{') continue;
    out += (out.empty() ? "" : " ") + line;
  }
  return out.empty() ? "tailor-runner export said nothing" : out;
}

}  // namespace

JobExports::JobExports(std::string runner_path, std::string log_dir, double timeout_seconds)
    : runner_(std::move(runner_path)), log_dir_(std::move(log_dir)), timeout_(timeout_seconds) {}

HttpResponse JobExports::run(const JobRecord& job, const std::string& output_dir, const std::string& body) {
  if (auto refused = check_job_model(job, output_dir)) return *refused;
  const json request = json::parse(body.empty() ? "{}" : body, nullptr, /*allow_exceptions=*/false);
  if (!request.is_object()) return error_response(ApiError::kInvalidArgument, "the request body is not a JSON object");
  for (const auto& [key, value] : request.items()) {
    if (key != "format" && key != "outtype" && key != "dtype") {
      return error_response(ApiError::kInvalidArgument, "unknown field \"" + key + "\" (expected format, outtype, dtype)");
    }
    if (!value.is_string()) return error_response(ApiError::kInvalidArgument, key + ": expected a string");
  }
  const std::string format = request.value("format", "gguf");
  if (format != "gguf" && format != "safetensors") {
    return error_response(ApiError::kInvalidArgument, "format: expected gguf or safetensors, got \"" + format + "\"");
  }
  const bool gguf = format == "gguf";
  if (gguf && request.contains("dtype")) {
    return error_response(ApiError::kInvalidArgument, "dtype is for safetensors; a GGUF file's type is outtype");
  }
  if (!gguf && request.contains("outtype")) return error_response(ApiError::kInvalidArgument, "outtype is for gguf");
  const std::string type = gguf ? request.value("outtype", "f16") : request.value("dtype", "auto");
  if (gguf && !kOuttypes.contains(type)) {
    return error_response(ApiError::kInvalidArgument, "outtype: expected f16, bf16, f32 or q8_0, got \"" + type + "\"");
  }
  if (!gguf && !kDtypes.contains(type)) {
    return error_response(ApiError::kInvalidArgument, "dtype: expected auto, fp32, bf16 or fp16, got \"" + type + "\"");
  }
  if (runner_.empty()) return error_response(ApiError::kUnavailable, "this tailord has no runner to export with");
  if (busy_.exchange(true)) {
    return error_response(ApiError::kUnavailable, "tailord is writing another export (one at a time); try again");
  }
  struct Release {
    std::atomic<bool>& busy;
    ~Release() { busy = false; }
  } release{busy_};

  const std::string relative = "exports/model-" + type + (gguf ? ".gguf" : "");
  const fs::path dest = fs::path(output_dir) / relative;
  std::error_code ec;
  fs::create_directories(dest.parent_path(), ec);
  fs::create_directories(log_dir_, ec);
  const std::string log = (fs::path(log_dir_) / ("export-" + job.id + ".log")).string();
  fs::remove(log, ec);
  platform::LaunchRequest launch;
  launch.argv = {runner_, "export", output_dir, "--format", format, gguf ? "--outtype" : "--dtype", type,
                 "-o",    dest.string(), "--force", "--output", "json"};
  launch.log_path = log;
  launch.parent_death_signal = SIGKILL;
  const auto started = std::chrono::steady_clock::now();
  auto child = platform::launch_process(launch);
  if (!child.is_ok()) return error_response(ApiError::kUnavailable, "tailor-runner export: " + child.status().message());
  std::optional<platform::ProcessExit> exit;
  // The export is a bounded batch job: its end is polled, and it is killed
  // past the timeout.
  while (true) {
    auto reaped = platform::reap_child(child->pid);
    if (!reaped.is_ok()) return error_response(ApiError::kInternal, "tailor-runner export: " + reaped.status().message());
    if (*reaped) {
      exit = *reaped;
      break;
    }
    if (std::chrono::steady_clock::now() - started > std::chrono::duration<double>(timeout_)) {
      platform::signal_group(child->pid, SIGKILL);
      (void)platform::wait_child(child->pid);
      fs::remove(dest.string() + ".tmp", ec);
      return error_response(ApiError::kUnavailable,
                            "the export of job " + job.id + " ran past " + std::to_string(int(timeout_)) + " s and was stopped");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  if (exit->code != 0) {
    const std::string why = message_of(text.str());
    log_info("exports: job " + job.id + ": " + why);
    if (exit->code == 1) return error_response(ApiError::kNotExportable, why);
    return error_response(ApiError::kIoError, why);
  }
  json result = last_json_line(text.str());
  if (!result.is_object()) return error_response(ApiError::kInternal, "tailor-runner export printed no summary");
  // Paths as the job's files name them; the host's folders stay private.
  const bool modelfile = result.contains("modelfile") && result["modelfile"].is_string();
  for (const char* key : {"file", "dir", "base", "adapter", "modelfile"})
    result.erase(key);
  result["job_id"] = job.id;
  result["path"] = relative;
  // The Ollama Modelfile the runner writes beside a GGUF file.
  if (gguf) result["modelfile"] = modelfile ? json("exports/model-" + type + ".Modelfile") : json();
  log_info("exports: job " + job.id + " exported to " + relative);
  return HttpResponse::json(201, result.dump());
}

}  // namespace tailor::daemon
