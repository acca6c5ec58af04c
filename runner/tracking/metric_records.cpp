#include "runner/tracking/metric_records.h"

namespace tailor::runner::tracking {
namespace {

using Json = nlohmann::json;

void add_numbers(const Json& v, const std::string& tag, std::vector<Scalar>& out) {
  if (v.is_boolean()) {
    out.push_back({tag, v.get<bool>() ? 1.0 : 0.0});
  } else if (v.is_number()) {
    out.push_back({tag, v.get<double>()});
  } else if (v.is_object()) {
    for (const auto& [k, sub] : v.items()) add_numbers(sub, tag + "/" + k, out);
  }
}

std::string scalar_text(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "";
  return v.dump();
}

void flatten(const Json& v, const std::string& key, std::map<std::string, std::string>& out) {
  if (v.is_object() && !v.empty()) {
    for (const auto& [k, sub] : v.items()) flatten(sub, key + "." + k, out);
  } else {
    out[key] = scalar_text(v);
  }
}

}  // namespace

std::optional<MetricRecord> parse_metrics_line(std::string_view line, double fallback_time) {
  Json j = Json::parse(line, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  auto step = j.find("step");
  if (step == j.end() || !step->is_number_integer()) return std::nullopt;
  MetricRecord r;
  r.step = step->get<std::int64_t>();
  auto time = j.find("time");
  r.time = time != j.end() && time->is_number() ? time->get<double>() : fallback_time;
  for (const auto& [k, v] : j.items()) {
    if (k == "step" || k == "time") continue;
    if (k.rfind("eval_", 0) == 0) {
      add_numbers(v, "eval/" + k.substr(5), r.scalars);
    } else if (k == "memory") {
      for (const auto& [m, x] : v.items()) add_numbers(x, "memory/" + m, r.scalars);
    } else if (k == "host") {
      for (const auto& [m, x] : v.items()) add_numbers(x, "memory_host/" + m, r.scalars);
    } else if (k == "ranks" && v.is_array()) {
      for (const Json& rank : v) {
        const std::string prefix = "rank" + std::to_string(rank.value("rank", 0)) + "/";
        for (const auto& [m, x] : rank.items()) {
          if (m != "rank") add_numbers(x, prefix + m, r.scalars);
        }
      }
    } else {
      add_numbers(v, "train/" + k, r.scalars);
    }
  }
  return r;
}

MetricRecord plan_estimates(const Json& plan, double time) {
  MetricRecord r;
  r.time = time;
  const Json per_gpu = plan.value("/memory/per_gpu"_json_pointer, Json::object());
  for (const auto& [k, v] : per_gpu.items()) {
    if (v.is_number()) r.scalars.push_back({"memory_estimated/" + k + "_bytes", v.get<double>()});
  }
  for (const char* k : {"step_seconds", "tokens_per_second"}) {
    const Json v = plan.value(Json::json_pointer(std::string("/throughput/") + k), Json());
    if (v.is_number()) r.scalars.push_back({std::string("plan/") + k, v.get<double>()});
  }
  return r;
}

std::map<std::string, std::string> spec_params(const Json& plan) {
  std::map<std::string, std::string> out;
  auto spec = plan.find("spec");
  if (spec != plan.end() && spec->is_object()) flatten(*spec, "spec", out);
  return out;
}

std::map<std::string, std::string> plan_params(const Json& plan) {
  std::map<std::string, std::string> out;
  auto strategy = plan.find("strategy");
  if (strategy != plan.end() && strategy->is_object()) {
    for (const auto& [k, v] : strategy->items()) out["plan." + k] = scalar_text(v);
  }
  if (plan.contains("summary")) out["plan.summary"] = scalar_text(plan["summary"]);
  return out;
}

std::string plan_markdown(const Json& plan) {
  std::string md = "**" + plan.value("summary", std::string("(no summary)")) + "**\n\n";
  for (const Json& d : plan.value("decisions", Json::array())) {
    md += "- " + d.value("question", std::string()) + " **" + d.value("answer", std::string()) + "**";
    const std::string action = d.value("action", std::string());
    if (!action.empty()) md += " → " + action;
    md += "\n";
  }
  return md;
}

}  // namespace tailor::runner::tracking
