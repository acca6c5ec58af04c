#include "daemon/api/resource_json.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

namespace tailor::daemon {

using nlohmann::json;

json time_json(std::optional<double> t) {
  if (!t) return nullptr;
  const auto secs = static_cast<std::time_t>(*t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];
  const int ms = static_cast<int>((*t - static_cast<double>(secs)) * 1000.0);
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, std::max(0, std::min(ms, 999)));
  return buf;
}

json job_json(const JobRecord& j, const std::string& output_dir, const std::string* compact_plan) {
  json out = {{"id", j.id},
              {"name", j.name},
              {"state", to_string(j.state)},
              {"priority", j.priority},
              {"labels", j.labels},
              {"created_at", time_json(j.created_at)},
              {"updated_at", time_json(j.updated_at)},
              {"started_at", time_json(j.started_at)},
              {"finished_at", time_json(j.finished_at)},
              {"attempts", j.attempts},
              {"retries", j.retries},
              {"failures", j.failures},
              {"oom_restarts", j.oom_restarts},
              {"next_attempt_at", time_json(j.next_attempt_at)},
              {"cancel_requested", j.cancel_requested},
              {"pid", opt_json(j.pid)},
              {"last_step", opt_json(j.last_step)},
              {"peak_bytes", opt_json(j.peak_bytes)},
              {"reserved_bytes", j.estimated_bytes},
              {"memory_limit_bytes", opt_json(j.memory_limit_bytes)},
              {"gpus", j.assigned_gpus},
              {"exit_code", opt_json(j.exit_code)},
              {"exit_signal", opt_json(j.exit_signal)},
              {"exit_reason", j.exit_reason.empty() ? json(nullptr) : json(j.exit_reason)},
              {"output_dir", output_dir}};
  const json plan = json::parse(compact_plan != nullptr ? *compact_plan : j.plan_json, nullptr, false);
  out["plan"] = plan.is_discarded() ? json(nullptr) : plan;
  return out;
}

json event_json(const EventRecord& e) {
  json o = {{"id", e.id},
            {"time", time_json(e.time)},
            {"kind", e.kind},
            {"message", e.message},
            {"from_state", e.from_state.empty() ? json(nullptr) : json(e.from_state)},
            {"to_state", e.to_state.empty() ? json(nullptr) : json(e.to_state)}};
  const json data = e.data_json.empty() ? json(nullptr) : json::parse(e.data_json, nullptr, false);
  o["data"] = data.is_discarded() ? json(nullptr) : data;
  return o;
}

json step_json(const StepMetric& m) {
  json mem = {{"allocated_bytes", opt_json(m.allocated_bytes)}, {"peak_bytes", opt_json(m.peak_bytes)}};
  for (const auto& [k, v] : m.component_bytes)
    mem[k] = v;
  return {{"step", m.step},
          {"rank", m.rank},
          {"attempt", m.attempt},
          {"time", m.time},
          {"loss", opt_json(m.loss)},
          {"lr", opt_json(m.lr)},
          {"grad_norm", opt_json(m.grad_norm)},
          {"tokens", opt_json(m.tokens)},
          {"tokens_per_second", opt_json(m.tokens_per_second)},
          {"step_seconds", opt_json(m.step_seconds)},
          {"memory", mem}};
}

}  // namespace tailor::daemon
