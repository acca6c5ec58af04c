#include "runner/protocol/probe.h"

#include "runner/protocol/probe_json.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>

#include "core/units.h"
#include "strategies/calibration.h"

namespace tailor::runner {

using nlohmann::json;

const char* to_string(ProbeMeasurement::Outcome o) {
  switch (o) {
    case ProbeMeasurement::Outcome::kFits: return "fits";
    case ProbeMeasurement::Outcome::kOutOfMemory: return "out_of_memory";
    case ProbeMeasurement::Outcome::kFailed: return "failed";
  }
  return "failed";
}

int choose_probed(const std::vector<ProbeCandidate>& candidates, double tie_band) {
  auto score = [&](std::size_t i) -> double {
    const auto& m = candidates[i].measured;
    if (!m || m->outcome != ProbeMeasurement::Outcome::kFits) return -1;
    return m->tokens_per_second * candidates[i].fidelity_factor;
  };
  double best = -1;
  for (std::size_t i = 0; i < candidates.size(); ++i)
    best = std::max(best, score(i));
  if (best < 0) return -1;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (score(i) >= 0 && score(i) >= best * (1.0 - tie_band)) return static_cast<int>(i);
  }
  return -1;
}

bool same_candidates(const ProbeTable& a, const ProbeTable& b) {
  if (a.candidates.size() != b.candidates.size()) return false;
  for (std::size_t i = 0; i < a.candidates.size(); ++i) {
    if (a.candidates[i].summary != b.candidates[i].summary) return false;
  }
  return true;
}

namespace {

json measurement_json(const ProbeMeasurement& m) {
  json out = {{"outcome", to_string(m.outcome)}, {"tokens_per_second", m.tokens_per_second},
              {"step_seconds", m.step_seconds},  {"peak_bytes", m.peak_bytes},
              {"budget_bytes", m.budget_bytes},  {"seconds", m.seconds}};
  if (m.reserved_bytes > 0) out["reserved_bytes"] = m.reserved_bytes;
  if (m.contention >= 0) out["contention"] = m.contention;
  if (!m.message.empty()) out["message"] = m.message;
  return out;
}

}  // namespace

std::string measurement_json_text(const ProbeMeasurement& m) { return measurement_json(m).dump(); }

Result<ProbeMeasurement> parse_measurement(const std::string& text, const std::string& name) {
  return measurement_from_json(json::parse(text, nullptr, /*allow_exceptions=*/false), name);
}

Result<ProbeMeasurement> measurement_from_json(const json& m, const std::string& name) {
  if (m.is_discarded() || !m.is_object()) return Status::invalid_argument(name + ": not a JSON measurement");
  ProbeMeasurement pm;
  try {
    const std::string outcome = m.at("outcome").get<std::string>();
    pm.outcome = outcome == "fits"            ? ProbeMeasurement::Outcome::kFits
                 : outcome == "out_of_memory" ? ProbeMeasurement::Outcome::kOutOfMemory
                                              : ProbeMeasurement::Outcome::kFailed;
    pm.tokens_per_second = m.at("tokens_per_second").get<double>();
    pm.step_seconds = m.at("step_seconds").get<double>();
    pm.peak_bytes = m.at("peak_bytes").get<std::int64_t>();
    pm.reserved_bytes = m.value("reserved_bytes", std::int64_t{0});
    pm.budget_bytes = m.at("budget_bytes").get<std::int64_t>();
    pm.seconds = m.at("seconds").get<double>();
    pm.contention = m.value("contention", -1.0);
    pm.message = m.value("message", std::string());
  } catch (const json::exception& e) {
    return Status::invalid_argument(name + ": malformed measurement: " + e.what());
  }
  return pm;
}

std::string probe_rank_file(const std::string& out_dir, std::size_t candidate, int rank) {
  return out_dir + "/probe/candidate-" + std::to_string(candidate) + ".rank-" + std::to_string(rank) + ".json";
}

ProbeMeasurement combine_rank_measurements(const std::vector<std::optional<ProbeMeasurement>>& ranks,
                                           const std::string& ended) {
  using Outcome = ProbeMeasurement::Outcome;
  ProbeMeasurement out;
  bool all_fit = !ranks.empty();
  for (const auto& m : ranks) {
    all_fit = all_fit && m && m->outcome == Outcome::kFits;
    if (!m) continue;
    out.peak_bytes = std::max(out.peak_bytes, m->peak_bytes);
    out.reserved_bytes = std::max(out.reserved_bytes, m->reserved_bytes);
    out.budget_bytes = std::max(out.budget_bytes, m->budget_bytes);
    // The job's speed is its slowest rank's: the busiest rank says how
    // busy the machine was.
    out.contention = std::max(out.contention, m->contention);
  }
  if (all_fit) {
    out.outcome = Outcome::kFits;
    out.tokens_per_second = ranks.front()->tokens_per_second;
    for (const auto& m : ranks) {
      out.tokens_per_second = std::min(out.tokens_per_second, m->tokens_per_second);
      out.step_seconds = std::max(out.step_seconds, m->step_seconds);
    }
    return out;
  }
  // The first rank out of memory decides (the others were stopped by it, or
  // failed at a collective it left); else the first that failed.
  for (const Outcome decides : {Outcome::kOutOfMemory, Outcome::kFailed}) {
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      if (!ranks[r] || ranks[r]->outcome != decides) continue;
      out.outcome = decides;
      out.message = "rank " + std::to_string(r) + ": " + ranks[r]->message;
      return out;
    }
  }
  out.outcome = Outcome::kFailed;
  out.message = ended.empty() ? "the ranks ended without measuring" : ended;
  return out;
}

Result<std::string> probed_plan_json(const std::string& plan_json, const ProbeTable& measured) {
  json plan = json::parse(plan_json, nullptr, /*allow_exceptions=*/false);
  if (plan.is_discarded() || !plan.is_object() || !plan.contains("probe") || !plan["probe"].is_object()) {
    return Status::invalid_argument("the plan document asks for no probe");
  }
  json& probe = plan["probe"];
  json& candidates = probe["candidates"];
  if (!candidates.is_array() || candidates.size() != measured.candidates.size()) {
    return Status::invalid_argument("the plan document's probe has " + std::to_string(candidates.size()) +
                                    " candidates, the measurements " + std::to_string(measured.candidates.size()));
  }
  try {
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      if (measured.candidates[i].measured)
        candidates[i]["measured"] = measurement_json(*measured.candidates[i].measured);
    }
    probe["chosen"] = measured.chosen;
    probe["seconds"] = measured.seconds;
    if (measured.chosen >= 0) {
      // The plan trains the chosen candidate: its figures in the plan's places.
      const json& c = candidates[static_cast<std::size_t>(measured.chosen)];
      plan["summary"] = c.at("summary");
      plan["strategy"] = c.at("strategy");
      plan["memory"]["per_gpu"] = c.at("per_gpu");
      plan["memory"]["spare_per_gpu"] = c.at("spare_per_gpu");
      plan["memory"]["reserved_per_gpu"] = c.at("reserved_per_gpu");
      plan["memory"]["host_total"] = c.at("host_total");
      plan["throughput"] = c.at("throughput");
    }
  } catch (const json::exception& e) {
    return Status::invalid_argument(std::string("malformed probe in the plan document: ") + e.what());
  }
  return plan.dump(2) + "\n";
}

std::string format_probe_table(const ProbeTable& t, bool on_gpu) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-3s %-58s %12s %11s %12s %11s  %s\n", "#", "plan", "predicted", "", "measured", "",
                "outcome");
  out += line;
  std::snprintf(line, sizeof line, "%-3s %-58s %12s %11s %12s %11s\n", "", "", "tokens/s", on_gpu ? "peak/GPU" : "peak",
                "tokens/s", on_gpu ? "peak/GPU" : "peak");
  out += line;
  for (std::size_t i = 0; i < t.candidates.size(); ++i) {
    const ProbeCandidate& c = t.candidates[i];
    std::string mark = std::to_string(i + 1) + (static_cast<int>(i) == t.chosen ? "*" : "");
    std::string summary = c.summary.size() > 58 ? c.summary.substr(0, 55) + "..." : c.summary;
    std::string tps = "-", peak = "-", outcome = "not measured";
    if (c.measured) {
      const ProbeMeasurement& m = *c.measured;
      char buf[64];
      if (m.outcome == ProbeMeasurement::Outcome::kFits) {
        std::snprintf(buf, sizeof buf, "%.0f", m.tokens_per_second);
        tps = buf;
      }
      peak = Bytes(m.peak_bytes).to_string();
      outcome = to_string(m.outcome);
      if (m.outcome == ProbeMeasurement::Outcome::kFits && c.predicted_peak > 0) {
        std::snprintf(buf, sizeof buf, " (peak %+.1f%%, speed %+.1f%% against the prediction)",
                      100.0 * (static_cast<double>(m.peak_bytes) / static_cast<double>(c.predicted_peak) - 1.0),
                      100.0 * (m.tokens_per_second / std::max(1e-9, c.predicted_tokens_per_second) - 1.0));
        outcome += buf;
      } else if (!m.message.empty()) {
        outcome += ": " + m.message;
      }
    }
    std::snprintf(line, sizeof line, "%-3s %-58s %12.0f %11s %12s %11s  %s\n", mark.c_str(), summary.c_str(),
                  c.predicted_tokens_per_second, Bytes(c.predicted_peak).to_string().c_str(), tps.c_str(), peak.c_str(),
                  outcome.c_str());
    out += line;
  }
  if (!t.limited.empty()) out += t.limited + "\n";
  if (t.measured()) {
    std::snprintf(line, sizeof line, "probed in %.1f s; ", t.seconds);
    out += line;
    out += t.chosen >= 0 ? "training plan " + std::to_string(t.chosen + 1) + " (*), the fastest measured that fits\n"
                         : "no candidate fitted: the plan's own choice stays\n";
    double busiest = -1;
    for (const ProbeCandidate& c : t.candidates) {
      if (c.measured) busiest = std::max(busiest, c.measured->contention);
    }
    if (busiest > strategies::kMaxSpeedContention) {
      std::snprintf(line, sizeof line,
                    "other processes held up to %.0f%% of the cores the steps needed: the speeds rank these "
                    "candidates but will not calibrate later plans\n",
                    100.0 * busiest);
      out += line;
    }
  }
  return out;
}

}  // namespace tailor::runner
