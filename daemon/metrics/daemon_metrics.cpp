#include "daemon/metrics/daemon_metrics.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <sstream>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

namespace tailor::daemon {

using prometheus::Counter;
using prometheus::Gauge;
using prometheus::Histogram;

struct DaemonMetrics::JobSeries {
  std::string name;
  Gauge* loss = nullptr;
  Gauge* eval_loss = nullptr;
  Gauge* tps = nullptr;
  Gauge* mfu = nullptr;
  Gauge* step = nullptr;
  Gauge* peak = nullptr;
  Gauge* running = nullptr;
  std::map<std::pair<std::string, std::string>, Gauge*> memory;  // (component, source)
  std::map<std::int64_t, Gauge*> rank_peak;                       // by rank, multi-rank jobs only
  std::map<std::string, Gauge*> preference;                       // by metric, preference jobs only
  std::map<std::string, Gauge*> trackers;                         // by tracker, jobs with a tracking section
};

namespace {

// Request methods as a closed set: any other word a client sends is
// "other", so made-up methods cannot add series without bound.
const std::string& method_label(const std::string& method) {
  static const std::set<std::string> kKnown = {"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"};
  static const std::string kOther = "other";
  const auto it = kKnown.find(method);
  return it == kKnown.end() ? kOther : *it;
}

}  // namespace

DaemonMetrics::DaemonMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  auto& r = *registry_;
  // The process collector's name (Prometheus client guidelines), so uptime
  // and restarts read the same as for any exporter.
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  prometheus::BuildGauge()
      .Name("process_start_time_seconds")
      .Help("Start time of the process since the Unix epoch, in seconds.")
      .Register(r)
      .Add({})
      .Set(std::chrono::duration<double>(now).count());
  prometheus::BuildGauge()
      .Name("tailord_build_info")
      .Help("Always 1; the labels name the build.")
      .Register(r)
      .Add({{"version", TAILOR_VERSION}})
      .Set(1);
  requests_ = &prometheus::BuildCounter().Name("tailor_http_requests_total").Help("API requests by method, route and status code.").Register(r);
  latency_ = &prometheus::BuildHistogram()
                  .Name("tailor_http_request_duration_seconds")
                  .Help("API request handling time.")
                  .Register(r);
  jobs_ = &prometheus::BuildGauge().Name("tailor_jobs").Help("Jobs in the store by state.").Register(r);
  queue_ = &prometheus::BuildGauge().Name("tailor_queue_length").Help("Jobs waiting to start (queued).").Register(r).Add({});
  submitted_ = &prometheus::BuildCounter().Name("tailor_jobs_submitted_total").Help("Jobs accepted by POST /v1/jobs.").Register(r).Add({});
  oom_restarts_ = &prometheus::BuildCounter()
                       .Name("tailor_oom_restarts_total")
                       .Help("Runner out-of-memory exits answered by a re-plan and resume.")
                       .Register(r)
                       .Add({});
  retries_ = &prometheus::BuildCounter().Name("tailor_job_retries_total").Help("Runner failures retried with backoff.").Register(r).Add({});
  connections_ = &prometheus::BuildGauge().Name("tailor_http_connections").Help("Open HTTP connections.").Register(r).Add({});
  evicted_ = &prometheus::BuildCounter()
                  .Name("tailor_http_connections_evicted_total")
                  .Help("Connections closed at the connection limit because they waited longest for a request.")
                  .Register(r)
                  .Add({});
  streams_ = &prometheus::BuildGauge()
                  .Name("tailor_http_streams")
                  .Help("Open event and log streams (apart from the connections).")
                  .Register(r)
                  .Add({});
  streams_evicted_ = &prometheus::BuildCounter()
                          .Name("tailor_http_streams_evicted_total")
                          .Help("Streams closed by the stream budget to make room for newer ones.")
                          .Register(r)
                          .Add({});
  store_commits_ = &prometheus::BuildCounter()
                        .Name("tailor_store_commits_total")
                        .Help("Store transactions begun, each carrying the writes that waited for it (group commit).")
                        .Register(r)
                        .Add({});
  store_writes_ =
      &prometheus::BuildCounter()
           .Name("tailor_store_writes_total")
           .Help("Store writes (submissions, state changes, events, metric batches) taken into a transaction.")
           .Register(r)
           .Add({});
  store_waiting_ = &prometheus::BuildGauge()
                        .Name("tailor_store_writes_waiting")
                        .Help("Store writes queued behind the commit under way.")
                        .Register(r)
                        .Add({});
  job_loss_ = &prometheus::BuildGauge().Name("tailor_job_loss").Help("Training loss of a job's latest step.").Register(r);
  job_mfu_ = &prometheus::BuildGauge()
                  .Name("tailor_job_mfu")
                  .Help(
                      "Model FLOPs utilisation of a job's latest step: the model FLOPs of its tokens per second over "
                      "its GPUs' dense peak (0-1). Only jobs on a GPU the catalog knows.")
                  .Register(r);
  job_eval_loss_ = &prometheus::BuildGauge()
                        .Name("tailor_job_eval_loss")
                        .Help("Loss on data.eval (the mean over its trained tokens) of a job's latest evaluation.")
                        .Register(r);
  job_preference_ =
      &prometheus::BuildGauge()
           .Name("tailor_job_preference")
           .Help(
               "A preference (dpo, orpo, simpo, reward, kto) job's latest step by metric: rewards_chosen, "
               "rewards_rejected, rewards_margins "
               "(TRL's rewards: dpo beta times the log-ratios against the reference, simpo beta and orpo lambda "
               "times the per-token mean log-probability), rewards_accuracies (the share of "
               "pairs ranked right), logps_chosen, logps_rejected, eval_rewards_accuracies; a reward model's "
               "accuracy, margin, min_reward, mean_reward, max_reward and eval_accuracy (its scores); a kto job's "
               "kl and eval_kl (its KL estimate).")
           .Register(r);
  job_tracker_ = &prometheus::BuildGauge()
                      .Name("tailor_job_tracker_up")
                      .Help("1 while a job's experiment tracker (tracker: tensorboard, mlflow) takes its metrics, 0 while it "
                            "is down (metrics wait in the job's metrics.jsonl and are sent when it is back) or was left behind.")
                      .Register(r);
  job_tps_ = &prometheus::BuildGauge()
                  .Name("tailor_job_tokens_per_second")
                  .Help("Training throughput of a job's latest step, in tokens per second.")
                  .Register(r);
  job_step_ = &prometheus::BuildGauge().Name("tailor_job_step").Help("A job's latest optimizer step.").Register(r);
  job_running_ = &prometheus::BuildGauge()
                      .Name("tailor_job_running")
                      .Help("1 while a job's runner is running (from its start or first step), 0 once the job has ended.")
                      .Register(r);
  job_memory_ = &prometheus::BuildGauge()
                     .Name("tailor_job_memory_bytes")
                     .Help("Device memory of a job by component: the plan's estimate and the runner's measurement.")
                     .Register(r);
  job_peak_ = &prometheus::BuildGauge()
                   .Name("tailor_job_memory_peak_bytes")
                   .Help("Peak device memory the runner measured in a job's latest step.")
                   .Register(r);
  job_rank_peak_ = &prometheus::BuildGauge()
                       .Name("tailor_job_rank_memory_peak_bytes")
                       .Help("Peak device memory of each rank of a multi-rank job in its latest step.")
                       .Register(r);
  host_memory_ = &prometheus::BuildGauge()
                      .Name("tailor_host_memory_bytes")
                      .Help("Host memory for CPU jobs: the daemon's budget and what running jobs reserve.")
                      .Register(r);
  gpu_total_ = &prometheus::BuildGauge().Name("tailor_gpu_memory_total_bytes").Help("GPU memory per device.").Register(r);
  gpu_used_ = &prometheus::BuildGauge()
                   .Name("tailor_gpu_memory_used_bytes")
                   .Help("GPU memory used by running jobs per device (measured peak, else estimate).")
                   .Register(r);
}

DaemonMetrics::~DaemonMetrics() = default;

void DaemonMetrics::observe_request(const std::string& method, const std::string& route, int status, double seconds) {
  std::lock_guard lock(mu_);
  const std::string& m = method_label(method);
  requests_->Add({{"method", m}, {"route", route}, {"code", std::to_string(status)}}).Increment();
  static const Histogram::BucketBoundaries kBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                       0.1,    0.25,  0.5,    1,     2.5,  5,     10};
  latency_->Add({{"method", m}, {"route", route}}, kBuckets).Observe(seconds);
}

void DaemonMetrics::set_jobs_by_state(const std::map<std::string, std::int64_t>& counts) {
  std::lock_guard lock(mu_);
  for (const auto& [state, n] : counts) jobs_->Add({{"state", state}}).Set(static_cast<double>(n));
}

void DaemonMetrics::set_queue_length(std::int64_t n) {
  std::lock_guard lock(mu_);
  queue_->Set(static_cast<double>(n));
}

void DaemonMetrics::add_submitted() {
  std::lock_guard lock(mu_);
  submitted_->Increment();
}
void DaemonMetrics::add_oom_restart() {
  std::lock_guard lock(mu_);
  oom_restarts_->Increment();
}
void DaemonMetrics::add_retry() {
  std::lock_guard lock(mu_);
  retries_->Increment();
}

void DaemonMetrics::set_job_estimate(const std::string& job_id, const std::string& name,
                                     const std::map<std::string, std::int64_t>& component_bytes,
                                     std::int64_t total_bytes) {
  std::lock_guard lock(mu_);
  JobSeries& s = series_of(job_id, name);
  auto set = [&](const std::string& component, std::int64_t v) {
    auto& g = s.memory[{component, "estimated"}];
    if (!g)
      g = &job_memory_->Add({{"job_id", job_id}, {"job", name}, {"component", component}, {"source", "estimated"}});
    g->Set(static_cast<double>(v));
  };
  for (const auto& [c, v] : component_bytes) set(c, v);
  set("total", total_bytes);
  // An estimate is set when an attempt starts: a retried job runs again.
  std::erase(finished_, job_id);
  mark_running(job_id, s, true);
}

void DaemonMetrics::set_job_step(const std::string& job_id, const std::string& name, std::int64_t step, double loss,
                                 double tokens_per_second, const std::map<std::string, std::int64_t>& component_bytes,
                                 std::int64_t peak_bytes, const std::map<std::int64_t, std::int64_t>& rank_peak_bytes) {
  std::lock_guard lock(mu_);
  JobSeries& s = series_of(job_id, name);
  const prometheus::Labels labels = {{"job_id", job_id}, {"job", name}};
  if (!s.loss) s.loss = &job_loss_->Add(labels);
  if (!s.tps) s.tps = &job_tps_->Add(labels);
  if (!s.step) s.step = &job_step_->Add(labels);
  if (!s.peak) s.peak = &job_peak_->Add(labels);
  s.loss->Set(loss);
  s.tps->Set(tokens_per_second);
  s.step->Set(static_cast<double>(step));
  s.peak->Set(static_cast<double>(peak_bytes));
  if (std::find(finished_.begin(), finished_.end(), job_id) == finished_.end()) mark_running(job_id, s, true);
  for (const auto& [rank, bytes] : rank_peak_bytes) {
    auto& g = s.rank_peak[rank];
    if (!g) g = &job_rank_peak_->Add({{"job_id", job_id}, {"job", name}, {"rank", std::to_string(rank)}});
    g->Set(static_cast<double>(bytes));
  }
  std::int64_t total = 0;
  auto set = [&](const std::string& component, std::int64_t v) {
    auto& g = s.memory[{component, "measured"}];
    if (!g)
      g = &job_memory_->Add({{"job_id", job_id}, {"job", name}, {"component", component}, {"source", "measured"}});
    g->Set(static_cast<double>(v));
  };
  for (const auto& [c, v] : component_bytes) {
    set(c, v);
    total += v;
  }
  set("total", total);
}

void DaemonMetrics::set_job_eval_loss(const std::string& job_id, const std::string& name, double eval_loss) {
  std::lock_guard lock(mu_);
  JobSeries& s = series_of(job_id, name);
  if (!s.eval_loss) s.eval_loss = &job_eval_loss_->Add({{"job_id", job_id}, {"job", name}});
  s.eval_loss->Set(eval_loss);
}

void DaemonMetrics::set_job_mfu(const std::string& job_id, const std::string& name, double mfu) {
  std::lock_guard lock(mu_);
  JobSeries& s = series_of(job_id, name);
  if (!s.mfu) s.mfu = &job_mfu_->Add({{"job_id", job_id}, {"job", name}});
  s.mfu->Set(mfu);
}

void DaemonMetrics::set_job_preference(const std::string& job_id, const std::string& name,
                                       const std::map<std::string, double>& by_column) {
  if (by_column.empty()) return;
  std::lock_guard lock(mu_);
  JobSeries& s = series_of(job_id, name);
  for (const auto& [metric, v] : by_column) {
    Gauge*& g = s.preference[metric];
    if (g == nullptr) g = &job_preference_->Add({{"job_id", job_id}, {"job", name}, {"metric", metric}});
    g->Set(v);
  }
}

void DaemonMetrics::set_job_tracker(const std::string& job_id, const std::string& name, const std::string& tracker,
                                    bool up) {
  std::lock_guard lock(mu_);
  JobSeries& s = series_of(job_id, name);
  Gauge*& g = s.trackers[tracker];
  if (g == nullptr) g = &job_tracker_->Add({{"job_id", job_id}, {"job", name}, {"tracker", tracker}});
  g->Set(up ? 1.0 : 0.0);
}

DaemonMetrics::JobSeries& DaemonMetrics::series_of(const std::string& job_id, const std::string& name) {
  auto& s = jobs_series_[job_id];
  if (!s) s = std::make_unique<JobSeries>();
  s->name = name;
  return *s;
}

void DaemonMetrics::mark_running(const std::string& job_id, JobSeries& s, bool running) {
  if (!s.running) s.running = &job_running_->Add({{"job_id", job_id}, {"job", s.name}});
  s.running->Set(running ? 1.0 : 0.0);
}

void DaemonMetrics::drop_job(const std::string& job_id) {
  auto it = jobs_series_.find(job_id);
  if (it == jobs_series_.end()) return;
  JobSeries& s = *it->second;
  if (s.loss) job_loss_->Remove(s.loss);
  if (s.eval_loss) job_eval_loss_->Remove(s.eval_loss);
  if (s.tps) job_tps_->Remove(s.tps);
  if (s.mfu) job_mfu_->Remove(s.mfu);
  if (s.step) job_step_->Remove(s.step);
  if (s.peak) job_peak_->Remove(s.peak);
  if (s.running) job_running_->Remove(s.running);
  for (auto& [k, g] : s.memory) job_memory_->Remove(g);
  for (auto& [k, g] : s.rank_peak) job_rank_peak_->Remove(g);
  for (auto& [k, g] : s.preference) job_preference_->Remove(g);
  for (auto& [k, g] : s.trackers) job_tracker_->Remove(g);
  jobs_series_.erase(it);
}

void DaemonMetrics::job_finished(const std::string& job_id) {
  std::lock_guard lock(mu_);
  if (auto it = jobs_series_.find(job_id); it != jobs_series_.end()) mark_running(job_id, *it->second, false);
  if (std::find(finished_.begin(), finished_.end(), job_id) != finished_.end()) return;
  finished_.push_back(job_id);
  while (finished_.size() > kFinishedJobsKept) {
    drop_job(finished_.front());
    finished_.pop_front();
  }
}

void DaemonMetrics::set_host_memory(std::int64_t budget_bytes, std::int64_t reserved_bytes) {
  std::lock_guard lock(mu_);
  host_memory_->Add({{"kind", "budget"}}).Set(static_cast<double>(budget_bytes));
  host_memory_->Add({{"kind", "reserved"}}).Set(static_cast<double>(reserved_bytes));
}

void DaemonMetrics::set_http_connections(std::int64_t open, std::uint64_t evicted_total, std::int64_t streams,
                                         std::uint64_t streams_evicted_total) {
  std::lock_guard lock(mu_);
  connections_->Set(static_cast<double>(open));
  if (evicted_total > evicted_seen_) evicted_->Increment(static_cast<double>(evicted_total - evicted_seen_));
  evicted_seen_ = std::max(evicted_seen_, evicted_total);
  streams_->Set(static_cast<double>(streams));
  if (streams_evicted_total > streams_evicted_seen_) {
    streams_evicted_->Increment(static_cast<double>(streams_evicted_total - streams_evicted_seen_));
  }
  streams_evicted_seen_ = std::max(streams_evicted_seen_, streams_evicted_total);
}

void DaemonMetrics::set_store_writes(std::uint64_t commits_total, std::uint64_t writes_total, std::int64_t waiting) {
  std::lock_guard lock(mu_);
  if (commits_total > store_commits_seen_)
    store_commits_->Increment(static_cast<double>(commits_total - store_commits_seen_));
  if (writes_total > store_writes_seen_)
    store_writes_->Increment(static_cast<double>(writes_total - store_writes_seen_));
  store_commits_seen_ = std::max(store_commits_seen_, commits_total);
  store_writes_seen_ = std::max(store_writes_seen_, writes_total);
  store_waiting_->Set(static_cast<double>(waiting));
}

void DaemonMetrics::set_gpu_memory(int gpu, const std::string& name, std::int64_t total_bytes, std::int64_t used_bytes) {
  std::lock_guard lock(mu_);
  const prometheus::Labels labels = {{"gpu", std::to_string(gpu)}, {"name", name}};
  gpu_total_->Add(labels).Set(static_cast<double>(total_bytes));
  gpu_used_->Add(labels).Set(static_cast<double>(used_bytes));
}

std::string DaemonMetrics::render() const {
  std::lock_guard lock(mu_);
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry_->Collect());
  return out.str();
}

}  // namespace tailor::daemon
