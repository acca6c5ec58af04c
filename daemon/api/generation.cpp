#include "daemon/api/generation.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "daemon/api/resource_json.h"
#include "daemon/http/errors.h"
#include "platform/process.h"

namespace tailor::daemon {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string sse(const char* event, const json& data) {
  return std::string("event: ") + event + "\ndata: " + data.dump() + "\n\n";
}

// One generation's process and what it has written so far. Destroyed with
// the response's stream: a process still running then (the client left)
// is killed.
struct Run {
  pid_t pid = -1;
  bool reaped = false;
  std::string dir, output;
  std::uint64_t offset = 0;
  std::string partial;      // the start of a line not yet complete
  std::string errors;       // what the runner said that is not an event
  json done;                // its final result
  Clock::time_point started = Clock::now();
  double timeout_seconds = 0;
  std::shared_ptr<std::atomic<int>> running;

  ~Run() {
    if (!reaped && pid > 0) {
      platform::signal_group(pid, SIGKILL);
      (void)platform::wait_child(pid);
    }
    release();
  }

  // The slot and the scratch files, as soon as the stream's last event is
  // out: the server may keep the stream a while longer.
  void release() {
    if (released) return;
    released = true;
    std::error_code ec;
    fs::remove_all(dir, ec);
    running->fetch_sub(1);
  }
  bool released = false;

  // New complete lines of the output as events.
  std::string drain() {
    std::ifstream in(output, std::ios::binary);
    if (!in) return {};
    in.seekg(static_cast<std::streamoff>(offset));
    std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    offset += chunk.size();
    partial += chunk;
    std::string out;
    for (std::size_t nl; (nl = partial.find('\n')) != std::string::npos;) {
      const std::string line = partial.substr(0, nl);
      partial.erase(0, nl + 1);
      const json e = json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (e.is_object() && e.value("event", std::string()) == "token") {
        out += sse("token", json{{"id", e.value("id", 0)}, {"text", e.value("text", std::string())}});
      } else if (e.is_object() && e.value("event", std::string()) == "done") {
        done = e;
        done.erase("event");
      } else if (!line.empty()) {
        constexpr std::string_view kPrefix = "tailor-runner generate: ";
        errors += (errors.empty() ? "" : "\n") + (line.rfind(kPrefix, 0) == 0 ? line.substr(kPrefix.size()) : line);
      }
    }
    return out;
  }

  // Appends what is new; false once the stream is over.
  bool poll(std::string& out) {
    const bool more = step(out);
    if (!more) release();
    return more;
  }

  bool step(std::string& out) {
    out += drain();
    if (!reaped) {
      auto exit = platform::reap_child(pid);
      if (exit.is_ok() && !exit->has_value()) {
        const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
        if (seconds <= timeout_seconds) return true;
        platform::signal_group(pid, SIGKILL);
        (void)platform::wait_child(pid);
        reaped = true;
        out += sse("error", json{{"error", "unavailable"},
                                 {"message", "the generation took longer than " +
                                                 std::to_string(static_cast<int>(timeout_seconds)) +
                                                 " s and was stopped"}});
        return false;
      }
      reaped = true;
      out += drain();
      const int code = exit.is_ok() ? (**exit).code : -1;
      if (code == 0 && done.is_object()) {
        out += sse("done", done);
        return false;
      }
      // 1 and 2: the request (a prompt too long, a template that raised).
      const bool bad_input = code == 1 || code == 2;
      out += sse("error", json{{"error", bad_input ? "invalid_argument" : "internal"},
                               {"message", errors.empty() ? "tailor-runner generate exited " + std::to_string(code)
                                                          : errors}});
      return false;
    }
    return false;
  }
};

HttpResponse bad(const std::string& message) { return error_response(ApiError::kInvalidArgument, message); }

}  // namespace

Generations::Generations(std::string runner_path, std::string scratch_dir, GenerationLimits limits)
    : runner_(std::move(runner_path)), scratch_(std::move(scratch_dir)), limits_(limits) {
  // What an earlier tailord left when it stopped mid-generation.
  std::error_code ec;
  if (!scratch_.empty()) fs::remove_all(scratch_, ec);
}

HttpResponse Generations::start(const JobRecord& job, const std::string& output_dir, const std::string& body) {
  if (job.state != JobState::kSucceeded) {
    return error_response(ApiError::kConflict, "job " + job.id + " has not succeeded (state: " +
                                                   to_string(job.state) +
                                                   "); only a finished job has a model to generate with");
  }
  std::error_code ec;
  if (!fs::is_directory(output_dir, ec)) {
    return error_response(ApiError::kNotFound, "job " + job.id + "'s output folder is gone");
  }
  const json req = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!req.is_object()) return bad("the body must be a JSON object");
  static const std::vector<std::string> kKeys = {
      "prompt", "messages", "tools", "prompt_ids",         "max_tokens",       "temperature",      "top_p",
      "top_k",  "min_p",    "seed",  "repetition_penalty", "presence_penalty", "frequency_penalty"};
  for (const auto& [key, value] : req.items()) {
    if (std::find(kKeys.begin(), kKeys.end(), key) == kKeys.end()) return bad("unknown field \"" + key + "\"");
  }
  const int prompts = int(req.contains("prompt")) + int(req.contains("messages")) + int(req.contains("prompt_ids"));
  if (prompts != 1) return bad("give one of prompt, messages and prompt_ids");
  if (req.contains("prompt") && (!req["prompt"].is_string() || req["prompt"].get<std::string>().empty())) {
    return bad("prompt: expected a non-empty string");
  }
  if (req.contains("messages")) {
    const json& m = req["messages"];
    if (!m.is_array() || m.empty()) return bad("messages: expected a non-empty list of turns");
    for (std::size_t i = 0; i < m.size(); ++i) {
      if (!m[i].is_object() || !m[i].contains("role") || !m[i]["role"].is_string()) {
        return bad("messages[" + std::to_string(i) + "]: a turn is an object with a string role and its content");
      }
    }
  }
  if (req.contains("tools") && !req.contains("messages")) return bad("tools: goes with messages");
  if (req.contains("tools") && !req["tools"].is_array()) return bad("tools: expected a list");
  std::string ids;
  if (req.contains("prompt_ids")) {
    const json& p = req["prompt_ids"];
    // The ids go on the runner's command line, whose arguments hold 128 KiB each.
    if (!p.is_array() || p.empty() || p.size() > 8192) return bad("prompt_ids: expected 1 to 8192 token ids");
    for (const json& id : p) {
      if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() > INT32_MAX) {
        return bad("prompt_ids: " + id.dump() + " is not a token id");
      }
      ids += (ids.empty() ? "" : ",") + std::to_string(id.get<std::int64_t>());
    }
  }
  std::vector<std::string> sampling;
  auto integer = [&](const char* key, std::int64_t lo, std::int64_t hi, const char* flag) -> std::optional<HttpResponse> {
    if (!req.contains(key)) return std::nullopt;
    const json& v = req[key];
    if (!v.is_number_integer() || v.get<std::int64_t>() < lo || v.get<std::int64_t>() > hi) {
      return bad(std::string(key) + ": expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    sampling.insert(sampling.end(), {flag, std::to_string(v.get<std::int64_t>())});
    return std::nullopt;
  };
  auto number = [&](const char* key, double lo, double hi, bool lo_open, const char* flag) -> std::optional<HttpResponse> {
    if (!req.contains(key)) return std::nullopt;
    const json& v = req[key];
    const double x = v.is_number() ? v.get<double>() : NAN;
    if (!v.is_number() || !std::isfinite(x) || x < lo || (lo_open && x == lo) || x > hi) {
      return bad(std::string(key) + ": expected a number in " + (lo_open ? "(" : "[") + json(lo).dump() + ", " +
                 json(hi).dump() + "]");
    }
    char text[64];
    std::snprintf(text, sizeof text, "%.17g", x);
    sampling.insert(sampling.end(), {flag, text});
    return std::nullopt;
  };
  if (auto e = integer("max_tokens", 1, limits_.max_tokens, "--max-tokens")) return *e;
  if (auto e = number("temperature", 0, 100, false, "--temperature")) return *e;
  if (auto e = number("top_p", 0, 1, true, "--top-p")) return *e;
  if (auto e = integer("top_k", 0, INT32_MAX, "--top-k")) return *e;
  if (auto e = integer("seed", 0, INT64_MAX, "--seed")) return *e;
  // Above 0, as transformers requires; capped at 100 as the temperature is.
  if (auto e = number("repetition_penalty", 0, 100, true, "--repetition-penalty")) return *e;
  if (auto e = number("presence_penalty", -2, 2, false, "--presence-penalty")) return *e;
  if (auto e = number("frequency_penalty", -2, 2, false, "--frequency-penalty")) return *e;
  if (auto e = number("min_p", 0, 1, false, "--min-p")) return *e;

  if (scratch_.empty() || runner_.empty()) {
    return error_response(ApiError::kUnavailable, "this tailord has no runner to generate with");
  }
  if (running_->fetch_add(1) >= limits_.concurrency) {
    running_->fetch_sub(1);
    return error_response(ApiError::kUnavailable, "tailord is generating already (at most " +
                                                      std::to_string(limits_.concurrency) + " at once); try again");
  }
  auto run = std::make_shared<Run>();
  run->running = running_;  // from here the run gives the slot back
  run->timeout_seconds = limits_.timeout_seconds;
  run->dir = (fs::path(scratch_) / ("generate-" + std::to_string(::getpid()) + "-" + std::to_string(next_++))).string();
  run->output = run->dir + "/events.jsonl";
  fs::create_directories(run->dir, ec);
  if (ec) return error_response(Status::io_error("cannot create " + run->dir + ": " + ec.message()));

  platform::LaunchRequest launch;
  launch.argv = {runner_, "generate", output_dir};
  // Text goes through a file: one argument of the command line holds at
  // most 128 KiB (MAX_ARG_STRLEN), a request body more.
  if (req.contains("prompt")) {
    const std::string file = run->dir + "/prompt.txt";
    std::ofstream(file, std::ios::binary) << req["prompt"].get<std::string>();
    launch.argv.insert(launch.argv.end(), {"--prompt-file", file});
  }
  if (req.contains("prompt_ids")) launch.argv.insert(launch.argv.end(), {"--prompt-ids", ids});
  if (req.contains("messages")) {
    json conversation{{"messages", req["messages"]}};
    if (req.contains("tools")) conversation["tools"] = req["tools"];
    const std::string file = run->dir + "/messages.json";
    std::ofstream(file, std::ios::binary) << conversation.dump();
    launch.argv.insert(launch.argv.end(), {"--messages", file});
  }
  launch.argv.insert(launch.argv.end(), sampling.begin(), sampling.end());
  launch.argv.insert(launch.argv.end(), {"--device", "cpu", "--output", "events", "--quiet"});
  launch.log_path = run->output;
  launch.parent_death_signal = SIGKILL;
  auto child = platform::launch_process(launch);
  if (!child.is_ok()) return error_response(child.status());
  run->pid = child->pid;
  log_info("generate: job " + job.id + ", process " + std::to_string(run->pid));

  HttpResponse res;
  res.content_type = "text/event-stream";
  res.headers.emplace_back("Cache-Control", "no-store");
  res.stream = [run](std::string& out) { return run->poll(out); };
  return res;
}

}  // namespace tailor::daemon
