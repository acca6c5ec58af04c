#include "daemon/executor/run_files.h"

#include <signal.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/units.h"
#include "runner/protocol/events.h"
#include "runner/protocol/exit_code.h"

namespace tailor::daemon {

using nlohmann::json;

Result<std::string> read_bytes_from(const std::string& path, std::int64_t& offset, std::int64_t max_bytes) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::string();
  f.seekg(0, std::ios::end);
  const std::int64_t size = f.tellg();
  if (size < offset) offset = 0;  // truncated or replaced: start again
  const std::int64_t n = std::min(size - offset, max_bytes);
  if (n <= 0) return std::string();
  std::string out(static_cast<std::size_t>(n), '\0');
  f.seekg(offset);
  f.read(out.data(), n);
  if (f.gcount() != n) return Status::io_error("reading " + path);
  offset += n;
  return out;
}

Result<std::vector<std::string>> read_new_lines(const std::string& path, std::int64_t& offset, std::int64_t max_bytes) {
  std::int64_t pos = offset;
  TAILOR_ASSIGN_OR_RETURN(std::string chunk, read_bytes_from(path, pos, max_bytes));
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (;;) {
    const auto nl = chunk.find('\n', start);
    if (nl == std::string::npos) break;
    if (nl > start) lines.push_back(chunk.substr(start, nl - start));
    start = nl + 1;
  }
  offset = (pos - static_cast<std::int64_t>(chunk.size())) + static_cast<std::int64_t>(start);
  return lines;
}

namespace {

template <class T>
std::optional<T> opt(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if constexpr (std::is_same_v<T, double>) {
    if (!it->is_number()) return std::nullopt;
  } else {
    if (!it->is_number_integer() && !it->is_number_unsigned()) return std::nullopt;
  }
  return it->get<T>();
}

}  // namespace

std::optional<StepMetric> parse_metric_line(const std::string& line, std::int64_t attempt) {
  const json j = json::parse(line, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  auto step = opt<std::int64_t>(j, "step");
  if (!step) return std::nullopt;
  StepMetric m;
  m.step = *step;
  m.rank = opt<std::int64_t>(j, "rank").value_or(0);
  m.attempt = attempt;
  m.time = opt<double>(j, "time").value_or(now_seconds());
  m.loss = opt<double>(j, "loss");
  m.lr = opt<double>(j, "lr");
  m.grad_norm = opt<double>(j, "grad_norm");
  m.tokens = opt<std::int64_t>(j, "tokens");
  m.tokens_per_second = opt<double>(j, "tokens_per_second");
  m.step_seconds = opt<double>(j, "step_seconds");
  m.eval_loss = opt<double>(j, "eval_loss");
  m.eval_tokens = opt<std::int64_t>(j, "eval_tokens");
  m.eval_seconds = opt<double>(j, "eval_seconds");
  m.mfu = opt<double>(j, "mfu");
  for (const PreferenceMetric& p : kPreferenceMetrics) {
    if (auto v = opt<double>(j, p.key)) m.preference[p.key] = *v;
  }
  if (auto mem = j.find("memory"); mem != j.end() && mem->is_object()) {
    m.allocated_bytes = opt<std::int64_t>(*mem, "allocated_bytes");
    m.peak_bytes = opt<std::int64_t>(*mem, "peak_bytes");
    for (const auto& name : memory_component_names()) {
      if (auto v = opt<std::int64_t>(*mem, name.c_str())) m.component_bytes[name] = *v;
    }
  }
  if (auto ranks = j.find("ranks"); ranks != j.end() && ranks->is_array()) {
    for (const json& r : *ranks) {
      if (!r.is_object()) continue;
      auto rank = opt<std::int64_t>(r, "rank");
      auto peak = opt<std::int64_t>(r, "peak_bytes");
      if (rank && peak && *rank >= 0 && *rank < 4096) m.rank_peak_bytes[*rank] = *peak;
    }
  }
  return m;
}

namespace {

// strategy.probe's events in words: "probe 2: bf16, micro-batch 8, adamw:
// 7012 tokens/s, peak 118.0 MiB (predicted 7305 tokens/s, 121.0 MiB)".
std::string probe_message(const std::string& kind, const json& j) {
  const std::string summary = j.value("summary", std::string());
  if (kind == runner::events::kProbeStart) {
    return "probing " + std::to_string(j.value("candidates", 0)) + " plans before training (strategy.probe)";
  }
  char buf[256];
  if (kind == runner::events::kProbeDone) {
    std::snprintf(buf, sizeof buf, "probed in %.1f s: ", j.value("seconds", 0.0));
    const std::int64_t chosen = j.value("chosen", std::int64_t{-1});
    return buf + (chosen >= 0 ? "training plan " + std::to_string(chosen + 1) + ", " + summary
                              : std::string("no plan fitted; training the planner's choice"));
  }
  const std::string outcome = j.value("outcome", std::string());
  std::string out = "probe " + std::to_string(j.value("index", std::int64_t{0}) + 1) + ": " + summary + ": ";
  if (outcome == "fits") {
    std::snprintf(buf, sizeof buf, "%.0f tokens/s, peak %s (predicted %.0f tokens/s, %s)",
                  j.value("tokens_per_second", 0.0), Bytes(j.value("peak_bytes", std::int64_t{0})).to_string().c_str(),
                  j.value("predicted_tokens_per_second", 0.0),
                  Bytes(j.value("predicted_peak_bytes", std::int64_t{0})).to_string().c_str());
    return out + buf;
  }
  return out + outcome + (j.contains("message") ? ": " + j.value("message", std::string()) : std::string());
}

}  // namespace

std::optional<NewEvent> parse_event_line(const std::string& line) {
  const json j = json::parse(line, nullptr, false);
  if (!j.is_object() || !j.contains("event") || !j["event"].is_string()) return std::nullopt;
  NewEvent e;
  const std::string kind = j["event"].get<std::string>();
  e.kind = "runner." + kind;
  e.time = opt<double>(j, "time").value_or(0);
  e.data_json = j.dump();
  auto text = [&](const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  if (kind == runner::events::kProbeStart || kind == runner::events::kProbe || kind == runner::events::kProbeDone) {
    e.message = probe_message(kind, j);
  } else if (auto msg = j.find("message"); msg != j.end() && msg->is_string()) {
    e.message = msg->get<std::string>();
  } else if (kind == runner::events::kOom) {
    e.message = "out of memory at step " + std::to_string(opt<std::int64_t>(j, "step").value_or(0)) + ": requested " +
                std::to_string(opt<std::int64_t>(j, "requested_bytes").value_or(0)) + " bytes with " +
                std::to_string(opt<std::int64_t>(j, "in_use_bytes").value_or(0)) + " in use of a " +
                std::to_string(opt<std::int64_t>(j, "budget_bytes").value_or(0)) + "-byte budget";
  } else if (kind == runner::events::kTracker) {
    // "mlflow down: POST http://...: Couldn't connect to server"
    e.message = text("tracker") + " " + text("state");
    if (!text("error").empty()) e.message += ": " + text("error");
  } else if (auto step = opt<std::int64_t>(j, "step")) {
    e.message = kind + " at step " + std::to_string(*step);
  } else {
    e.message = kind;
  }
  return e;
}

platform::ProcessExit exit_in_events(const std::vector<std::string>& event_lines) {
  const auto code = runner::events::exit_from_events(event_lines);
  return code ? platform::ProcessExit{runner::exit_status(*code), 0} : platform::ProcessExit{-1, SIGKILL};
}

platform::ProcessExit exit_in_events_file(const std::string& dir) {
  std::int64_t off = 0;
  auto lines = read_new_lines(dir + "/events.jsonl", off, std::int64_t{1} << 30);
  return exit_in_events(lines.is_ok() ? *lines : std::vector<std::string>{});
}

}  // namespace tailor::daemon
