#include "daemon/api/resource_json.h"

#include "core/json_writer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <type_traits>

namespace tailor::daemon {

std::string json_text(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

using nlohmann::json;

namespace {

// "2026-11-26T11:04:04.685Z" into `buf` (24 bytes), digits written by
// hand: snprintf was most of a listing's formatting time.
std::size_t format_time(double t, char* buf) {
  const auto secs = static_cast<std::time_t>(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  const int ms = std::max(0, std::min(static_cast<int>((t - static_cast<double>(secs)) * 1000.0), 999));
  const auto put = [&buf](std::size_t at, int value, int digits) {
    for (int d = digits - 1; d >= 0; --d) {
      buf[at + static_cast<std::size_t>(d)] = static_cast<char>('0' + value % 10);
      value /= 10;
    }
  };
  const int year = tm.tm_year + 1900;
  if (year < 0 || year > 9999) {
    return static_cast<std::size_t>(std::snprintf(buf, 32, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", year, tm.tm_mon + 1,
                                                  tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms));
  }
  std::memcpy(buf, "0000-00-00T00:00:00.000Z", 24);
  put(0, year, 4);
  put(5, tm.tm_mon + 1, 2);
  put(8, tm.tm_mday, 2);
  put(11, tm.tm_hour, 2);
  put(14, tm.tm_min, 2);
  put(17, tm.tm_sec, 2);
  put(20, ms, 3);
  return 24;
}

}  // namespace

json time_json(std::optional<double> t) {
  if (!t) return nullptr;
  char buf[48];
  return std::string(buf, format_time(*t, buf));
}

namespace {

void write_time(JsonWriter& w, std::string_view key, std::optional<double> t) {
  w.key(key);
  if (!t) {
    w.null();
    return;
  }
  char buf[48];
  w.value(std::string_view(buf, format_time(*t, buf)));
}

template <class T>
void write_opt(JsonWriter& w, std::string_view key, const std::optional<T>& v) {
  w.key(key);
  if (v) {
    if constexpr (std::is_floating_point_v<T>) {
      w.value(*v);
    } else {
      w.value(static_cast<std::int64_t>(*v));
    }
  } else {
    w.null();
  }
}

}  // namespace

void write_job(JsonWriter& w, const JobRecord& j, const std::string& output_dir, std::string_view plan_raw,
               std::optional<std::int64_t> seq) {
  w.begin_object();
  w.field("id", j.id).field("name", j.name).field("state", to_string(j.state)).field("priority", j.priority);
  if (seq) w.field("seq", *seq);
  w.key("labels").begin_object();
  for (const auto& [k, v] : j.labels) w.field(k, v);
  w.end_object();
  write_time(w, "created_at", j.created_at);
  write_time(w, "updated_at", j.updated_at);
  write_time(w, "started_at", j.started_at);
  write_time(w, "finished_at", j.finished_at);
  w.field("attempts", j.attempts).field("retries", j.retries).field("failures", j.failures);
  w.field("oom_restarts", j.oom_restarts);
  write_time(w, "next_attempt_at", j.next_attempt_at);
  w.field("cancel_requested", static_cast<bool>(j.cancel_requested));
  write_opt(w, "pid", j.pid);
  write_opt(w, "last_step", j.last_step);
  write_opt(w, "peak_bytes", j.peak_bytes);
  write_opt(w, "last_eval_step", j.last_eval_step);
  write_opt(w, "last_eval_loss", j.last_eval_loss);
  w.field("reserved_bytes", j.estimated_bytes);
  write_opt(w, "memory_limit_bytes", j.memory_limit_bytes);
  w.field("gpus", j.assigned_gpus);
  // Where it runs: tailord's machine, or a Slurm batch job and what Slurm
  // last said of it.
  w.key("executor").begin_object().field("kind", dsl::to_string(j.executor));
  if (j.executor != dsl::ExecutorKind::kLocal) {
    w.key("job_id");
    if (j.executor_job_id.empty()) {
      w.null();
    } else {
      w.value(j.executor_job_id);
    }
    w.field("state", j.executor_state);
  }
  w.end_object();
  write_opt(w, "exit_code", j.exit_code);
  write_opt(w, "exit_signal", j.exit_signal);
  w.key("exit_reason");
  if (j.exit_reason.empty()) {
    w.null();
  } else {
    w.value(j.exit_reason);
  }
  w.field("retryable", j.retryable());
  w.field("output_dir", output_dir);
  w.key("plan").raw(plan_raw);
  w.end_object();
}

json job_json(const JobRecord& j, const std::string& output_dir, const std::string* compact_plan) {
  const std::string& plan = compact_plan != nullptr ? *compact_plan : j.plan_json;
  JsonWriter w(0);
  // A damaged plan document must not make the whole answer invalid.
  write_job(w, j, output_dir, json::accept(plan) ? std::string_view(plan) : std::string_view("null"));
  return json::parse(w.str());
}

json event_json(const EventRecord& e) {
  json o = {{"id", e.id},
            {"job_id", e.job_id},
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
  // A preference step's loss is per pair: no perplexity.
  const bool pairs = !m.preference.empty();
  json o = {{"step", m.step},
            {"rank", m.rank},
            {"attempt", m.attempt},
            {"time", m.time},
            {"loss", opt_json(m.loss)},
            {"lr", opt_json(m.lr)},
            {"grad_norm", opt_json(m.grad_norm)},
            {"tokens", opt_json(m.tokens)},
            {"tokens_per_second", opt_json(m.tokens_per_second)},
            {"step_seconds", opt_json(m.step_seconds)},
            {"eval_loss", opt_json(m.eval_loss)},
            {"eval_perplexity", m.eval_loss && !pairs ? json(std::exp(*m.eval_loss)) : json(nullptr)},
            {"eval_tokens", opt_json(m.eval_tokens)},
            {"eval_seconds", opt_json(m.eval_seconds)},
            {"mfu", opt_json(m.mfu)},
            {"memory", mem}};
  for (const PreferenceMetric& p : kPreferenceMetrics) {
    const auto it = m.preference.find(p.key);
    o[p.key] = it == m.preference.end() ? json(nullptr) : json(it->second);
  }
  return o;
}

}  // namespace tailor::daemon
