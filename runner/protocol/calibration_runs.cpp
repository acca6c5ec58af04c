#include "runner/protocol/calibration_runs.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "runner/protocol/probe.h"

namespace tailor::runner {
namespace {

using nlohmann::json;

// The key and the factors the plan applied (1 without a calibration).
struct PlanContext {
  strategies::CalibrationKey key;
  double memory = 1.0, speed = 1.0;
};

std::optional<PlanContext> plan_context(const json& plan) {
  if (!plan.is_object() || !plan.contains("calibration_key") || !plan["calibration_key"].is_object())
    return std::nullopt;
  PlanContext c;
  const json& k = plan["calibration_key"];
  c.key = {k.value("machine", std::string()), k.value("runtime", std::string()), k.value("family", std::string())};
  if (plan.contains("calibration") && plan["calibration"].is_object()) {
    c.memory = std::max(1e-9, plan["calibration"].value("memory_factor", 1.0));
    c.speed = std::max(1e-9, plan["calibration"].value("speed_factor", 1.0));
  }
  return c;
}

}  // namespace

std::vector<CalibrationRun> probe_calibration(const std::string& probed_plan_json) {
  std::vector<CalibrationRun> out;
  const json plan = json::parse(probed_plan_json, nullptr, false);
  const auto ctx = plan_context(plan);
  auto table = parse_probe(probed_plan_json, "the probed plan");
  if (!ctx || !table.is_ok() || !*table || !(*table)->measured()) return out;
  for (const ProbeCandidate& c : (*table)->candidates) {
    if (!c.measured || c.measured->outcome != ProbeMeasurement::Outcome::kFits) continue;
    CalibrationRun r{ctx->key, "probe", c.summary, {}};
    r.sample.predicted_peak = static_cast<double>(c.predicted_peak) / ctx->memory;
    r.sample.measured_peak = static_cast<double>(c.measured->peak_bytes);
    r.sample.predicted_tokens_per_second = c.predicted_tokens_per_second / ctx->speed;
    r.sample.measured_tokens_per_second = c.measured->tokens_per_second;
    r.sample.contention = std::max(0.0, c.measured->contention);
    out.push_back(std::move(r));
  }
  return out;
}

std::optional<CalibrationRun> run_calibration(const std::string& plan_json,
                                              const std::vector<std::string>& metrics_lines) {
  const json plan = json::parse(plan_json, nullptr, false);
  const auto ctx = plan_context(plan);
  if (!ctx) return std::nullopt;
  double peak = 0;
  std::vector<double> speeds, contention;
  for (const std::string& line : metrics_lines) {
    const json m = json::parse(line, nullptr, false);
    if (!m.is_object() || m.value("rank", 0) != 0 || !m.contains("step")) continue;
    if (m.contains("memory") && m["memory"].is_object()) {
      peak = std::max(peak, m["memory"].value("peak_bytes", 0.0));
    }
    if (m.value("step", 0) > 1 && m.contains("tokens_per_second") && m["tokens_per_second"].is_number()) {
      speeds.push_back(m["tokens_per_second"].get<double>());
      if (m.contains("contention") && m["contention"].is_number()) contention.push_back(m["contention"].get<double>());
    }
  }
  if (speeds.empty() || peak <= 0) return std::nullopt;
  std::sort(speeds.begin(), speeds.end());
  CalibrationRun r{ctx->key, "job", plan.value("summary", std::string()), {}};
  try {
    r.sample.predicted_peak = plan.at("memory").at("per_gpu").at("total").get<double>() / ctx->memory;
    r.sample.predicted_tokens_per_second = plan.at("throughput").at("tokens_per_second").get<double>() / ctx->speed;
  } catch (const json::exception&) {
    return std::nullopt;
  }
  r.sample.measured_peak = peak;
  r.sample.measured_tokens_per_second = speeds[speeds.size() / 2];
  if (!contention.empty()) {
    std::sort(contention.begin(), contention.end());
    r.sample.contention = contention[contention.size() / 2];
  }
  return r;
}

}  // namespace tailor::runner
