// tailord with the real tailor-runner: submit -> plan -> run -> succeeded
// with metrics in SQLite and on /metrics, log and event streaming, cancel,
// priority order, out-of-memory -> re-plan -> resume, a killed rank, a
// stopped runner, a full data folder, and a SIGKILLed or SIGTERMed daemon
// (once, and three times over) whose job still completes exactly once.
// Skipped without a built runner.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "daemon/store/job_store.h"
#include "daemon/store/sqlite.h"
#include "platform/hardware_detect.h"
#include "tests/daemon/daemon_harness.h"
#include "tests/testing/text_file.h"

namespace tailor::daemon::testing {
namespace {

// The calibration store's machine for CPU training on this machine.
std::string e2e_cpu_machine() {
  const std::string model = platform::detect_cpu_model();
  return model.empty() ? "cpu" : "cpu: " + model;
}

using nlohmann::json;
using std::chrono::seconds;

#define REQUIRE_RUNNER()                                                                             \
  if (runner_path().empty()) GTEST_SKIP() << "no tailor-runner: build with TAILOR_BUILD_RUNNER=ON or " \
                                             "set TAILOR_RUNNER"

std::string submit(const DaemonProcess& d, const std::string& spec, const std::string& query = "") {
  const auto r = d.post("/v1/jobs" + query, spec);
  EXPECT_EQ(r.status, 201) << r.body;
  return r.json().value("id", "");
}

std::vector<std::string> event_kinds(const DaemonProcess& d, const std::string& id) {
  std::vector<std::string> out;
  const json body = d.get("/v1/jobs/" + id + "/events").json();
  for (const auto& e : body.at("events")) {
    std::string k = e["kind"].get<std::string>();
    if (k == "state") k += ":" + e["to_state"].get<std::string>();
    out.push_back(k);
  }
  return out;
}

std::size_t count(const std::vector<std::string>& v, const std::string& x) {
  return static_cast<std::size_t>(std::count(v.begin(), v.end(), x));
}

// Whether any of the job's events has `text` in its message.
bool some_event_says(const DaemonProcess& d, const std::string& id, const std::string& text) {
  const json events = d.get("/v1/jobs/" + id + "/events").json();
  for (const auto& e : events.at("events")) {
    if (e.value("message", "").find(text) != std::string::npos) return true;
  }
  return false;
}

// tailord started with TAILOR_FAILPOINTS=`points` in its environment,
// which its runners inherit (platform/failpoint.h, docs/testing.md).
std::unique_ptr<DaemonProcess> daemon_with_failpoints(const std::string& data, const std::string& points,
                                                      std::vector<std::string> args = {}) {
  ::setenv("TAILOR_FAILPOINTS", points.c_str(), 1);
  auto d = std::make_unique<DaemonProcess>(data, std::move(args));
  ::unsetenv("TAILOR_FAILPOINTS");
  return d;
}

// The job ended as a crash retried from its checkpoint should: succeeded
// at `steps` after more than one attempt, resumed, done once.
void expect_recovered_to_success(const DaemonProcess& d, const std::string& id, int steps) {
  const json job = d.job(id);
  ASSERT_EQ(job["state"], "succeeded") << job.dump(1);
  EXPECT_EQ(job["last_step"], steps);
  EXPECT_GE(job["attempts"].get<int>(), 2);
  const auto kinds = event_kinds(d, id);
  EXPECT_GE(count(kinds, "runner.resume"), 1u);
  EXPECT_EQ(count(kinds, "runner.done"), 1u);
}

// tailord's --tensorboard reaches jobs that leave the tracker unset (the
// frozen spec says so), not one that opts out; the tracker's state is an
// event of the job and a series on /metrics; an MLflow section with no
// server anywhere is refused at submission.
TEST(RunE2eTest, TailordsTrackerDefaultsReachJobsThatLeaveThemUnset) {
  REQUIRE_RUNNER();
  tailor::testing::TempDir dir;
  DaemonProcess d(dir.file("data"), {"--tensorboard", "true"});
  ASSERT_TRUE(d.ok()) << d.log();
  const std::string on = submit(d, tiny_spec("tracked", 3, 0));
  const std::string off = submit(d, tiny_spec("untracked", 3, 0) + "tracking:\n  tensorboard:\n    enabled: false\n");
  ASSERT_FALSE(on.empty());
  ASSERT_FALSE(off.empty());
  const auto refused = d.post("/v1/jobs", tiny_spec("no-server", 3, 0) + "tracking:\n  mlflow:\n    experiment: x\n");
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_NE(refused.body.find("tracking.mlflow.uri: required"), std::string::npos) << refused.body;
  // With --mlflow-uri and --mlflow-experiment, a section that names neither
  // takes both, and a job that says nothing is logged there too (planned
  // only: no server listens).
  DaemonProcess m(dir.file("mlflow-data"), {"--mlflow-uri", "http://127.0.0.1:1", "--mlflow-experiment", "team"});
  ASSERT_TRUE(m.ok()) << m.log();
  for (const std::string extra : {"tracking:\n  mlflow:\n    run_name: r\n", ""}) {
    const auto planned = m.post("/v1/jobs?dry_run=true", tiny_spec("defaults", 3, 0) + extra);
    ASSERT_EQ(planned.status, 200) << planned.body;
    const json mlflow = planned.json()["spec"]["tracking"]["mlflow"];
    EXPECT_EQ(mlflow["uri"], "http://127.0.0.1:1") << mlflow.dump();
    EXPECT_EQ(mlflow["experiment"], "team") << mlflow.dump();
  }
  ASSERT_TRUE(d.wait_state(on, "", seconds(120)));
  ASSERT_TRUE(d.wait_state(off, "", seconds(120)));
  ASSERT_EQ(d.job(on)["state"], "succeeded") << d.job(on).dump(1);
  ASSERT_EQ(d.job(off)["state"], "succeeded") << d.job(off).dump(1);

  auto event_files = [&](const std::string& id) {
    int n = 0;
    for (const auto& f : std::filesystem::directory_iterator(dir.file("data/jobs/" + id))) {
      n += f.path().filename().string().find("tfevents") != std::string::npos;
    }
    return n;
  };
  EXPECT_EQ(event_files(on), 1);
  EXPECT_EQ(event_files(off), 0);
  const std::string frozen = d.job(on)["plan"]["spec"]["tracking"]["tensorboard"].dump();
  EXPECT_NE(frozen.find("\"enabled\":true"), std::string::npos) << frozen;
  const auto kinds = event_kinds(d, on);
  EXPECT_GE(count(kinds, "runner.tracker"), 2u);  // up, closed
  EXPECT_EQ(count(event_kinds(d, off), "runner.tracker"), 0u);
  const std::string metrics = d.get("/metrics").body;
  EXPECT_NE(metrics.find("tailor_job_tracker_up{job=\"tracked\",job_id=\"" + on + "\",tracker=\"tensorboard\"} 1"),
            std::string::npos)
      << metrics;
}

TEST(RunE2eTest, SubmittedJobRunsToSuccessWithMetricsInStoreAndPrometheus) {
  REQUIRE_RUNNER();
  tailor::testing::TempDir dir;
  DaemonProcess d(dir.file("data"));
  ASSERT_TRUE(d.ok()) << d.log();
  // Evaluated after steps 3 and 6 on the training file (what is measured
  // is that the eval loss travels, not generalisation).
  std::string spec = tiny_spec("ok-job", 6, 3);
  const std::string train = "  train: data/tiny-corpus.txt\n";
  ASSERT_NE(spec.find(train), std::string::npos);
  spec.replace(spec.find(train), train.size(), train + "  eval: data/tiny-corpus.txt\n");
  spec.replace(spec.find("training:\n"), 10, "training:\n  eval_every: 3\n");
  const std::string id = submit(d, spec);
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(d.wait_state(id, "", seconds(120)));
  const json job = d.job(id);
  ASSERT_EQ(job["state"], "succeeded") << job.dump();
  EXPECT_TRUE(job["exit_reason"].is_null());
  EXPECT_EQ(job["exit_code"], 0);
  EXPECT_EQ(job["last_step"], 6);
  EXPECT_EQ(job["plan"]["fits"], true);
  EXPECT_FALSE(job["created_at"].get<std::string>().empty());

  const auto kinds = event_kinds(d, id);
  const std::vector<std::string> states = {"state:queued", "state:planning", "state:running", "state:succeeded"};
  std::vector<std::string> seen;
  for (const auto& k : kinds) {
    if (k.rfind("state:", 0) == 0) seen.push_back(k);
  }
  EXPECT_EQ(seen, states);
  EXPECT_EQ(count(kinds, "runner.start"), 1u);
  EXPECT_EQ(count(kinds, "runner.done"), 1u);
  EXPECT_EQ(count(kinds, "runner.eval"), 2u);

  // The store, read directly (WAL lets a second connection read).
  auto store = JobStore::open(dir.file("data/tailor.db"));
  ASSERT_TRUE(store.is_ok()) << store.status().to_string();
  auto rows = (*store)->metrics(id);
  ASSERT_TRUE(rows.is_ok());
  ASSERT_EQ(rows->size(), 6u);
  for (std::size_t i = 0; i < rows->size(); ++i) {
    EXPECT_EQ((*rows)[i].step, static_cast<std::int64_t>(i + 1));
    EXPECT_TRUE((*rows)[i].loss.has_value());
    EXPECT_GT((*rows)[i].component_bytes.at("weights"), 0);
    EXPECT_GT(*(*rows)[i].peak_bytes, 0);
    // The eval loss on the steps evaluated, and only there.
    EXPECT_EQ((*rows)[i].eval_loss.has_value(), (i + 1) % 3 == 0) << "step " << i + 1;
    if ((*rows)[i].eval_loss) {
      EXPECT_GT(*(*rows)[i].eval_tokens, 0);
    }
  }
  ASSERT_TRUE((*rows)[5].eval_loss.has_value());
  EXPECT_LT(*(*rows)[5].eval_loss, *(*rows)[2].eval_loss);
  EXPECT_EQ(job["last_eval_step"], 6);
  EXPECT_DOUBLE_EQ(job["last_eval_loss"].get<double>(), *(*rows)[5].eval_loss);
  // The API's view of the same rows.
  const json since = d.get("/v1/jobs/" + id + "/metrics?since_step=4").json();
  ASSERT_EQ(since["metrics"].size(), 2u);
  EXPECT_EQ(since["metrics"][0]["step"], 5);
  EXPECT_TRUE(since["metrics"][0]["eval_loss"].is_null());
  EXPECT_DOUBLE_EQ(since["metrics"][1]["eval_loss"].get<double>(), *(*rows)[5].eval_loss);
  EXPECT_NEAR(since["metrics"][1]["eval_perplexity"].get<double>(), std::exp(*(*rows)[5].eval_loss), 1e-9);

  const auto prom = http_request(d.address(), "GET", "/metrics");
  ASSERT_EQ(prom.status, 200);
  const std::string sel = "job_id=\"" + id + "\"";
  for (const std::string& want :
       {std::string("tailor_job_loss{"), std::string("tailor_job_eval_loss{"),
        std::string("tailor_job_tokens_per_second{"),
        std::string("source=\"estimated\""), std::string("source=\"measured\"")}) {
    bool found = false;
    std::istringstream lines(prom.body);
    for (std::string line; std::getline(lines, line);) found = found || (line.find(want) != std::string::npos && line.find(sel) != std::string::npos);
    EXPECT_TRUE(found) << want;
  }
  EXPECT_NE(prom.body.find("tailor_jobs{state=\"succeeded\"} 1"), std::string::npos);
  EXPECT_NE(prom.body.find("tailor_http_requests_total{"), std::string::npos);
  EXPECT_NE(prom.body.find("tailor_http_request_duration_seconds_bucket{"), std::string::npos);
}

// The server-sent events of a body: (event, data) in order.
std::vector<std::pair<std::string, json>> sse_events(const std::string& body) {
  std::vector<std::pair<std::string, json>> out;
  std::istringstream lines(body);
  std::string event;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("event: ", 0) == 0) event = line.substr(7);
    if (line.rfind("data: ", 0) == 0) out.emplace_back(event, json::parse(line.substr(6), nullptr, false));
  }
  return out;
}

// POST /v1/jobs/{id}/generate: a succeeded job's model streams its tokens
// and the result; what cannot be generated is refused with the reason.
// strategy.probe as a job's first phase: the candidates measured before
// training, each an event with words; the job's plan becomes the probed
// one (predicted beside measured, the choice trained); tailord's
// calibration store gets the probes and the run; the next plan of the
// same kind is calibrated by them.
TEST(RunE2eTest, AProbedJobRecordsItsMeasurementsInItsPlanAndCalibratesTheNext) {
  REQUIRE_RUNNER();
  tailor::testing::TempDir dir;
  DaemonProcess d(dir.file("data"));
  ASSERT_TRUE(d.ok()) << d.log();
  std::string spec = tiny_spec("probed", 4, 0);
  const std::string strategy = "strategy:\n";
  ASSERT_NE(spec.find(strategy), std::string::npos);
  spec.replace(spec.find(strategy), strategy.size(), strategy + "  probe: 2\n");
  const std::string id = submit(d, spec);
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(d.wait_ended_while_moving(id, seconds(120)));
  const json job = d.job(id);
  ASSERT_EQ(job["state"], "succeeded") << job.dump();
  const auto kinds = event_kinds(d, id);
  EXPECT_EQ(count(kinds, "runner.probe_start"), 1u);
  EXPECT_EQ(count(kinds, "runner.probe"), 2u);
  EXPECT_EQ(count(kinds, "runner.probe_done"), 1u);
  EXPECT_TRUE(some_event_says(d, id, "probing 2 plans before training"));
  EXPECT_TRUE(some_event_says(d, id, "tokens/s, peak"));
  // The probe's events come before training starts.
  const auto done = std::find(kinds.begin(), kinds.end(), "runner.probe_done");
  const auto start = std::find(kinds.begin(), kinds.end(), "runner.start");
  EXPECT_LT(done - kinds.begin(), start - kinds.begin());
  const json plan = d.get("/v1/jobs/" + id + "/plan").json();
  ASSERT_TRUE(plan.contains("probe")) << plan.dump();
  ASSERT_EQ(plan["probe"]["candidates"].size(), 2u);
  const int chosen = plan["probe"]["chosen"].get<int>();
  ASSERT_GE(chosen, 0);
  EXPECT_EQ(plan["summary"], plan["probe"]["candidates"][chosen]["summary"]);
  for (const json& c : plan["probe"]["candidates"])
    EXPECT_EQ(c["measured"]["outcome"], "fits") << c.dump();
  // The store: two probes and the run.
  {
    auto db = Database::open(dir.file("data/calibration.db"));
    ASSERT_TRUE(db.is_ok()) << db.status().to_string();
    auto q = db->prepare("SELECT source, COUNT(*) FROM calibration GROUP BY source ORDER BY source");
    ASSERT_TRUE(q.is_ok());
    std::map<std::string, std::int64_t> by_source;
    while (*q->step())
      by_source[q->text(0)] = q->int64(1);
    EXPECT_EQ(by_source, (std::map<std::string, std::int64_t>{{"job", 1}, {"probe", 2}}));
  }
  // The next job's plan is calibrated from those three.
  const std::string next = submit(d, tiny_spec("after", 2, 0));
  ASSERT_TRUE(d.wait_ended_while_moving(next, seconds(120)));
  const json after = d.get("/v1/jobs/" + next + "/plan").json();
  ASSERT_TRUE(after.contains("calibration")) << after.dump();
  EXPECT_EQ(after["calibration"]["runs"], 3);
  EXPECT_EQ(after["calibration"]["key"], e2e_cpu_machine() + " / tailor / llama");
}

TEST(RunE2eTest, ASucceededJobsModelGeneratesAsServerSentEventsAndAnswersOpenAICompletions) {
  REQUIRE_RUNNER();
  tailor::testing::TempDir dir;
  DaemonProcess d(dir.file("data"));
  ASSERT_TRUE(d.ok()) << d.log();
  // Its eval prompt is answered after the last step, and kept with the job.
  std::string spec = tiny_spec("gen-job", 3, 100);
  spec.replace(spec.find("training:\n"), 10, "training:\n  eval_prompts: [\"The\"]\n  eval_max_tokens: 4\n");
  const std::string id = submit(d, spec);
  ASSERT_FALSE(id.empty());
  // A queued or running job has no model yet.
  const auto early = d.post("/v1/jobs/" + id + "/generate", R"({"prompt": "The"})", "application/json");
  if (early.status != 200) {
    EXPECT_EQ(early.status, 409) << early.body;
  }
  ASSERT_TRUE(d.wait_state(id, "succeeded", seconds(120)));
  const json stored = d.get("/v1/jobs/" + id + "/events").json();
  const auto generation = std::find_if(stored["events"].begin(), stored["events"].end(),
                                       [](const json& e) { return e["kind"] == "runner.generation"; });
  ASSERT_NE(generation, stored["events"].end()) << stored.dump();
  EXPECT_EQ((*generation)["data"]["step"], 3);
  EXPECT_EQ((*generation)["data"]["answers"][0]["prompt"], "The");
  EXPECT_LE((*generation)["data"]["answers"][0]["tokens"].get<int>(), 4);

  const auto r = d.post("/v1/jobs/" + id + "/generate", R"({"prompt": "The", "max_tokens": 12, "temperature": 0.9,
      "top_k": 50, "seed": 3})", "application/json");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers.at("content-type"), "text/event-stream");
  const auto events = sse_events(r.body);
  ASSERT_FALSE(events.empty()) << r.body;
  ASSERT_EQ(events.back().first, "done") << r.body;
  const json& done = events.back().second;
  std::vector<std::int64_t> streamed;
  std::string text;
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    ASSERT_EQ(events[i].first, "token") << r.body;
    streamed.push_back(events[i].second["id"].get<std::int64_t>());
    text += events[i].second["text"].get<std::string>();
  }
  EXPECT_EQ(json(streamed), done["ids"]);
  EXPECT_EQ(done["completion_tokens"], streamed.size());
  EXPECT_TRUE(done["text"].get<std::string>().rfind(text, 0) == 0) << text << " vs " << done["text"];
  EXPECT_TRUE(done["finish_reason"] == "length" ? streamed.size() == 12 : done["finish_reason"] == "stop");
  // The same seed, the same tokens.
  const auto again = d.post("/v1/jobs/" + id + "/generate", R"({"prompt": "The", "max_tokens": 12, "temperature": 0.9,
      "top_k": 50, "seed": 3})", "application/json");
  ASSERT_EQ(again.status, 200);
  EXPECT_EQ(sse_events(again.body).back().second["ids"], done["ids"]);

  // Refused before anything runs: a bad body (400 naming the field), an
  // unknown job (404), a read-only token (403).
  for (const char* body : {R"({"prompt": "x", "max_tokens": 0})", R"({"prompt": "x", "messages": []})",
                           R"({"prompt": "x", "top_p": 0})", R"({"prompt": "x", "colour": 1})",
                           R"({"prompt": "x", "presence_penalty": 3})", R"({"prompt": "x", "repetition_penalty": 0})",
                           R"({"prompt": "x", "min_p": 2})", R"({"prompt": "x", "logit_bias": {"1": 1}})", "[]"}) {
    const auto bad = d.post("/v1/jobs/" + id + "/generate", body, "application/json");
    EXPECT_EQ(bad.status, 400) << body << " -> " << bad.body;
  }
  EXPECT_NE(d.post("/v1/jobs/" + id + "/generate", R"({"prompt": "x", "top_p": 0})", "application/json")
                .json()["message"].get<std::string>().find("top_p"), std::string::npos);
  EXPECT_EQ(d.post("/v1/jobs/j-0000000000000000/generate", R"({"prompt": "x"})", "application/json").status, 404);
  std::ifstream reader_file(dir.file("data/token.read"));
  std::string reader;
  std::getline(reader_file, reader);
  EXPECT_EQ(http_request(d.address(), "POST", "/v1/jobs/" + id + "/generate", R"({"prompt": "x"})",
                         {{"Authorization", "Bearer " + reader}, {"Content-Type", "application/json"}})
                .status,
            403);
  // What only the runner can tell comes as an error event: a prompt longer
  // than the model's context.
  const auto too_long = d.post("/v1/jobs/" + id + "/generate",
                               json{{"prompt", std::string(5000, 'a')}}.dump(), "application/json");
  ASSERT_EQ(too_long.status, 200);
  const auto error = sse_events(too_long.body);
  ASSERT_EQ(error.size(), 1u) << too_long.body;
  EXPECT_EQ(error[0].first, "error");
  EXPECT_EQ(error[0].second["error"], "invalid_argument");
  EXPECT_NE(error[0].second["message"].get<std::string>().find("context"), std::string::npos) << too_long.body;
  // Nothing is left behind once the streams are closed.
  EXPECT_TRUE(wait_for([&] { return !std::filesystem::exists(dir.file("data/generate")) ||
                                    std::filesystem::is_empty(dir.file("data/generate")); },
                       seconds(10)));

  // OpenAI's completions with the same model (what lm-eval posts): the
  // greedy text is the generation's, after the echoed prompt, every token
  // scored.
  const auto greedy = d.post("/v1/jobs/" + id + "/generate", R"({"prompt": "The", "max_tokens": 6})", "application/json");
  ASSERT_EQ(greedy.status, 200);
  const json generated = sse_events(greedy.body).back().second;
  const auto c = d.post("/v1/jobs/" + id + "/completions",
                        R"({"prompt": "The", "max_tokens": 6, "temperature": 0, "echo": true, "logprobs": 2})",
                        "application/json");
  ASSERT_EQ(c.status, 200) << c.body;
  const json completion = c.json();
  EXPECT_EQ(completion["object"], "text_completion");
  EXPECT_EQ(completion["model"], id);
  EXPECT_EQ(completion["choices"][0]["text"], "The" + generated["text"].get<std::string>());
  EXPECT_EQ(completion["usage"]["completion_tokens"], generated["completion_tokens"].get<int>() -
                                                          (generated["finish_reason"] == "stop" ? 1 : 0));
  const json& lp = completion["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"].size(), completion["usage"]["total_tokens"].get<std::size_t>());
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  // Penalties and min-p reach both routes' generation alike.
  const std::string penalties =
      R"("repetition_penalty": 1.3, "presence_penalty": 0.5, "frequency_penalty": 0.5, "min_p": 0.1)";
  const auto penalised = d.post("/v1/jobs/" + id + "/generate",
                                R"({"prompt": "The", "max_tokens": 6, )" + penalties + "}", "application/json");
  ASSERT_EQ(penalised.status, 200) << penalised.body;
  const json penalised_done = sse_events(penalised.body).back().second;
  ASSERT_TRUE(penalised_done.contains("text")) << penalised.body;
  const auto pc =
      d.post("/v1/jobs/" + id + "/completions",
             R"({"prompt": "The", "max_tokens": 6, "temperature": 0, )" + penalties + "}", "application/json");
  ASSERT_EQ(pc.status, 200) << pc.body;
  EXPECT_EQ(pc.json()["choices"][0]["text"], penalised_done["text"]);
  // The model stays loaded for the next request; what it does not compute
  // is refused in OpenAI's shape, naming the field.
  const auto n2 =
      d.post("/v1/jobs/" + id + "/completions", R"({"prompt": "The", "n": 2, "max_tokens": 2})", "application/json");
  ASSERT_EQ(n2.status, 200) << n2.body;
  EXPECT_EQ(n2.json()["choices"].size(), 2u);
  // Streamed: text_completion chunks adding up to the generation's text.
  const auto sc = d.post("/v1/jobs/" + id + "/completions",
                         R"({"prompt": "The", "max_tokens": 6, "temperature": 0, "stream": true})", "application/json");
  ASSERT_EQ(sc.status, 200) << sc.body;
  std::string streamed_text;
  for (std::size_t at = 0; (at = sc.body.find("data: {", at)) != std::string::npos; ++at) {
    streamed_text += json::parse(sc.body.substr(at + 6, sc.body.find("\n\n", at) - at - 6))["choices"][0]["text"];
  }
  EXPECT_EQ(streamed_text, generated["text"]) << sc.body;
  EXPECT_NE(sc.body.find("data: [DONE]"), std::string::npos) << sc.body;
  const auto n17 = d.post("/v1/jobs/" + id + "/completions", R"({"prompt": "The", "n": 17})", "application/json");
  EXPECT_EQ(n17.status, 400);
  EXPECT_EQ(n17.json()["error"]["param"], "n") << n17.body;
  const auto outside =
      d.post("/v1/jobs/" + id + "/completions", R"({"prompt": "The", "logit_bias": {"99999": 1}})", "application/json");
  EXPECT_EQ(outside.status, 400);
  EXPECT_EQ(outside.json()["error"]["param"], "logit_bias") << outside.body;
  EXPECT_EQ(d.post("/v1/jobs/" + id + "/completions", "{\"prompt\": ", "application/json").status, 400);
  EXPECT_EQ(d.post("/v1/jobs/j-0000000000000000/completions", R"({"prompt": "x"})", "application/json").status, 404);
  EXPECT_EQ(http_request(d.address(), "POST", "/v1/jobs/" + id + "/completions", R"({"prompt": "x"})",
                         {{"Authorization", "Bearer " + reader}, {"Content-Type", "application/json"}})
                .status,
            403);
  EXPECT_TRUE(std::filesystem::exists(dir.file("data/serve/completions-" + id + ".log")));
  // Chat completions go to the same model process; a model trained on
  // plain text has no chat template to render a conversation with.
  const auto no_template = d.post("/v1/jobs/" + id + "/chat/completions",
                                  R"({"messages": [{"role": "user", "content": "Hi"}]})", "application/json");
  EXPECT_EQ(no_template.status, 400) << no_template.body;
  EXPECT_NE(no_template.body.find("no chat template"), std::string::npos) << no_template.body;

  // Its model exported into its folder: a GGUF file that llama.cpp loads
  // with the logits and tokens of the job's model/ in transformers, then one
  // of the job's files; a merged folder, downloadable as one archive.
  const auto ex = d.post("/v1/jobs/" + id + "/exports", R"({"format": "gguf", "outtype": "f32"})", "application/json");
  ASSERT_EQ(ex.status, 201) << ex.body;
  const json exported = ex.json();
  EXPECT_EQ(exported["path"], "exports/model-f32.gguf");
  EXPECT_EQ(exported["architecture"], "llama");
  EXPECT_EQ(exported["tokenizer"]["pre"], "gpt-2");  // the byte tokenizer's
  EXPECT_FALSE(exported.contains("file"));            // no host paths
  // Ollama's Modelfile beside it, named as the job's files name it.
  EXPECT_EQ(exported["modelfile"], "exports/model-f32.Modelfile");
  const std::string job_dir = dir.file("data/jobs/" + id);
  EXPECT_EQ(std::filesystem::file_size(job_dir + "/exports/model-f32.gguf"), exported["bytes"].get<std::uintmax_t>());
  const std::string check = std::string(TAILOR_SOURCE_DIR) + "/.venv/bin/python " + TAILOR_SOURCE_DIR +
                            "/tests/runner/gguf_reference.py folder " + job_dir + "/exports/model-f32.gguf " + job_dir +
                            "/model f32 > " + dir.file("gguf-check.log") + " 2>&1";
  EXPECT_EQ(std::system(check.c_str()), 0) << tailor::testing::read_text(dir.file("gguf-check.log"));
  const json files = d.get("/v1/jobs/" + id + "/files").json();
  EXPECT_NE(files.dump().find("\"exports/model-f32.gguf\""), std::string::npos) << files.dump();
  EXPECT_NE(files.dump().find("\"exports/model-f32.Modelfile\""), std::string::npos) << files.dump();
  const auto folder = d.post("/v1/jobs/" + id + "/exports", R"({"format": "safetensors", "dtype": "bf16"})",
                             "application/json");
  ASSERT_EQ(folder.status, 201) << folder.body;
  EXPECT_EQ(folder.json()["path"], "exports/model-bf16");
  EXPECT_EQ(d.get("/v1/jobs/" + id + "/archive?path=exports/model-bf16").status, 200);
  // Refused, naming the field: another format or type, a type for the other
  // format, an unknown field; no such job; a read-only token.
  for (const char* body : {R"({"format": "onnx"})", R"({"outtype": "q4_0"})", R"({"format": "gguf", "dtype": "bf16"})",
                           R"({"format": "safetensors", "outtype": "f16"})", R"({"colour": "red"})", "[]"}) {
    const auto bad = d.post("/v1/jobs/" + id + "/exports", body, "application/json");
    EXPECT_EQ(bad.status, 400) << body << " -> " << bad.body;
  }
  EXPECT_NE(d.post("/v1/jobs/" + id + "/exports", R"({"outtype": "q4_0"})", "application/json")
                .json()["message"].get<std::string>().find("outtype"), std::string::npos);
  EXPECT_EQ(d.post("/v1/jobs/j-0000000000000000/exports", "{}", "application/json").status, 404);
  EXPECT_EQ(http_request(d.address(), "POST", "/v1/jobs/" + id + "/exports", "{}",
                         {{"Authorization", "Bearer " + reader}, {"Content-Type", "application/json"}})
                .status,
            403);
}

TEST(RunE2eTest, ATwoRankJobReservesBothRanksAndReportsEachRanksPeak) {
  REQUIRE_RUNNER();
  tailor::testing::TempDir dir;
  DaemonProcess d(dir.file("data"));
  ASSERT_TRUE(d.ok()) << d.log();
  std::string spec = tiny_spec("two-ranks", 4, 2, 0, /*small=*/true);
  spec.replace(spec.find("host_memory: 2GiB"), 17, "host_memory: 2GiB\n  ranks: 2");
  spec.replace(spec.find("adapter: none"), 13, "adapter: none\n  zero_stage: 1");
  const std::string id = submit(d, spec);
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(d.wait_state(id, "", seconds(120)));
  const json job = d.job(id);
  ASSERT_EQ(job["state"], "succeeded") << job.dump();
  EXPECT_EQ(job["last_step"], 4);
  EXPECT_EQ(job["plan"]["strategy"]["num_gpus"], 2);
  // Both ranks' estimates are held on the host while it runs.
  EXPECT_EQ(job["reserved_bytes"].get<std::int64_t>(), 2 * job["plan"]["memory"]["per_gpu"]["total"].get<std::int64_t>());
  EXPECT_EQ(count(event_kinds(d, id), "runner.start"), 1u);  // rank 0's; rank 1 reports in its own file
  const auto prom = http_request(d.address(), "GET", "/metrics");
  for (const std::string rank : {"0", "1"}) {
    const std::string want = "tailor_job_rank_memory_peak_bytes{job=\"two-ranks\",job_id=\"" + id + "\",rank=\"" + rank + "\"}";
    EXPECT_NE(prom.body.find(want), std::string::npos) << want << "\n" << prom.body;
  }
}

// One rank killed: the launcher stops the other at once, tailord counts a
// failure, and the retry resumes both ranks from the last checkpoint.
TEST(RunE2eTest, AKilledRankFailsTheAttemptAndTheRetryResumesFromTheCheckpoint) {
  REQUIRE_RUNNER();
  tailor::testing::TempDir dir;
  // Both ranks wait after the first checkpoint until the blow lands.
  const auto daemon =
      daemon_with_failpoints(dir.file("data"), "runner.hold_after_first_checkpoint", {"--retry-backoff", "0.1"});
  const DaemonProcess& d = *daemon;
  ASSERT_TRUE(d.ok()) << d.log();
  std::string spec = tiny_spec("rank-dies", 12, 5, 0, /*small=*/true);
  spec.replace(spec.find("host_memory: 2GiB"), 17, "host_memory: 2GiB\n  ranks: 2");
  const std::string id = submit(d, spec);
  ASSERT_FALSE(id.empty());
  const std::string job_dir = dir.file("data/jobs/" + id);
  // Rank 1's process, once rank 0 has written a checkpoint.
  pid_t victim = 0;
  ASSERT_TRUE(wait_for(
      [&] {
        if (count(event_kinds(d, id), "runner.checkpoint") == 0) return false;
        std::ifstream f(job_dir + "/events.rank-1.jsonl");
        for (std::string line; std::getline(f, line);) {
          const json e = json::parse(line, nullptr, false);
          if (e.is_object() && e.value("event", "") == "start") victim = e.value("rank_pid", 0);
        }
        return victim > 0;
      },
      seconds(120)));
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  ASSERT_TRUE(d.wait_state(id, "", seconds(240)));
  expect_recovered_to_success(d, id, 12);
  EXPECT_TRUE(some_event_says(d, id, "rank 1 was killed by signal 9")) << d.get("/v1/jobs/" + id + "/events").body;
}

TEST(RunE2eTest, AStoppedRunnerIsLostAfterTheHeartbeatTimeoutAndResumesFromTheCheckpoint) {
  REQUIRE_RUNNER();
  tailor::testing::TempDir dir;
  // The runner waits after its first checkpoint until it is stopped.
  const auto daemon = daemon_with_failpoints(dir.file("data"), "runner.hold_after_first_checkpoint",
                                             {"--retry-backoff", "0.1", "--heartbeat-timeout", "3"});
  const DaemonProcess& d = *daemon;
  ASSERT_TRUE(d.ok()) << d.log();
  const std::string id = submit(d, tiny_spec("stopped", 12, 5, 0, /*small=*/true));
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(wait_for([&] { return count(event_kinds(d, id), "runner.checkpoint") > 0; }, seconds(120)));
  const pid_t pid = d.job(id)["pid"].get<pid_t>();
  // The whole process group stops, as under a frozen cgroup: no exit, no
  // output, only silence.
  ASSERT_EQ(::kill(-pid, SIGSTOP), 0);
  ASSERT_TRUE(d.wait_state(id, "", seconds(240)));
  expect_recovered_to_success(d, id, 12);
  EXPECT_EQ(count(event_kinds(d, id), "lost"), 1u);
  EXPECT_TRUE(some_event_says(d, id, "lost: no heartbeat in heartbeat for")) << d.get("/v1/jobs/" + id + "/events").body;
  EXPECT_NE(::kill(pid, 0), 0) << "the stopped runner is still there";
}

// The disk-full defect: a checkpoint write failed, the runner aborted, and
// the job stayed "running" with a dead pid until a restart, because the
// store could not take the verdict and the supervisor forgot the runner.
// Now what the store cannot take waits in memory (/healthz degraded) and
// lands when space returns, and the job ends once, at its last step.
TEST(RunE2eTest, AFullDataFolderDegradesHealthAndTheJobEndsOnceWhenSpaceReturns) {
  REQUIRE_RUNNER();
  tailor::testing::TempDir dir;
  const std::string data = dir.file("data");
  std::filesystem::create_directories(data);
  if (::mount("tmpfs", data.c_str(), "tmpfs", 0, "size=64m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  }
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{data};
  const std::string filler = data + "/filler";
  {
    DaemonProcess d(data, {"--retry-backoff", "0.1"});
    ASSERT_TRUE(d.ok()) << d.log();
    const std::string id = submit(d, tiny_spec("fills-up", 60, 5, 0, /*small=*/true));
    ASSERT_FALSE(id.empty());
    ASSERT_TRUE(wait_for([&] { return count(event_kinds(d, id), "runner.checkpoint") > 0; }, seconds(120)));
    {
      std::FILE* f = std::fopen(filler.c_str(), "wb");
      ASSERT_NE(f, nullptr);
      const std::string block(64 << 10, 'x');
      while (std::fwrite(block.data(), 1, block.size(), f) == block.size() && std::fflush(f) == 0) {
      }
      std::fclose(f);
    }
    // The attempt fails; its verdict cannot be stored, or it can and the
    // retry fails in turn. Either way the job must not stay "running" for
    // a runner that is gone.
    bool degraded = false;
    ASSERT_TRUE(wait_for(
        [&] {
          degraded = degraded || d.get("/healthz").status == 503;
          return degraded || d.job(id)["failures"].get<int>() > 0;
        },
        seconds(120)));
    std::filesystem::remove(filler);
    ASSERT_TRUE(d.wait_state(id, "", seconds(240)));
    // A failed checkpoint does not stop training (checkpoint_error); a
    // failed write of the model does, and the retry resumes. Either way:
    const json job = d.job(id);
    EXPECT_EQ(job["state"], "succeeded") << job.dump(1);
    EXPECT_EQ(job["last_step"], 60);
    EXPECT_EQ(count(event_kinds(d, id), "runner.done"), 1u);
    EXPECT_EQ(d.get("/healthz").status, 200);
    std::cout << "[ note     ] /healthz was " << (degraded ? "" : "not ") << "seen degraded; attempts "
              << job["attempts"] << "\n";
    // No half-written checkpoint stays behind or was taken for a whole one.
    for (const auto& e : std::filesystem::directory_iterator(data + "/jobs/" + id + "/checkpoints")) {
      EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
    }
  }
}

TEST(RunE2eTest, MetricsExpositionPassesPromtool) {
  REQUIRE_RUNNER();
  if (std::system("command -v promtool > /dev/null 2>&1") != 0) GTEST_SKIP() << "promtool not installed";
  tailor::testing::TempDir dir;
  DaemonProcess d(dir.file("data"));
  ASSERT_TRUE(d.ok());
  const std::string id = submit(d, tiny_spec("prom", 3, 0));
  ASSERT_TRUE(d.wait_state(id, "succeeded", seconds(120)));
  d.get("/v1/jobs");  // some request series
  const auto prom = http_request(d.address(), "GET", "/metrics");
  ASSERT_EQ(prom.status, 200);
  const std::string file = dir.write("metrics.txt", prom.body);
  const std::string out = dir.file("promtool.out");
  const int rc = std::system(("promtool check metrics < " + file + " > " + out + " 2>&1").c_str());
  std::ifstream f(out);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(rc, 0) << ss.str();
}

TEST(RunE2eTest, LogsFollowStreamsUntilTheJobEnds) {
  REQUIRE_RUNNER();
  tailor::testing::TempDir dir;
  DaemonProcess d(dir.file("data"));
  ASSERT_TRUE(d.ok());
  const std::string id = submit(d, tiny_spec("logs", 5, 0));
  const auto r = d.get("/v1/jobs/" + id + "/logs?follow=true");
  ASSERT_EQ(r.status, 200) << r.error;
  EXPECT_EQ(r.headers.at("transfer-encoding"), "chunked");
  EXPECT_NE(r.body.find("step 5/5"), std::string::npos) << r.body;
  EXPECT_EQ(d.job(id)["state"], "succeeded");  // the stream ended with the job
}

// One server-sent event: its id (0: none), type and data.
struct Sse {
  std::int64_t id = 0;
  std::string event;
  json data;
};

// Parses a text/event-stream body (fields "id", "event", "data"; comments
// and "retry" skipped).
std::vector<Sse> parse_sse(const std::string& body) {
  std::vector<Sse> out;
  Sse cur;
  std::istringstream in(body);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) {
      if (!cur.event.empty()) out.push_back(cur);
      cur = Sse{};
    } else if (line.rfind("id: ", 0) == 0) {
      cur.id = std::stoll(line.substr(4));
    } else if (line.rfind("event: ", 0) == 0) {
      cur.event = line.substr(7);
    } else if (line.rfind("data: ", 0) == 0) {
      cur.data = json::parse(line.substr(6), nullptr, false);
    }
  }
  return out;
}

TEST(RunE2eTest, TheEventStreamCarriesEveryEventStepAndChangeUntilTheJobEnds) {
  REQUIRE_RUNNER();
  tailor::testing::TempDir dir;
  DaemonProcess d(dir.file("data"));
  ASSERT_TRUE(d.ok());
  const std::string id = submit(d, tiny_spec("stream", 8, 0));
  const auto r = d.get("/v1/jobs/" + id + "/events?follow=true");
  ASSERT_EQ(r.status, 200) << r.error;
  EXPECT_EQ(r.headers.at("content-type"), "text/event-stream");
  EXPECT_EQ(r.body.rfind("retry: 2000\n\n", 0), 0u) << r.body.substr(0, 200);
  const auto all = parse_sse(r.body);
  ASSERT_FALSE(all.empty());
  // Every stored event once, in order, with its id.
  const json stored = d.get("/v1/jobs/" + id + "/events").json()["events"];
  std::vector<std::int64_t> ids;
  std::vector<int> steps;
  for (const Sse& e : all) {
    if (e.id > 0) {
      ids.push_back(e.id);
      EXPECT_EQ(e.event, e.data["kind"]);
    }
    if (e.event == "step") steps.push_back(e.data["step"].get<int>());
  }
  ASSERT_EQ(ids.size(), stored.size());
  for (std::size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], stored[i]["id"].get<std::int64_t>());
  EXPECT_EQ(steps, (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_GE(std::count_if(all.begin(), all.end(), [](const Sse& e) { return e.event == "job"; }), 2);
  EXPECT_EQ(all.back().event, "end");
  EXPECT_EQ(all.back().data["state"], "succeeded");
  EXPECT_TRUE(all.back().data["plan"].is_null());  // the stream leaves the plan out
  // A reconnecting client says where it stopped and gets only what followed.
  const std::int64_t middle = ids[ids.size() / 2];
  const auto again = http_request(d.address(), "GET", "/v1/jobs/" + id + "/events?follow=true", {},
                                  {{"Authorization", "Bearer " + d.token()}, {"Last-Event-ID", std::to_string(middle)}});
  ASSERT_EQ(again.status, 200) << again.error;
  const auto rest = parse_sse(again.body);
  std::size_t after = 0;
  for (const Sse& e : rest) {
    if (e.id > 0) {
      EXPECT_GT(e.id, middle);
      ++after;
    }
  }
  EXPECT_EQ(after, ids.size() - ids.size() / 2 - 1);
  EXPECT_EQ(rest.back().event, "end");
}

TEST(RunE2eTest, CancelStopsTheRunnerAndLeavesNoProcess) {
  REQUIRE_RUNNER();
  tailor::testing::TempDir dir;
  DaemonProcess d(dir.file("data"), {"--cancel-grace", "5"});
  ASSERT_TRUE(d.ok());
  const std::string id = submit(d, tiny_spec("long", 5000, 0));
  ASSERT_TRUE(wait_for([&] { return d.job(id)["last_step"].is_number_integer(); }, seconds(60)));
  const pid_t pid = d.job(id)["pid"].get<pid_t>();
  const auto r = d.post("/v1/jobs/" + id + "/cancel", "");
  ASSERT_EQ(r.status, 202) << r.body;
  ASSERT_TRUE(d.wait_state(id, "cancelled", seconds(30)));
  const json job = d.job(id);
  EXPECT_NE(job["exit_reason"].get<std::string>().find("cancelled"), std::string::npos);
  EXPECT_EQ(::kill(-pid, 0), -1);  // the whole process group is gone
  EXPECT_EQ(errno, ESRCH);
  EXPECT_EQ(d.post("/v1/jobs/" + id + "/cancel", "").status, 409);
}

TEST(RunE2eTest, SmallJobsShareTheMachineWhenTheirPlansFitTogether) {
  REQUIRE_RUNNER();
  tailor::testing::TempDir dir;
  DaemonProcess d(dir.file("data"), {"--memory-budget", "200MiB"});
  ASSERT_TRUE(d.ok());
  const json plan = d.post("/v1/jobs?dry_run=true", tiny_spec("probe", 3, 0)).json();
  ASSERT_LT(plan["memory"]["per_gpu"]["total"].get<std::int64_t>() * 2, 200 << 20) << "two must fit";
  const std::string a = submit(d, tiny_spec("share-a", 10, 0));
  const std::string b = submit(d, tiny_spec("share-b", 10, 0));
  ASSERT_TRUE(wait_for([&] { return d.job(a)["state"] == "running" && d.job(b)["state"] == "running"; }, seconds(30)));
  for (const auto& id : {a, b}) ASSERT_TRUE(d.wait_state(id, "succeeded", seconds(120))) << id;
}

TEST(RunE2eTest, HigherPriorityStartsFirstWhenTheMachineIsFull) {
  REQUIRE_RUNNER();
  tailor::testing::TempDir dir;
  // Room for one tiny job at a time.
  DaemonProcess d(dir.file("data"), {"--memory-budget", "100MiB"});
  ASSERT_TRUE(d.ok());
  const json plan = d.post("/v1/jobs?dry_run=true", tiny_spec("probe", 3, 0)).json();
  ASSERT_LT(plan["memory"]["per_gpu"]["total"].get<std::int64_t>(), 100 << 20) << "tiny job grew: adjust the budget";
  ASSERT_GT(plan["memory"]["per_gpu"]["total"].get<std::int64_t>(), 50 << 20) << "tiny job shrank: adjust the budget";
  const std::string first = submit(d, tiny_spec("first", 8, 0));
  ASSERT_TRUE(d.wait_state(first, "running", seconds(30)));
  const std::string low = submit(d, tiny_spec("low", 2, 0, 0));
  const std::string high = submit(d, tiny_spec("high", 2, 0, 5));
  EXPECT_EQ(d.job(low)["state"], "queued");
  for (const auto& id : {first, low, high}) ASSERT_TRUE(d.wait_state(id, "succeeded", seconds(120))) << id;
  const std::string started_high = d.job(high)["started_at"].get<std::string>();
  const std::string started_low = d.job(low)["started_at"].get<std::string>();
  EXPECT_LT(started_high, started_low);  // RFC 3339 UTC strings order as times
  EXPECT_GE(started_low, d.job(high)["finished_at"].get<std::string>());
}

TEST(RunE2eTest, OutOfMemoryIsReplannedAndResumedKeepingTheGlobalBatch) {
  REQUIRE_RUNNER();
  tailor::testing::TempDir dir;
  DaemonProcess d(dir.file("data"));
  ASSERT_TRUE(d.ok());
  const std::string spec = tiny_spec("oom", 6, 2, 0, /*small=*/false);
  const json before = d.post("/v1/jobs?dry_run=true", spec).json();
  const json& per = before["memory"]["per_gpu"];
  const std::int64_t mb = before["strategy"]["micro_batch_size"].get<std::int64_t>();
  ASSERT_GE(mb, 4);
  // The runner may use the static state and 60% of the batch-dependent
  // memory the plan needs: the chosen micro-batch must run out, half of it
  // fits.
  const std::int64_t fixed = per["weights"].get<std::int64_t>() + per["gradients"].get<std::int64_t>() +
                             per["optimizer_states"].get<std::int64_t>() + per["master_weights"].get<std::int64_t>();
  const std::int64_t per_batch = per["activations"].get<std::int64_t>() + per["logits"].get<std::int64_t>();
  const std::int64_t limit = fixed + per_batch * 6 / 10;
  const std::string id = submit(d, spec, "?memory_limit=" + std::to_string(limit));
  ASSERT_TRUE(d.wait_state(id, "", seconds(180)));
  const json job = d.job(id);
  ASSERT_EQ(job["state"], "succeeded") << job.dump(1);
  EXPECT_GE(job["oom_restarts"].get<int>(), 1);
  EXPECT_GT(job["peak_bytes"].get<std::int64_t>(), 0);
  const json& st = job["plan"]["strategy"];
  // Leaner: a smaller micro-batch, or fused attention instead of the
  // materialised scores (CPU plans in half precision may choose either).
  EXPECT_TRUE(st["micro_batch_size"].get<std::int64_t>() < mb || st["attention"] != before["strategy"]["attention"])
      << st.dump();
  EXPECT_EQ(st["micro_batch_size"].get<std::int64_t>() * st["gradient_accumulation_steps"].get<std::int64_t>(), 16);
  EXPECT_EQ(st["precision"], before["strategy"]["precision"]);  // kept: the checkpoint stays loadable
  EXPECT_EQ(st["optimizer"], before["strategy"]["optimizer"]);  // kept: its states are in the checkpoint
  // Each attempt carries its own estimate and measurement: the failed one
  // its refused allocation, the last one its steps' peak, set against the
  // plan it ran.
  const json& history = job["attempt_history"];
  ASSERT_GE(history.size(), 2u) << job.dump(1);
  EXPECT_EQ(history[0]["attempt"], 1);
  EXPECT_EQ(history[0]["outcome"], "out_of_memory");
  EXPECT_GT(history[0]["oom_at_bytes"].get<std::int64_t>(), 0);
  EXPECT_EQ(history[0]["estimated_bytes"], per["total"]);
  const json& last = history.back();
  EXPECT_FALSE(last.contains("outcome"));
  EXPECT_EQ(last["estimated_bytes"], job["plan"]["memory"]["per_gpu"]["total"]);
  EXPECT_GT(last["measured_peak_bytes"].get<std::int64_t>(), 0);
  EXPECT_LE(last["measured_peak_bytes"].get<std::int64_t>(), limit);
  EXPECT_LE(job["plan"]["memory"]["per_gpu"]["total"].get<std::int64_t>(), limit);
  const auto kinds = event_kinds(d, id);
  EXPECT_GE(count(kinds, "runner.oom"), 1u);
  EXPECT_GE(count(kinds, "replan"), 1u);
  EXPECT_EQ(count(kinds, "runner.done"), 1u);
  auto rows = d.get("/v1/jobs/" + id + "/metrics").json()["metrics"];
  EXPECT_EQ(rows.size(), 6u);
}

// A job's spec is the one resolved at submission: a base file (extends:)
// edited after it changes nothing, not even the re-plan after an
// out-of-memory, which once read the base file again.
TEST(RunE2eTest, AReplanUsesTheSpecAsSubmittedNotItsEditedBaseFile) {
  REQUIRE_RUNNER();
  tailor::testing::TempDir dir;
  const std::string root = dir.file("specs");
  std::filesystem::create_directories(root + "/data");
  std::filesystem::copy_file(std::string(TAILOR_SOURCE_DIR) + "/configs/data/tiny-corpus.txt",
                             root + "/data/tiny-corpus.txt");
  const std::string base = tiny_spec("frozen", 6, 2, 0, /*small=*/false);
  ASSERT_NE(base.find("lr: 1e-3"), std::string::npos);
  std::ofstream(root + "/base.yaml") << base;
  DaemonProcess d(dir.file("data"), {"--spec-root", root});
  ASSERT_TRUE(d.ok());
  const std::string spec = "extends: base.yaml\nname: frozen\n";
  const json before = d.post("/v1/jobs?dry_run=true", spec).json();
  ASSERT_TRUE(before.contains("memory")) << before.dump();
  const json& per = before["memory"]["per_gpu"];
  const std::int64_t fixed = per["weights"].get<std::int64_t>() + per["gradients"].get<std::int64_t>() +
                             per["optimizer_states"].get<std::int64_t>() + per["master_weights"].get<std::int64_t>();
  const std::int64_t per_batch = per["activations"].get<std::int64_t>() + per["logits"].get<std::int64_t>();
  const std::string id = submit(d, spec, "?memory_limit=" + std::to_string(fixed + per_batch * 6 / 10));
  ASSERT_FALSE(id.empty());
  // Edited once the job is in: another learning rate and length.
  std::string edited = base;
  edited.replace(edited.find("lr: 1e-3"), 8, "lr: 7e-4");
  edited.replace(edited.find("max_steps: 6"), 12, "max_steps: 9");
  std::ofstream(root + "/base.yaml") << edited;
  ASSERT_TRUE(d.wait_state(id, "", seconds(180)));
  const json job = d.job(id);
  ASSERT_EQ(job["state"], "succeeded") << job.dump(1);
  EXPECT_GE(job["oom_restarts"].get<int>(), 1);  // the re-plan happened
  const json plan = d.get("/v1/jobs/" + id + "/plan").json();
  EXPECT_DOUBLE_EQ(plan["spec"]["training"]["lr"].get<double>(), 1e-3) << plan["spec"]["training"].dump();
  EXPECT_EQ(plan["spec"]["training"]["max_steps"], 6);
  EXPECT_EQ(job["last_step"], 6);
  EXPECT_EQ(d.get("/v1/jobs/" + id + "/metrics").json()["metrics"].size(), 6u);
}

// tailord stopped by `sig` while a job runs: the runner goes on, the next
// tailord re-adopts it, and the job completes once, every step stored once.
void expect_the_job_outlives_tailord(int sig) {
  // The runner orphaned by the stop is re-parented to this process, which
  // reaps it at the end (this machine's init does not reap orphans).
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  tailor::testing::TempDir dir;
  std::string id;
  pid_t runner_pid = -1;
  {
    DaemonProcess d(dir.file("data"));
    ASSERT_TRUE(d.ok());
    id = submit(d, tiny_spec("survivor", 20, 5));
    ASSERT_TRUE(wait_for([&] { return d.job(id)["last_step"].is_number_integer(); }, seconds(60)));
    runner_pid = d.job(id)["pid"].get<pid_t>();
    const auto stopping = std::chrono::steady_clock::now();
    d.kill_daemon(sig);
    // SIGTERM: it stops taking work and exits, well within a grace period.
    EXPECT_LT(std::chrono::steady_clock::now() - stopping, seconds(10));
    EXPECT_EQ(::kill(runner_pid, 0), 0) << "the runner should outlive tailord";
  }
  // Should the second daemon not come up, the orphaned runner still goes.
  struct KillRunner {
    pid_t pid;
    ~KillRunner() {
      ::kill(-pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  } guard{runner_pid};
  DaemonProcess again(dir.file("data"));
  ASSERT_TRUE(again.ok()) << again.log();
  ASSERT_TRUE(again.wait_state(id, "", seconds(120)));
  const json job = again.job(id);
  EXPECT_EQ(job["state"], "succeeded") << job.dump(1);
  EXPECT_EQ(job["attempts"], 1);  // re-adopted, not launched again
  const auto kinds = event_kinds(again, id);
  EXPECT_EQ(count(kinds, "recovered"), 1u);
  EXPECT_EQ(count(kinds, "runner.start"), 1u);
  EXPECT_EQ(count(kinds, "runner.done"), 1u);
  EXPECT_EQ(count(kinds, "state:running"), 1u);
  const auto rows = again.get("/v1/jobs/" + id + "/metrics").json()["metrics"];
  ASSERT_EQ(rows.size(), 20u);
  for (std::size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(rows[i]["step"], static_cast<int>(i + 1));
}

TEST(RunE2eTest, SigkilledDaemonRestartsAndTheJobCompletesExactlyOnce) {
  REQUIRE_RUNNER();
  expect_the_job_outlives_tailord(SIGKILL);
}

TEST(RunE2eTest, ATerminatedDaemonExitsAtOnceAndTheRestartedOneFinishesTheJobOnce) {
  REQUIRE_RUNNER();
  expect_the_job_outlives_tailord(SIGTERM);
}

std::int64_t last_step_of(const json& job) {
  return job["last_step"].is_number_integer() ? job["last_step"].get<std::int64_t>() : 0;
}

// Issue 37, item 3: tailord killed after it forked a runner and before it
// wrote anything down (not even the runner's pid file; the failpoint
// launch.after_fork, platform/failpoint.h), and the runner finished before
// the restart. The job was queued and trained again, every time. Now the
// restarted tailord finds the attempt's own events and judges it by them.
TEST(RunE2eTest, ARunnerThatFinishedAfterTailordDiedBeforeRecordingItIsNotRunAgain) {
  REQUIRE_RUNNER();
  prctl(PR_SET_CHILD_SUBREAPER, 1);  // the orphaned runner is reaped here
  tailor::testing::TempDir dir;
  const std::string data = dir.file("data");
  auto d = daemon_with_failpoints(data, "launch.after_fork");
  ASSERT_TRUE(d->ok()) << d->log();
  (void)d->post("/v1/jobs", tiny_spec("once", 5, 0));  // tailord may be gone before it answers
  ASSERT_TRUE(d->exited_within(seconds(60))) << "the failpoint did not stop tailord";
  std::string id;
  {
    auto store = JobStore::open(data + "/tailor.db");
    ASSERT_TRUE(store.is_ok());
    auto page = (*store)->list({});
    ASSERT_TRUE(page.is_ok());
    ASSERT_EQ(page->jobs.size(), 1u);
    id = page->jobs[0].id;
    EXPECT_EQ(page->jobs[0].state, JobState::kPlanning);
  }
  EXPECT_FALSE(std::filesystem::exists(data + "/jobs/" + id + "/runner.pid"));
  // The runner trains to its end meanwhile and exits: this process reaps
  // it, the only child left, so it no longer holds the job's lock.
  bool reaped = false;
  ASSERT_TRUE(wait_for(
      [&] {
        int status = 0;
        while (waitpid(-1, &status, WNOHANG) > 0) reaped = true;
        if (!reaped) return false;
        std::ifstream f(data + "/jobs/" + id + "/events.jsonl");
        const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        return text.find("\"event\":\"done\"") != std::string::npos;
      },
      seconds(120)));
  DaemonProcess again(data);
  ASSERT_TRUE(again.ok()) << again.log();
  ASSERT_TRUE(again.wait_state(id, "", seconds(60)));
  const json job = again.job(id);
  EXPECT_EQ(job["state"], "succeeded") << job.dump(1);
  EXPECT_EQ(job["attempts"], 1);
  const auto kinds = event_kinds(again, id);
  EXPECT_EQ(count(kinds, "runner.start"), 1u);
  EXPECT_EQ(count(kinds, "runner.done"), 1u);
  EXPECT_EQ(again.get("/v1/jobs/" + id + "/metrics").json()["metrics"].size(), 5u);
  EXPECT_TRUE(some_event_says(again, id, "as its events say")) << again.get("/v1/jobs/" + id + "/events").body;
}

// The contract under repeated crashes: tailord SIGKILLed three times while
// a job trains, down 0, 5 and 20 s each time (the job may finish while
// tailord is down, and is then judged by its events). The job list stays the same,
// the job completes once at its last step with every step stored once, the
// store passes SQLite's integrity check, and cancel still works.
TEST(RunE2eTest, ThreeKillsOfTailordLoseNothingAndRunNothingTwice) {
  REQUIRE_RUNNER();
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  tailor::testing::TempDir dir;
  const std::string data = dir.file("data");
  auto d = std::make_unique<DaemonProcess>(data);
  ASSERT_TRUE(d->ok()) << d->log();
  const std::string id = submit(*d, tiny_spec("crashes", 80, 10));
  const std::string other = submit(*d, tiny_spec("cancel-me", 100000, 1000, -1));
  ASSERT_FALSE(id.empty());
  ASSERT_FALSE(other.empty());
  std::set<pid_t> runners;
  struct Reap {
    std::set<pid_t>& pids;
    ~Reap() {
      for (pid_t p : pids) {
        ::kill(-p, SIGKILL);
        waitpid(p, nullptr, 0);
      }
    }
  } reap{runners};
  std::int64_t step = 0;
  for (const int down : {0, 5, 20}) {
    // Progress since the last restart (or the end), then the crash.
    ASSERT_TRUE(wait_for(
        [&] {
          const json job = d->job(id);
          if (job["pid"].is_number_integer()) runners.insert(job["pid"].get<pid_t>());
          const json other_job = d->job(other);
          if (other_job["pid"].is_number_integer()) runners.insert(other_job["pid"].get<pid_t>());
          return last_step_of(job) > step || job["state"] == "succeeded";
        },
        seconds(120)));
    step = last_step_of(d->job(id));
    d->kill_daemon(SIGKILL);
    d.reset();
    std::this_thread::sleep_for(seconds(down));  // the downtime itself, not a wait for anything
    d = std::make_unique<DaemonProcess>(data);
    ASSERT_TRUE(d->ok()) << d->log();
  }
  ASSERT_TRUE(d->wait_ended_while_moving(id, seconds(120)))
      << d->job(id).dump(1) << "\n"
      << d->get("/v1/jobs/" + id + "/events").body << "\n"
      << d->job(other).dump(1) << "\n"
      << d->log_tail();
  const json job = d->job(id);
  EXPECT_EQ(job["state"], "succeeded") << job.dump(1);
  EXPECT_EQ(job["last_step"], 80);
  const auto kinds = event_kinds(*d, id);
  EXPECT_EQ(count(kinds, "runner.done"), 1u);
  EXPECT_EQ(count(kinds, "runner.start"), static_cast<std::size_t>(job["attempts"].get<int>()));
  const json rows = d->get("/v1/jobs/" + id + "/metrics?limit=1000").json()["metrics"];
  std::set<int> steps;
  for (const auto& r : rows) EXPECT_TRUE(steps.insert(r["step"].get<int>()).second) << "step " << r["step"] << " twice";
  EXPECT_EQ(steps.size(), 80u);
  const json listed = d->get("/v1/jobs").json();
  ASSERT_EQ(listed["jobs"].size(), 2u);
  // Cancel works on the job that ran through every crash.
  ASSERT_EQ(d->post("/v1/jobs/" + other + "/cancel", "").status, 202);
  ASSERT_TRUE(d->wait_state(other, "cancelled", seconds(60)));
  auto db = Database::open(data + "/tailor.db");
  ASSERT_TRUE(db.is_ok());
  auto check = db->prepare("PRAGMA integrity_check");
  ASSERT_TRUE(check.is_ok());
  ASSERT_TRUE(*check->step());
  EXPECT_EQ(check->text(0), "ok");
}

// POST /v1/jobs/{id}/chat/completions: a chat job's model (its template
// kept in model/) answers OpenAI's chat completions with the text
// POST /v1/jobs/{id}/generate gives for the same messages, and refuses
// what it does not serve in OpenAI's shape, naming the field.
TEST(RunE2eTest, AChatJobsModelAnswersOpenAIChatCompletionsAsItGenerates) {
  REQUIRE_RUNNER();
  tailor::testing::TempDir dir;
  DaemonProcess d(dir.file("data"));
  ASSERT_TRUE(d.ok()) << d.log();
  const std::string id = submit(
      d, "apiVersion: tailor/v1\nkind: TrainingJob\nname: chat\nmodel:\n  arch: {family: llama, layers: 2, hidden: 64, "
         "intermediate: 128, heads: 2, kv_heads: 2, vocab: 260, max_seq_len: 1024}\n  init: random\ndata:\n"
         "  train: data/chats.jsonl\n  chat: messages\n  chat_template: data/chatml.jinja\n  seq_len: 1024\n"
         "training: {global_batch_size: 8, max_steps: 2, lr: 1e-3}\nstrategy: {adapter: none}\n"
         "resources: {gpus: 0, host_memory: 1GiB}\ncheckpoint: {every_steps: 100}\n");
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(d.wait_state(id, "", seconds(180)));
  ASSERT_EQ(d.job(id)["state"], "succeeded") << d.job(id).dump(1);

  const json messages = json::array({{{"role", "system"}, {"content", "You are brief."}},
                                     {{"role", "user"}, {"content", "What is the capital of France?"}}});
  const auto generated = d.post("/v1/jobs/" + id + "/generate",
                                json{{"messages", messages}, {"max_tokens", 12}}.dump(), "application/json");
  ASSERT_EQ(generated.status, 200) << generated.body;
  const json done = sse_events(generated.body).back().second;
  const auto c = d.post("/v1/jobs/" + id + "/chat/completions",
                        json{{"messages", messages}, {"max_tokens", 12}, {"temperature", 0}}.dump(), "application/json");
  ASSERT_EQ(c.status, 200) << c.body;
  const json chat = c.json();
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["model"], id);
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["choices"][0]["message"]["content"], done["text"]) << c.body << "\n" << generated.body;
  EXPECT_EQ(chat["usage"]["completion_tokens"],
            done["completion_tokens"].get<int>() - (done["finish_reason"] == "stop" ? 1 : 0));

  // Streamed through tailord as OpenAI streams chat: chunks whose content
  // adds up to the same reply, the usage, then [DONE]; and, once the stream
  // has given back the model, the next request is answered.
  const auto streamed = d.post("/v1/jobs/" + id + "/chat/completions",
                               json{{"messages", messages},
                                    {"max_tokens", 12},
                                    {"temperature", 0},
                                    {"stream", true},
                                    {"stream_options", {{"include_usage", true}}}}
                                   .dump(),
                               "application/json");
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  EXPECT_EQ(streamed.headers.at("content-type"), "text/event-stream");
  std::vector<std::string> data;
  for (std::size_t at = 0; (at = streamed.body.find("data: ", at)) != std::string::npos;) {
    const std::size_t end = streamed.body.find("\n\n", at);
    data.push_back(streamed.body.substr(at + 6, end - at - 6));
    at = end;
  }
  ASSERT_GE(data.size(), 3u) << streamed.body;
  EXPECT_EQ(data.back(), "[DONE]");
  std::string content;
  for (std::size_t i = 0; i + 2 < data.size(); ++i) {
    const json chunk = json::parse(data[i]);
    EXPECT_EQ(chunk["object"], "chat.completion.chunk");
    content += chunk["choices"][0]["delta"].value("content", "");
  }
  EXPECT_EQ(content, chat["choices"][0]["message"]["content"]);
  EXPECT_EQ(json::parse(data[data.size() - 2])["usage"], chat["usage"]);
  EXPECT_EQ(d.post("/v1/jobs/" + id + "/chat/completions", json{{"messages", messages}, {"max_tokens", 2}}.dump(),
                   "application/json")
                .status,
            200);
  EXPECT_EQ(d.post("/v1/jobs/" + id + "/chat/completions", "{\"messages\": ", "application/json").status, 400);
  EXPECT_EQ(d.post("/v1/jobs/j-0000000000000000/chat/completions", json{{"messages", messages}}.dump(),
                   "application/json")
                .status,
            404);
}

// A GPU plan whose runner finds no CUDA device trained on the CPU before,
// with only an event saying so: now the job fails as bad input with the
// runner's reason, and is not retried on the same machine; with
// resources.device: cpu it trains there. tailord plans on a declared T4;
// CUDA_VISIBLE_DEVICES="" hides any real GPU from its runners.
TEST(RunE2eTest, AGpuJobWhoseRunnerFindsNoCudaFailsAsBadInputWithTheReason) {
  REQUIRE_RUNNER();
  struct HideGpus {
    std::string before;
    bool had;
    HideGpus() {
      const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
      had = v != nullptr;
      if (had) before = v;
      setenv("CUDA_VISIBLE_DEVICES", "", 1);
    }
    ~HideGpus() {
      if (had) {
        setenv("CUDA_VISIBLE_DEVICES", before.c_str(), 1);
      } else {
        unsetenv("CUDA_VISIBLE_DEVICES");
      }
    }
  } hide;
  tailor::testing::TempDir dir;
  DaemonProcess d(dir.file("data"), {"--gpus", "1xT4", "--retry-backoff", "0.1"});
  ASSERT_TRUE(d.ok()) << d.log();
  auto on_gpu = [](const std::string& name, const std::string& device) {
    std::string spec = tiny_spec(name, 2, 0);
    const std::string cpu = "  gpus: 0                # CPU training: host RAM is the memory budget\n";
    spec.replace(spec.find(cpu), cpu.size(), "  gpus: 1\n" + device);
    spec.replace(spec.find("strategy:\n"), 10, "strategy:\n  precision: fp32\n");
    return spec;
  };
  const auto r = d.post("/v1/jobs", on_gpu("no-cuda", ""));
  ASSERT_EQ(r.status, 201) << r.body;
  const std::string id = r.json()["id"].get<std::string>();
  ASSERT_TRUE(d.wait_state(id, "", seconds(120)));
  const json job = d.job(id);
  EXPECT_EQ(job["state"], "failed") << job.dump();
  EXPECT_EQ(job["attempts"], 1);
  EXPECT_EQ(job["exit_code"], 2);
  const std::string reason = job["exit_reason"].get<std::string>();
  EXPECT_NE(reason.find("not retried"), std::string::npos) << reason;
  EXPECT_NE(reason.find("the plan is for GPUs but"), std::string::npos) << reason;
  EXPECT_NE(reason.find("resources.device: cpu"), std::string::npos) << reason;

  const auto ok = d.post("/v1/jobs", on_gpu("cpu-on-purpose", "  device: cpu\n"));
  ASSERT_EQ(ok.status, 201) << ok.body;
  const std::string ok_id = ok.json()["id"].get<std::string>();
  ASSERT_TRUE(d.wait_state(ok_id, "", seconds(120)));
  EXPECT_EQ(d.job(ok_id)["state"], "succeeded") << d.job(ok_id).dump();
}

// cache_max_size: once a job ends, tailord prunes the runners' cache
// folder (tailor-data cache prune) to that size; at 1 byte the entry the
// job's runner wrote goes, while a file of someone else's there stays.
TEST(RunE2eTest, TheCacheFolderIsPrunedToItsSizeAfterAJobEnds) {
  REQUIRE_RUNNER();
  tailor::testing::TempDir dir;
  const std::string cache = dir.file("cache");
  const std::string foreign = dir.write("cache/notes.txt", "the user's own file");
  ::setenv("TAILOR_CACHE_DIR", cache.c_str(), 1);  // tailord's, and so its runners' and the prune's
  DaemonProcess d(dir.file("data"), {"--cache-max-size", "1"});
  ::unsetenv("TAILOR_CACHE_DIR");
  ASSERT_TRUE(d.ok()) << d.log();
  const std::string id = submit(d, tiny_spec("cached", 2, 0));
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(d.wait_state(id, "succeeded", seconds(120))) << d.job(id).dump();
  // The prune's report, once it is whole.
  json report;
  ASSERT_TRUE(wait_for(
      [&] {
        report = json::parse(tailor::testing::read_text(dir.file("data/cache-prune.log")), nullptr, false);
        return report.is_object();
      },
      seconds(60)))
      << d.log_tail();
  ASSERT_EQ(report["removed"].size(), 1u) << report.dump();
  EXPECT_EQ(report["removed"][0]["kind"], "tokens");
  EXPECT_EQ(report["removed"][0]["why"], "least recently used beyond the size limit");
  EXPECT_EQ(report["kept"], 0);
  EXPECT_FALSE(std::filesystem::exists(report["removed"][0]["file"].get<std::string>()));
  EXPECT_TRUE(std::filesystem::exists(foreign));
}

}  // namespace
}  // namespace tailor::daemon::testing
