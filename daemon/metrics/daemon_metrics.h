// tailord's Prometheus metrics (prometheus-cpp core: Registry and
// TextSerializer; tailord serves /metrics itself). Names follow the
// Prometheus conventions: base units in the name (_bytes, _seconds),
// _total for counters (https://prometheus.io/docs/practices/naming/).
// Per-job series are kept for running jobs and the most recently finished
// ones (kFinishedJobsKept), so cardinality stays bounded.
// Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace prometheus {
class Registry;
template <typename T>
class Family;
class Gauge;
class Counter;
class Histogram;
}  // namespace prometheus

namespace tailor::daemon {

class DaemonMetrics {
 public:
  static constexpr std::size_t kFinishedJobsKept = 50;

  DaemonMetrics();
  ~DaemonMetrics();

  void observe_request(const std::string& method, const std::string& route, int status, double seconds);
  void set_jobs_by_state(const std::map<std::string, std::int64_t>& counts);
  void set_queue_length(std::int64_t n);
  void add_submitted();
  void add_oom_restart();
  void add_retry();

  // Estimated bytes by component (the plan's) for a job; replaces earlier ones.
  void set_job_estimate(const std::string& job_id, const std::string& name,
                        const std::map<std::string, std::int64_t>& component_bytes, std::int64_t total_bytes);
  // The latest measured step of a job.
  void set_job_step(const std::string& job_id, const std::string& name, std::int64_t step, double loss,
                    double tokens_per_second, const std::map<std::string, std::int64_t>& component_bytes,
                    std::int64_t peak_bytes, const std::map<std::int64_t, std::int64_t>& rank_peak_bytes = {});
  // The eval loss after a job's latest evaluated step.
  void set_job_eval_loss(const std::string& job_id, const std::string& name, double eval_loss);
  // A job's latest model FLOPs utilisation (steps on a GPU the catalog knows).
  void set_job_mfu(const std::string& job_id, const std::string& name, double mfu);
  // A preference job's latest rewards and log-probabilities, by the store's column
  // names (rewards_margins, ...; job_store.h's kPreferenceMetrics), as the
  // `metric` label of tailor_job_preference.
  void set_job_preference(const std::string& job_id, const std::string& name,
                          const std::map<std::string, double>& by_column);
  // Whether a job's tracker (tensorboard, mlflow) takes its metrics: 1 up
  // (or closed with everything sent), 0 down or left behind (the runner's
  // `tracker` events).
  void set_job_tracker(const std::string& job_id, const std::string& name, const std::string& tracker, bool up);
  // A job reached a terminal state: its series are dropped once
  // kFinishedJobsKept later jobs have finished.
  void job_finished(const std::string& job_id);

  void set_host_memory(std::int64_t budget_bytes, std::int64_t reserved_bytes);
  // The HTTP server's open connections and streams, and how many of each it
  // has evicted since start (running totals; the counters follow them).
  void set_http_connections(std::int64_t open, std::uint64_t evicted_total, std::int64_t streams = 0,
                            std::uint64_t streams_evicted_total = 0);
  // The store's group commit: commits and the writes they carried since
  // start (running totals), and the writes waiting now.
  void set_store_writes(std::uint64_t commits_total, std::uint64_t writes_total, std::int64_t waiting);
  void set_gpu_memory(int gpu, const std::string& name, std::int64_t total_bytes, std::int64_t used_bytes);

  // The exposition text (format 0.0.4).
  std::string render() const;

 private:
  struct JobSeries;
  void drop_job(const std::string& job_id);
  // The job's series, created on first use; the name follows the latest call. mu_ is held.
  JobSeries& series_of(const std::string& job_id, const std::string& name);
  void mark_running(const std::string& job_id, JobSeries& s, bool running);

  mutable std::mutex mu_;
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Histogram>* latency_;
  prometheus::Family<prometheus::Gauge>* jobs_;
  prometheus::Gauge* queue_;
  prometheus::Counter* submitted_;
  prometheus::Counter* oom_restarts_;
  prometheus::Counter* retries_;
  prometheus::Gauge* connections_;
  prometheus::Counter* evicted_;
  std::uint64_t evicted_seen_ = 0;
  prometheus::Gauge* streams_;
  prometheus::Counter* streams_evicted_;
  std::uint64_t streams_evicted_seen_ = 0;
  prometheus::Counter* store_commits_;
  prometheus::Counter* store_writes_;
  prometheus::Gauge* store_waiting_;
  std::uint64_t store_commits_seen_ = 0, store_writes_seen_ = 0;
  prometheus::Family<prometheus::Gauge>* job_loss_;
  prometheus::Family<prometheus::Gauge>* job_eval_loss_;
  prometheus::Family<prometheus::Gauge>* job_mfu_;
  prometheus::Family<prometheus::Gauge>* job_preference_;
  prometheus::Family<prometheus::Gauge>* job_tracker_;
  prometheus::Family<prometheus::Gauge>* job_tps_;
  prometheus::Family<prometheus::Gauge>* job_step_;
  prometheus::Family<prometheus::Gauge>* job_running_;
  prometheus::Family<prometheus::Gauge>* job_rank_peak_;
  prometheus::Family<prometheus::Gauge>* job_memory_;
  prometheus::Family<prometheus::Gauge>* job_peak_;
  prometheus::Family<prometheus::Gauge>* host_memory_;
  prometheus::Family<prometheus::Gauge>* gpu_total_;
  prometheus::Family<prometheus::Gauge>* gpu_used_;
  std::map<std::string, std::unique_ptr<JobSeries>> jobs_series_;
  std::deque<std::string> finished_;
};

}  // namespace tailor::daemon
