// Torch-free pieces of tailord without a server: routing, auth helpers,
// scheduling decisions, run-file reading, configuration.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "daemon/api/download_links.h"
#include "daemon/api/api.h"
#include "daemon/config.h"
#include "dsl/yaml_tree.h"
#include "daemon/executor/run_files.h"
#include "daemon/http/auth.h"
#include "daemon/http/errors.h"
#include "daemon/http/router.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/scheduler/scheduler.h"
#include "strategies/strategy.h"
#include "tests/testing/temp_dir.h"

namespace tailor::daemon {
namespace {

TEST(RouterTest, BindsPathParametersAndReports405WithAllow) {
  Router r;
  r.add({"GET", "/v1/jobs/{id}/plan", true, [](HttpRequest& q) { return HttpResponse::json(200, q.params["id"]); }});
  r.add({"POST", "/v1/jobs/{id}/cancel", true, {}});
  HttpRequest q;
  q.method = "GET";
  q.path = "/v1/jobs/j-42/plan";
  auto m = r.match(q);
  ASSERT_NE(m.route, nullptr);
  EXPECT_EQ(q.params["id"], "j-42");
  q.method = "GET";
  q.path = "/v1/jobs/j-42/cancel";
  m = r.match(q);
  EXPECT_EQ(m.route, nullptr);
  EXPECT_EQ(m.status, 405);
  EXPECT_EQ(m.allow, "POST");
  q.path = "/v1/jobs//plan";
  EXPECT_EQ(r.match(q).status, 404);
}

TEST(MessageTest, ParsesTargetWithPercentEscapes) {
  std::string path;
  std::map<std::string, std::string> query;
  ASSERT_TRUE(parse_target("/v1/jobs?label=team%3Dnlp&state=running&x", path, query));
  EXPECT_EQ(path, "/v1/jobs");
  EXPECT_EQ(query["label"], "team=nlp");
  EXPECT_EQ(query["state"], "running");
  EXPECT_TRUE(query.count("x"));
  EXPECT_FALSE(parse_target("/bad%zz", path, query));
  EXPECT_FALSE(parse_target("/bad%2", path, query));
  EXPECT_FALSE(parse_target("http://host/x", path, query));
}

TEST(AuthTest, ConstantTimeEqualComparesWholeStrings) {
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "abd"));
  EXPECT_FALSE(constant_time_equal("abc", "abcd"));
  EXPECT_FALSE(constant_time_equal("", "a"));
}

TEST(AuthTest, TokenIsCreatedPrivateAndReusedAndAWorldReadableOneRefused) {
  tailor::testing::TempDir dir;
  auto a = load_or_create_token(dir.file("token"));
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a->size(), 64u);
  struct stat st {};
  ASSERT_EQ(stat(dir.file("token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto b = load_or_create_token(dir.file("token"));
  EXPECT_EQ(*a, *b);
  chmod(dir.file("token").c_str(), 0644);
  EXPECT_EQ(load_or_create_token(dir.file("token")).status().code(), StatusCode::kFailedPrecondition);
}

TEST(AuthTest, BearerHeaderIsCheckedCaseInsensitivelyForTheScheme) {
  HttpRequest r;
  r.headers["authorization"] = "bearer secret-token-value";
  EXPECT_TRUE(has_bearer_token(r, "secret-token-value"));
  r.headers["authorization"] = "Basic secret-token-value";
  EXPECT_FALSE(has_bearer_token(r, "secret-token-value"));
}

TEST(AuthTest, HostPolicyAllowsLoopbackNamesWithThePortOnly) {
  HostPolicy p(8470, "127.0.0.1", {"tailor.lan"});
  HttpRequest r;
  std::string why;
  r.headers["host"] = "localhost:8470";
  EXPECT_TRUE(p.allows(r, why));
  r.headers["host"] = "127.0.0.1:9999";
  EXPECT_FALSE(p.allows(r, why));
  r.headers["host"] = "tailor.lan";
  EXPECT_TRUE(p.allows(r, why));
  r.headers["host"] = "tailor.lan:8470";
  EXPECT_TRUE(p.allows(r, why));
  r.headers["host"] = "tailor.lan:9999";
  EXPECT_FALSE(p.allows(r, why));
  r.headers["host"] = "attacker.example:8470";
  EXPECT_FALSE(p.allows(r, why));
  r.headers["host"] = "localhost:8470";
  r.headers["origin"] = "http://attacker.example";
  EXPECT_FALSE(p.allows(r, why));
  EXPECT_NE(why.find("Origin"), std::string::npos);
}

// In a pod, kubelet's probes and Prometheus' scrapes send the pod's address
// as Host; a server bound to every interface takes any address, never a
// name it was not given, and an Origin only when it is the request's own.
TEST(AuthTest, AServerBoundToEveryInterfaceAcceptsAddressesAsHostButNotOtherNames) {
  HostPolicy p(8470, "0.0.0.0", {"tailord"});
  HttpRequest r;
  std::string why;
  for (const char* host : {"10.1.2.3:8470", "10.1.2.3", "10.1.2.3:18470", "[fd00::1]:8470", "[::1]", "tailord:8470",
                           "tailord", "localhost:8470"}) {
    r.headers["host"] = host;
    EXPECT_TRUE(p.allows(r, why)) << host << ": " << why;
  }
  for (const char* host : {"attacker.example:8470", "10.1.2.3.nip.io:8470", "2130706433:8470", "0x7f.1:8470",
                           "10.1.2.3:", "10.1.2.3:84a0", "10.1.2.3:847000", "[fd00::1", "[fd00::1]x", "fd00::1"}) {
    r.headers["host"] = host;
    EXPECT_FALSE(p.allows(r, why)) << host;
  }
  r.headers["host"] = "10.1.2.3:8470";
  r.headers["origin"] = "http://10.1.2.3:8470";
  EXPECT_TRUE(p.allows(r, why)) << why;
  r.headers["origin"] = "http://10.9.9.9:8470";
  EXPECT_FALSE(p.allows(r, why));
  EXPECT_NE(why.find("Origin"), std::string::npos);
  r.headers["origin"] = "http://tailord";
  EXPECT_TRUE(p.allows(r, why)) << why;

  // Bound to loopback, an address is a name like any other: only the listed ones.
  HostPolicy loopback(8470, "127.0.0.1", {});
  r.headers.erase("origin");
  r.headers["host"] = "10.1.2.3:8470";
  EXPECT_FALSE(loopback.allows(r, why));
}

// A link works until its moment of expiry and not from then on; ids are
// 32 random bytes; at capacity the link expiring first makes room.
TEST(DownloadLinksTest, ALinkWorksUntilItExpiresAndTheEarliestMakesRoom) {
  DownloadLinks links(2);
  auto a = links.make("j-a", "model/model.safetensors", 1000.0, 600.0);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  EXPECT_EQ(a->id.size(), 64u);
  EXPECT_EQ(a->id.find_first_not_of("0123456789abcdef"), std::string::npos);
  ASSERT_TRUE(links.find(a->id, 1599.9).has_value());
  EXPECT_EQ(links.find(a->id, 1000.0)->path, "model/model.safetensors");
  EXPECT_EQ(links.find(a->id, 1000.0)->job_id, "j-a");
  EXPECT_FALSE(links.find(a->id, 1600.0).has_value());
  EXPECT_FALSE(links.find(std::string(64, 'x'), 1000.0).has_value());

  auto b = links.make("j-b", "plan.json", 1000.0, 100.0);  // expires first
  auto c = links.make("j-c", "plan.json", 1000.0, 300.0);
  ASSERT_TRUE(b.is_ok() && c.is_ok());
  EXPECT_NE(b->id, c->id);
  EXPECT_TRUE(links.find(a->id, 1001.0).has_value());
  EXPECT_FALSE(links.find(b->id, 1001.0).has_value());
  EXPECT_TRUE(links.find(c->id, 1001.0).has_value());
  // At capacity again, expired links are dropped and no live one evicted.
  auto d = links.make("j-d", "plan.json", 1700.0, 10.0);
  ASSERT_TRUE(d.is_ok());
  EXPECT_TRUE(links.find(d->id, 1700.0).has_value());
  EXPECT_FALSE(links.find(a->id, 1500.0).has_value());
}

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

TEST(SchedulerTest, PriorityOrderWithoutBackfillPastABlockedJob) {
  Capacity cap;
  cap.host_total_bytes = 100;
  cap.host_free_bytes = 100;
  const std::vector<QueuedJob> jobs = {{"a", 0, 60, {}}, {"b", 0, 50, {}}, {"c", 0, 10, {}}};
  const auto p = schedule(jobs, cap, 0);
  ASSERT_EQ(p.size(), 1u);  // b does not fit beside a, and c must not overtake b
  EXPECT_EQ(p[0].id, "a");
}

TEST(SchedulerTest, SmallJobsShareTheMachine) {
  Capacity cap;
  cap.host_total_bytes = 100;
  cap.host_free_bytes = 100;
  const auto p = schedule({{"a", 0, 30, {}}, {"b", 0, 30, {}}, {"c", 0, 30, {}}, {"d", 0, 30, {}}}, cap, 0);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[2].id, "c");
}

TEST(SchedulerTest, BackoffDoesNotBlockAndImpossibleJobsAreNamed) {
  Capacity cap;
  cap.host_total_bytes = 100;
  cap.host_free_bytes = 100;
  cap.gpu_total = 2;
  cap.free_gpus = {0, 1};
  const auto p = schedule({{"later", 0, 10, 50.0}, {"huge", 0, 500, {}}, {"g3", 3, 0, {}}, {"g2", 2, 0, {}}}, cap, 10);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].action, Placement::Action::kNeverFits);
  EXPECT_EQ(p[1].action, Placement::Action::kNeverFits);
  EXPECT_EQ(p[2].id, "g2");
  EXPECT_EQ(p[2].gpus, (std::vector<int>{0, 1}));
}

TEST(RunFilesTest, ReadsOnlyCompleteLinesAndResumesAtTheOffset) {
  tailor::testing::TempDir dir;
  const std::string path = dir.write("m.jsonl", "{\"step\":1}\n{\"step\":2}\n{\"st");
  std::int64_t off = 0;
  auto lines = read_new_lines(path, off);
  ASSERT_TRUE(lines.is_ok());
  ASSERT_EQ(lines->size(), 2u);
  EXPECT_EQ(off, 22);
  dir.write("m.jsonl", "{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n");
  lines = read_new_lines(path, off);
  ASSERT_EQ(lines->size(), 1u);
  EXPECT_EQ(parse_metric_line((*lines)[0], 1)->step, 3);
}

TEST(RunFilesTest, MetricLineKeepsMemoryComponents) {
  const auto m = parse_metric_line(
      R"({"step":4,"loss":2.5,"tokens_per_second":100.5,"memory":{"weights":10,"activations":20,"peak_bytes":99}})", 2);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->attempt, 2);
  EXPECT_DOUBLE_EQ(*m->loss, 2.5);
  EXPECT_EQ(m->component_bytes.at("activations"), 20);
  EXPECT_EQ(*m->peak_bytes, 99);
  EXPECT_FALSE(parse_metric_line("not json", 1));
}

TEST(RunFilesTest, AnEvaluatedStepsLineCarriesTheEvalLoss) {
  const auto m = parse_metric_line(
      R"({"step":10,"loss":2.5,"eval_loss":2.75,"eval_perplexity":15.6,"eval_tokens":301,"eval_seconds":0.5})", 1);
  ASSERT_TRUE(m);
  EXPECT_DOUBLE_EQ(*m->loss, 2.5);
  EXPECT_DOUBLE_EQ(*m->eval_loss, 2.75);
  EXPECT_EQ(*m->eval_tokens, 301);
  EXPECT_DOUBLE_EQ(*m->eval_seconds, 0.5);
  EXPECT_FALSE(parse_metric_line(R"({"step":11,"loss":2.4})", 1)->eval_loss);
}

TEST(ConfigTest, FlagsOverrideEnvironmentOverrideFile) {
  tailor::testing::TempDir dir;
  const std::string file = dir.write("tailord.yaml", "data_dir: /from/file\nlisten: 127.0.0.1:1\nallowed_hosts: [a, b]\n");
  bool help = false;
  auto c = load_config({"--config", file, "--listen", "127.0.0.1:3"},
                       {{"TAILORD_LISTEN", "127.0.0.1:2"}, {"TAILORD_MAX_BODY", "2MiB"}}, help);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->data_dir, "/from/file");
  EXPECT_EQ(c->listen, "127.0.0.1:3");
  EXPECT_EQ(c->max_body_bytes, 2 << 20);
  EXPECT_EQ(c->allowed_hosts, (std::vector<std::string>{"a", "b"}));
}

TEST(ConfigTest, ErrorsNameTheSource) {
  tailor::testing::TempDir dir;
  bool help = false;
  auto c = load_config({"--data-dir", "/d"}, {{"TAILORD_CANCEL_GRACE", "soon"}}, help);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("TAILORD_CANCEL_GRACE"), std::string::npos);
  const std::string file = dir.write("bad.yaml", "data_dir: /d\nlisten_port: 3\n");
  c = load_config({"--config", file}, {}, help);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("bad.yaml:2:1"), std::string::npos) << c.status().message();
  EXPECT_FALSE(load_config({}, {}, help).is_ok());  // no data dir
}

TEST(ConfigTest, TheSlurmExecutorsSettingsAreReadAndChecked) {
  tailor::testing::TempDir dir;
  const std::string file = dir.write("tailord.yaml",
                                     "data_dir: /d\nexecutor: auto\nslurm_partition: gpu\nslurm_time_limit: 1-12:00\n"
                                     "slurm_options: [--exclusive, \"--constraint=a100,h100\"]\n");
  bool help = false;
  auto c = load_config({"--config", file, "--slurm-account", "ml"}, {{"TAILORD_SLURM_QOS", "high"}}, help);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->executor, dsl::ExecutorKind::kAuto);
  EXPECT_EQ(c->slurm.partition, "gpu");
  EXPECT_EQ(c->slurm.account, "ml");
  EXPECT_EQ(c->slurm.qos, "high");
  EXPECT_EQ(c->slurm.time_limit, "1-12:00");
  EXPECT_EQ(c->slurm.sbatch_options, (std::vector<std::string>{"--exclusive", "--constraint=a100,h100"}));
  auto bad = load_config({"--data-dir", "/d", "--executor", "kubernetes"}, {}, help);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("--executor: expected local, slurm or auto"), std::string::npos);
  bad = load_config({"--data-dir", "/d", "--slurm-time-limit", "2h"}, {}, help);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("--slurm-time-limit"), std::string::npos);
  // Options Tailor sets itself cannot be overridden: its tag, its folders.
  bad = load_config({"--data-dir", "/d", "--slurm-options", "--exclusive --comment=x"}, {}, help);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("Tailor sets --comment itself"), std::string::npos) << bad.status().message();
}

// daemon/openapi.yaml as the source tree has it; nullopt (with a failure)
// when it does not parse.
std::optional<dsl::Node> load_openapi() {
  std::ifstream f(std::string(TAILOR_SOURCE_DIR) + "/daemon/openapi.yaml");
  std::stringstream ss;
  ss << f.rdbuf();
  dsl::Diagnostics d;
  auto doc = dsl::parse_yaml(ss.str(), "openapi.yaml", d);
  EXPECT_TRUE(doc) << d.to_string();
  return doc;
}

TEST(OpenApiTest, DocumentListsExactlyTheServedRoutes) {
  auto doc = load_openapi();
  ASSERT_TRUE(doc);
  const dsl::Node* paths = doc->find("paths");
  ASSERT_NE(paths, nullptr);
  std::set<std::string> documented;
  for (const auto& p : paths->entries) {
    for (const auto& op : p.value.entries) {
      std::string method = op.key;
      if (method == "parameters") continue;
      for (char& c : method) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      documented.insert(method + " " + p.key);
    }
  }
  Api api{ApiContext{}};
  std::set<std::string> served;
  for (const Route& r : api.router().routes()) served.insert(r.method + " " + r.pattern);
  EXPECT_EQ(documented, served);
}

// The document's MemoryBreakdown lists the components' table, in order.
TEST(OpenApiTest, TheMemoryBreakdownIsTheComponentsTable) {
  auto doc = load_openapi();
  ASSERT_TRUE(doc);
  const dsl::Node* props = doc->find("components");
  for (const char* key : {"schemas", "MemoryBreakdown", "properties"}) {
    ASSERT_NE(props, nullptr) << key;
    props = props->find(key);
  }
  ASSERT_NE(props, nullptr);
  std::vector<std::string> documented, table;
  for (const auto& p : props->entries) {
    if (p.key != "overlap" && p.key != "total") documented.push_back(p.key);
  }
  for (const strategies::MemoryComponent& c : strategies::kMemoryComponents) table.emplace_back(c.key);
  EXPECT_EQ(documented, table);
}

// The error table and the document's Error.error enum are the same list,
// and the description gives each code the status the table does.
TEST(OpenApiTest, TheErrorCodesAreTheErrorTables) {
  auto doc = load_openapi();
  ASSERT_TRUE(doc);
  const dsl::Node* error = doc->find("components");
  for (const char* key : {"schemas", "Error", "properties", "error"}) {
    ASSERT_NE(error, nullptr) << key;
    error = error->find(key);
  }
  ASSERT_NE(error, nullptr);
  const dsl::Node* listed = error->find("enum");
  ASSERT_NE(listed, nullptr);
  std::vector<std::string> documented;
  for (const auto& item : listed->items) documented.push_back(item.scalar);
  std::vector<std::string> table;
  const std::string description = error->find("description")->scalar;
  for (const ErrorKind& k : error_table()) {
    table.emplace_back(k.code);
    // "<status> ... <code>" with no other status between them.
    const auto at = description.find(std::string(k.code));
    ASSERT_NE(at, std::string::npos) << k.code;
    const auto status_at = description.rfind(std::to_string(k.http_status), at);
    ASSERT_NE(status_at, std::string::npos) << k.code;
    for (const ErrorKind& other : error_table()) {
      if (other.http_status == k.http_status) continue;
      const auto between = description.find(std::to_string(other.http_status), status_at);
      EXPECT_TRUE(between == std::string::npos || between > at) << k.code << " is not listed under " << k.http_status;
    }
  }
  EXPECT_EQ(documented, table);
  for (const ErrorKind& k : error_table()) EXPECT_EQ(&error_kind(k.error), &k);
}

}  // namespace
}  // namespace tailor::daemon
