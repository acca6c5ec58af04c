#include "daemon/api/event_stream.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>

#include "daemon/api/resource_json.h"

namespace tailor::daemon {
namespace {

constexpr auto kKeepAlive = std::chrono::seconds(15);
constexpr std::int64_t kBatch = 1000;  // rows per poll; the rest come next poll

struct StreamState {
  std::string id;
  std::string output_dir;
  std::int64_t after_id = 0;
  std::int64_t since_step = 0;
  std::string last_job;  // the last `job` data sent
  bool opened = false;
  std::chrono::steady_clock::time_point last_sent = std::chrono::steady_clock::now();
};

// A comment line after kKeepAlive of silence keeps proxies and clients from
// taking a quiet stream for a dead one.
void keep_alive(std::string& out, std::chrono::steady_clock::time_point& last_sent) {
  const auto t = std::chrono::steady_clock::now();
  if (!out.empty()) {
    last_sent = t;
  } else if (t - last_sent >= kKeepAlive) {
    out = ": keep-alive\n\n";
    last_sent = t;
  }
}

void append(std::string& out, const char* event, const std::string& data, const std::int64_t* id = nullptr) {
  if (id != nullptr) out += "id: " + std::to_string(*id) + "\n";
  out += "event: ";
  out += event;
  out += "\ndata: " + data + "\n\n";
}

}  // namespace

StreamPoll job_event_stream(JobStore& store, const std::string& id, const std::string& output_dir,
                            std::int64_t after_id, std::int64_t since_step) {
  auto st = std::make_shared<StreamState>();
  st->id = id;
  st->output_dir = output_dir;
  st->after_id = after_id;
  st->since_step = since_step;
  return [&store, st](std::string& out) {
    if (!st->opened) {
      out += "retry: 2000\n\n";  // reconnect after 2 s (with Last-Event-ID)
      st->opened = true;
    }
    // The job first: if it has finished, every event of it is stored by
    // now (a transition and its event commit together), so what follows
    // drains the stream.
    auto job = store.get(st->id);
    if (!job.is_ok()) return false;  // deleted meanwhile
    auto events = store.events(st->id, st->after_id, kBatch);
    if (!events.is_ok()) return false;
    for (const EventRecord& e : *events) {
      append(out, e.kind.c_str(), json_text(event_json(e)), &e.id);
      st->after_id = e.id;
    }
    auto steps = store.metrics(st->id, st->since_step, kBatch);
    if (!steps.is_ok()) return false;
    // A full batch may end inside a step (one row per rank): that step
    // comes whole with the next poll.
    const bool full = static_cast<std::int64_t>(steps->size()) == kBatch;
    const std::int64_t cut = full && !steps->empty() ? steps->back().step : INT64_MAX;
    for (const StepMetric& m : *steps) {
      if (m.step >= cut) break;
      append(out, "step", json_text(step_json(m)));
      st->since_step = std::max(st->since_step, m.step);
    }
    static const std::string kNoPlan = "null";
    const std::string now = json_text(job_json(*job, st->output_dir, &kNoPlan));
    const bool drained = static_cast<std::int64_t>(events->size()) < kBatch && !full;
    if (is_terminal(job->state) && drained) {
      append(out, "end", now);
      return false;
    }
    if (now != st->last_job) {
      append(out, "job", now);
      st->last_job = now;
    }
    keep_alive(out, st->last_sent);
    return true;
  };
}

StreamPoll fleet_event_stream(JobStore& store, std::int64_t after_id) {
  struct Fleet {
    std::int64_t after_id = 0;
    bool opened = false;
    std::chrono::steady_clock::time_point last_sent = std::chrono::steady_clock::now();
  };
  auto st = std::make_shared<Fleet>();
  st->after_id = after_id;
  return [&store, st](std::string& out) {
    if (!st->opened) {
      out += "retry: 2000\n\n";
      st->opened = true;
    }
    auto events = store.all_events(st->after_id, kBatch);
    if (!events.is_ok()) return false;
    for (const EventRecord& e : *events) {
      append(out, e.kind.c_str(), json_text(event_json(e)), &e.id);
      st->after_id = e.id;
    }
    keep_alive(out, st->last_sent);
    return true;
  };
}

std::string stream_closed_event(const std::string& reason) {
  std::string out = "retry: " + std::to_string(kClosedRetryMs) + "\n";
  append(out, "closed", json_text(nlohmann::json{{"reason", reason}, {"retry_ms", kClosedRetryMs}}));
  return out;
}

}  // namespace tailor::daemon
