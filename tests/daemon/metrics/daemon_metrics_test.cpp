// tailord's Prometheus series.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "daemon/metrics/daemon_metrics.h"

namespace tailor::daemon {
namespace {

TEST(DaemonMetricsTest, MadeUpMethodsShareOneSeriesAndTheProcessNamesItself) {
  DaemonMetrics metrics;
  metrics.observe_request("GET", "/v1/jobs", 200, 0.001);
  for (int i = 0; i < 1000; ++i) metrics.observe_request("FOO" + std::to_string(i), "unmatched", 404, 0.001);
  const std::string text = metrics.render();
  std::istringstream lines(text);
  int request_series = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("tailor_http_requests_total{", 0) == 0) ++request_series;
  }
  EXPECT_EQ(request_series, 2) << text;
  EXPECT_NE(text.find("tailor_http_requests_total{code=\"404\",method=\"other\",route=\"unmatched\"} 1000"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("FOO"), std::string::npos);
  EXPECT_NE(text.find("process_start_time_seconds "), std::string::npos);
  EXPECT_NE(text.find("tailord_build_info{version=\""), std::string::npos);
}

// tailor_job_running is what the "job stuck" alert and the fleet dashboard
// select running jobs by: 1 from an attempt's start, 0 once it ends, 1
// again when a retried job starts another attempt.
TEST(DaemonMetricsTest, AJobIsRunningFromItsStartUntilItEndsAndAgainWhenRetried) {
  DaemonMetrics metrics;
  const auto running = [&]() -> std::string {
    const std::string text = metrics.render();
    const std::string series = "tailor_job_running{job=\"demo\",job_id=\"j-1\"} ";
    const auto at = text.find(series);
    return at == std::string::npos ? "absent" : text.substr(at + series.size(), 1);
  };
  EXPECT_EQ(running(), "absent");
  metrics.set_job_estimate("j-1", "demo", {{"weights", 10}}, 10);
  EXPECT_EQ(running(), "1");
  metrics.set_job_step("j-1", "demo", 1, 2.0, 100.0, {{"weights", 10}}, 10);
  EXPECT_EQ(running(), "1");
  metrics.job_finished("j-1");
  EXPECT_EQ(running(), "0");
  metrics.set_job_estimate("j-1", "demo", {{"weights", 10}}, 10);
  EXPECT_EQ(running(), "1");
  metrics.job_finished("j-1");
  EXPECT_EQ(running(), "0");
  for (int i = 0; i < static_cast<int>(DaemonMetrics::kFinishedJobsKept); ++i) {
    metrics.set_job_estimate("other-" + std::to_string(i), "x", {}, 1);
    metrics.job_finished("other-" + std::to_string(i));
  }
  EXPECT_EQ(running(), "absent");
}

// The eval loss is a series of its own, kept and dropped with the job's
// others, so finished jobs do not add series without bound.
TEST(DaemonMetricsTest, TheEvalLossIsAJobSeriesDroppedWithTheOthers) {
  DaemonMetrics metrics;
  metrics.set_job_step("j-1", "demo", 4, 2.0, 100.0, {{"weights", 10}}, 10);
  EXPECT_EQ(metrics.render().find("tailor_job_eval_loss{"), std::string::npos);
  metrics.set_job_eval_loss("j-1", "demo", 1.25);
  EXPECT_NE(metrics.render().find("tailor_job_eval_loss{job=\"demo\",job_id=\"j-1\"} 1.25"), std::string::npos)
      << metrics.render();
  metrics.job_finished("j-1");
  for (int i = 0; i < static_cast<int>(DaemonMetrics::kFinishedJobsKept); ++i) {
    metrics.set_job_estimate("other-" + std::to_string(i), "x", {}, 1);
    metrics.job_finished("other-" + std::to_string(i));
  }
  EXPECT_EQ(metrics.render().find("job_id=\"j-1\""), std::string::npos);
}

// MFU is a series only for jobs that report it, dropped with the others.
TEST(DaemonMetricsTest, MfuIsAJobSeriesOnlyWhereReported) {
  DaemonMetrics metrics;
  metrics.set_job_step("j-1", "demo", 4, 2.0, 100.0, {{"weights", 10}}, 10);
  EXPECT_EQ(metrics.render().find("tailor_job_mfu{"), std::string::npos);
  metrics.set_job_mfu("j-1", "demo", 0.375);
  EXPECT_NE(metrics.render().find("tailor_job_mfu{job=\"demo\",job_id=\"j-1\"} 0.375"), std::string::npos)
      << metrics.render();
  metrics.job_finished("j-1");
  for (int i = 0; i < static_cast<int>(DaemonMetrics::kFinishedJobsKept); ++i) {
    metrics.set_job_estimate("other-" + std::to_string(i), "x", {}, 1);
    metrics.job_finished("other-" + std::to_string(i));
  }
  EXPECT_EQ(metrics.render().find("tailor_job_mfu{"), std::string::npos);
}

// A DPO job's rewards are series of the job's too, one per metric.
TEST(DaemonMetricsTest, PreferenceMetricsAreJobSeriesByMetric) {
  DaemonMetrics metrics;
  metrics.set_job_step("j-1", "demo", 4, 0.6, 100.0, {{"weights", 10}}, 10);
  metrics.set_job_preference("j-1", "demo", {});
  EXPECT_EQ(metrics.render().find("tailor_job_preference{"), std::string::npos);
  metrics.set_job_preference("j-1", "demo", {{"rewards_margins", 0.5}, {"rewards_accuracies", 0.75}});
  const std::string text = metrics.render();
  EXPECT_NE(text.find("tailor_job_preference{job=\"demo\",job_id=\"j-1\",metric=\"rewards_margins\"} 0.5"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("metric=\"rewards_accuracies\"} 0.75"), std::string::npos) << text;
  metrics.job_finished("j-1");
  for (int i = 0; i < static_cast<int>(DaemonMetrics::kFinishedJobsKept); ++i) {
    metrics.set_job_estimate("other-" + std::to_string(i), "x", {}, 1);
    metrics.job_finished("other-" + std::to_string(i));
  }
  EXPECT_EQ(metrics.render().find("job_id=\"j-1\""), std::string::npos);
}

// A tracker's state is a job series by tracker: 1 up, 0 down; dropped
// with the job's others.
TEST(DaemonMetricsTest, ATrackersStateIsAJobSeriesByTracker) {
  DaemonMetrics metrics;
  metrics.set_job_tracker("j-1", "demo", "mlflow", true);
  metrics.set_job_tracker("j-1", "demo", "tensorboard", true);
  metrics.set_job_tracker("j-1", "demo", "mlflow", false);
  const std::string text = metrics.render();
  EXPECT_NE(text.find("tailor_job_tracker_up{job=\"demo\",job_id=\"j-1\",tracker=\"mlflow\"} 0"), std::string::npos)
      << text;
  EXPECT_NE(text.find("tailor_job_tracker_up{job=\"demo\",job_id=\"j-1\",tracker=\"tensorboard\"} 1"),
            std::string::npos)
      << text;
  metrics.job_finished("j-1");
  for (int i = 0; i < static_cast<int>(DaemonMetrics::kFinishedJobsKept); ++i) {
    metrics.set_job_estimate("other-" + std::to_string(i), "x", {}, 1);
    metrics.job_finished("other-" + std::to_string(i));
  }
  EXPECT_EQ(metrics.render().find("job_id=\"j-1\""), std::string::npos);
}

}  // namespace
}  // namespace tailor::daemon
