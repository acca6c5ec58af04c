#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <mutex>
#include <thread>

#include "daemon/store/job_store.h"
#include "daemon/store/migrations.h"
#include "tests/testing/temp_dir.h"

namespace tailor::daemon {
namespace {

NewJob sample_job(const std::string& name, std::int64_t priority = 0) {
  NewJob j;
  j.name = name;
  j.priority = priority;
  j.spec_text = "name: " + name + "\n";
  j.spec_json = "{}";
  j.plan_json = "{\"fits\":true}";
  j.labels = {{"team", "nlp"}};
  j.estimated_bytes = 1000;
  j.retries = 2;
  return j;
}

TEST(MigrationsTest, FreshStoreReachesNewestVersionAndReapplyIsNoop) {
  testing::TempDir dir;
  auto db = Database::open(dir.file("t.db"));
  ASSERT_TRUE(db.is_ok()) << db.status().to_string();
  auto v = migrate(*db);
  ASSERT_TRUE(v.is_ok()) << v.status().to_string();
  EXPECT_EQ(*v, builtin_migrations().back().version);
  auto again = migrate(*db);
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(*again, *v);
  auto q = db->prepare("SELECT COUNT(*) FROM schema_migrations");
  ASSERT_TRUE(q.is_ok());
  ASSERT_TRUE(*q->step());
  EXPECT_EQ(q->int64(0), static_cast<std::int64_t>(builtin_migrations().size()));
}

TEST(MigrationsTest, StoreFromNewerDaemonIsRefused) {
  testing::TempDir dir;
  auto db = Database::open(dir.file("t.db"));
  ASSERT_TRUE(db.is_ok());
  ASSERT_TRUE(migrate(*db).is_ok());
  ASSERT_TRUE(db->exec("INSERT INTO schema_migrations VALUES (999, 'future', 0)").is_ok());
  auto v = migrate(*db);
  ASSERT_FALSE(v.is_ok());
  EXPECT_EQ(v.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(v.status().message().find("999"), std::string::npos);
}

TEST(SqliteTest, OpensInWalModeWithFullSync) {
  testing::TempDir dir;
  auto db = Database::open(dir.file("t.db"));
  ASSERT_TRUE(db.is_ok());
  auto mode = db->prepare("PRAGMA journal_mode");
  ASSERT_TRUE(*mode->step());
  EXPECT_EQ(mode->text(0), "wal");
  auto sync = db->prepare("PRAGMA synchronous");
  ASSERT_TRUE(*sync->step());
  EXPECT_EQ(sync->int64(0), 2);  // FULL
}

// Prepared statements are kept per connection and handed out again: one
// given back half-read and with bindings comes back reset and unbound, and
// the cache moves with its connection.
TEST(SqliteTest, AStatementHandedOutAgainStartsCleanAndTheCacheMovesWithItsConnection) {
  testing::TempDir dir;
  auto opened = Database::open(dir.file("t.db"));
  ASSERT_TRUE(opened.is_ok());
  ASSERT_TRUE(opened->exec("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1), (2), (3)").is_ok());
  const char* sql = "SELECT x FROM t WHERE x >= ?1 ORDER BY x";
  {
    auto q = opened->prepare(sql);
    ASSERT_TRUE(q.is_ok());
    q->bind(1, 2);
    ASSERT_TRUE(*q->step());
    EXPECT_EQ(q->int64(0), 2);  // given back before its last row
  }
  Database db = std::move(*opened);
  auto again = db.prepare(sql);
  ASSERT_TRUE(again.is_ok());
  // Unbound: NULL compares as unknown, so no row; bound anew, every row from the first.
  EXPECT_FALSE(*again->step());
  again->reset();
  again->bind(1, 1);
  std::vector<std::int64_t> rows;
  while (*again->step()) rows.push_back(again->int64(0));
  EXPECT_EQ(rows, (std::vector<std::int64_t>{1, 2, 3}));
  // Two of the same text at once are two statements.
  auto other = db.prepare(sql);
  ASSERT_TRUE(other.is_ok());
  other->bind(1, 3);
  ASSERT_TRUE(*other->step());
  EXPECT_EQ(other->int64(0), 3);
}

TEST(SqliteTest, FailedTransactionRollsBack) {
  testing::TempDir dir;
  auto db = Database::open(dir.file("t.db"));
  ASSERT_TRUE(db->exec("CREATE TABLE t (x INTEGER PRIMARY KEY)").is_ok());
  {
    auto tx = Transaction::begin(*db);
    ASSERT_TRUE(tx.is_ok());
    ASSERT_TRUE(db->exec("INSERT INTO t VALUES (1)").is_ok());
    // no commit
  }
  auto q = db->prepare("SELECT COUNT(*) FROM t");
  ASSERT_TRUE(*q->step());
  EXPECT_EQ(q->int64(0), 0);
}

TEST(JobStoreTest, CreateRecordsQueuedJobWithSubmittedEvent) {
  testing::TempDir dir;
  auto store = JobStore::open(dir.file("tailor.db"));
  ASSERT_TRUE(store.is_ok()) << store.status().to_string();
  auto made = (*store)->create(sample_job("alpha", 3));
  ASSERT_TRUE(made.is_ok()) << made.status().to_string();
  EXPECT_TRUE(made->created);
  EXPECT_EQ(made->job.state, JobState::kQueued);
  EXPECT_EQ(made->job.priority, 3);
  EXPECT_EQ(made->job.labels.at("team"), "nlp");
  auto events = (*store)->events(made->job.id);
  ASSERT_TRUE(events.is_ok());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].to_state, "queued");
}

// A listing's plan is the document's summary, kept by the store's
// triggers as the document changes (a re-plan after out-of-memory).
TEST(JobStoreTest, AListingsPlanIsTheSummaryOfTheCurrentPlan) {
  testing::TempDir dir;
  auto store = JobStore::open(dir.file("tailor.db"));
  ASSERT_TRUE(store.is_ok()) << store.status().to_string();
  NewJob j = sample_job("planned");
  j.plan_json = R"({"schema_version":1,"fits":true,"summary":"fp32","strategy":{"micro_batch_size":4},)"
                R"("memory":{"total":10},"decisions":[{"step":"precision"}],"spec":{"name":"planned"}})";
  const std::string id = (*store)->create(j)->job.id;
  const auto page = [&](bool full) {
    JobFilter f;
    f.full_plan = full;
    auto listed = (*store)->list(f);
    EXPECT_TRUE(listed.is_ok());
    return listed.is_ok() && !listed->jobs.empty() ? listed->jobs[0].plan_json : std::string();
  };
  EXPECT_EQ(
      page(false),
      R"({"schema_version":1,"fits":true,"summary":"fp32","strategy":{"micro_batch_size":4},"memory":{"total":10}})");
  EXPECT_EQ(page(true), j.plan_json);
  ASSERT_TRUE(
      (*store)->update(id, JobUpdate().set("plan_json", std::string(R"({"schema_version":1,"fits":false})"))).is_ok());
  EXPECT_EQ(page(false), R"({"schema_version":1,"fits":false})");
  ASSERT_TRUE((*store)->update(id, JobUpdate().set("plan_json", std::string("not json"))).is_ok());
  EXPECT_EQ(page(false), "null");
}

TEST(JobStoreTest, JobSurvivesReopen) {
  testing::TempDir dir;
  std::string id;
  {
    auto store = JobStore::open(dir.file("tailor.db"));
    id = (*store)->create(sample_job("durable"))->job.id;
  }
  auto store = JobStore::open(dir.file("tailor.db"));
  auto job = (*store)->get(id);
  ASSERT_TRUE(job.is_ok());
  EXPECT_EQ(job->name, "durable");
}

TEST(JobStoreTest, IdempotencyKeyReturnsSameJobAndRefusesOtherBody) {
  testing::TempDir dir;
  auto store = JobStore::open(dir.file("tailor.db")).value();
  NewJob j = sample_job("idem");
  j.idempotency_key = "key-1";
  j.request_hash = "h1";
  auto first = store->create(j);
  auto second = store->create(j);
  ASSERT_TRUE(first.is_ok() && second.is_ok());
  EXPECT_TRUE(first->created);
  EXPECT_FALSE(second->created);
  EXPECT_EQ(first->job.id, second->job.id);
  j.request_hash = "h2";
  auto third = store->create(j);
  ASSERT_FALSE(third.is_ok());
  EXPECT_EQ(third.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->list({})->jobs.size(), 1u);
}

TEST(JobStoreTest, TransitionChecksCurrentStateAndRecordsEvent) {
  testing::TempDir dir;
  auto store = JobStore::open(dir.file("tailor.db")).value();
  const std::string id = store->create(sample_job("t"))->job.id;
  ASSERT_TRUE(store->transition(id, JobState::kQueued, JobState::kPlanning, "scheduled").is_ok());
  Status lost = store->transition(id, JobState::kQueued, JobState::kPlanning, "again");
  EXPECT_EQ(lost.code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store
                  ->transition(id, JobState::kPlanning, JobState::kRunning, "launched",
                               JobUpdate().set("pid", std::int64_t{1234}).set("started_at", 5.0))
                  .is_ok());
  auto job = store->get(id);
  EXPECT_EQ(job->state, JobState::kRunning);
  EXPECT_EQ(job->pid, 1234);
  auto events = store->events(id);
  ASSERT_EQ(events->size(), 3u);
  EXPECT_EQ((*events)[2].from_state, "planning");
  EXPECT_EQ((*events)[2].to_state, "running");
  EXPECT_EQ((*events)[2].message, "launched");
}

TEST(JobStoreTest, ListFiltersByStateAndLabelAndPaginates) {
  testing::TempDir dir;
  auto store = JobStore::open(dir.file("tailor.db")).value();
  for (int i = 0; i < 5; ++i) {
    NewJob j = sample_job("job" + std::to_string(i));
    j.labels = {{"team", i % 2 ? "vision" : "nlp"}};
    store->create(j).value();
  }
  JobFilter f;
  f.labels = {{"team", "nlp"}};
  f.limit = 2;
  auto page1 = store->list(f);
  ASSERT_TRUE(page1.is_ok()) << page1.status().to_string();
  ASSERT_EQ(page1->jobs.size(), 2u);
  ASSERT_TRUE(page1->next_after);
  f.after_seq = *page1->next_after;
  auto page2 = store->list(f);
  ASSERT_EQ(page2->jobs.size(), 1u);
  EXPECT_FALSE(page2->next_after);
  EXPECT_EQ(page2->jobs[0].name, "job4");
  JobFilter running;
  running.state = JobState::kRunning;
  EXPECT_TRUE(store->list(running)->jobs.empty());
}

// Label filters walk the label's own index (with the job's state, which a
// trigger keeps): the answer must equal the plain filter over every job,
// for one label, two, with and without a state, and across pages.
TEST(JobStoreTest, LabelListingsFollowStateChangesAndMatchAFullScan) {
  testing::TempDir dir;
  auto store = JobStore::open(dir.file("tailor.db")).value();
  std::vector<std::string> ids;
  for (int i = 0; i < 30; ++i) {
    NewJob j = sample_job("job" + std::to_string(i));
    j.labels = {{"team", i % 3 ? "nlp" : "vision"}, {"size", i % 2 ? "big" : "small"}};
    ids.push_back(store->create(j).value().job.id);
  }
  for (int i = 0; i < 30; i += 4) {
    ASSERT_TRUE(store->transition(ids[i], JobState::kQueued, JobState::kPlanning, "scheduled").is_ok());
  }
  ASSERT_TRUE(store->transition(ids[9], JobState::kQueued, JobState::kCancelled, "cancelled").is_ok());
  ASSERT_TRUE(store->remove(ids[9]).is_ok());
  ASSERT_TRUE(store->transition(ids[10], JobState::kQueued, JobState::kCancelled, "cancelled").is_ok());
  const auto all = [&](const JobFilter& f) {
    std::vector<std::string> got;
    JobFilter page = f;
    page.limit = 4;
    for (;;) {
      auto listed = store->list(page);
      EXPECT_TRUE(listed.is_ok()) << listed.status().to_string();
      if (!listed.is_ok()) break;
      for (const auto& j : listed->jobs)
        got.push_back(j.id);
      if (!listed->next_after) break;
      page.after_seq = *listed->next_after;
    }
    return got;
  };
  JobFilter everything;
  everything.limit = 1000;
  const auto jobs = store->list(everything).value().jobs;
  ASSERT_EQ(jobs.size(), 29u);
  const std::optional<JobState> states[] = {std::nullopt, JobState::kQueued, JobState::kPlanning, JobState::kCancelled,
                                            JobState::kRunning};
  const std::vector<std::vector<std::pair<std::string, std::string>>> label_sets = {
      {{"team", "nlp"}},
      {{"team", "vision"}, {"size", "small"}},
      {{"size", "big"}, {"team", "nlp"}},
      {{"team", "none"}}};
  for (const auto& state : states) {
    for (const auto& labels : label_sets) {
      std::vector<std::string> expected;
      for (const auto& j : jobs) {
        bool match = !state || j.state == *state;
        for (const auto& [k, v] : labels)
          match = match && j.labels.count(k) && j.labels.at(k) == v;
        if (match) expected.push_back(j.id);
      }
      JobFilter f;
      f.state = state;
      f.labels = labels;
      EXPECT_EQ(all(f), expected) << (state ? to_string(*state) : "any") << " " << labels[0].first << "="
                                  << labels[0].second;
    }
  }
  JobFilter planning_nlp;
  planning_nlp.state = JobState::kPlanning;
  planning_nlp.labels = {{"team", "nlp"}};
  EXPECT_FALSE(all(planning_nlp).empty());
}

// A store written before version 5 lists by label after the migration: the
// label rows are given their job's seq and state.
TEST(MigrationsTest, LabelsStoredBeforeVersionFiveAreListedByLabel) {
  testing::TempDir dir;
  {
    auto db = Database::open(dir.file("tailor.db")).value();
    const std::vector<Migration> up_to_4(builtin_migrations().begin(), builtin_migrations().begin() + 4);
    ASSERT_EQ(migrate(db, up_to_4).value(), 4);
    for (int i = 1; i <= 3; ++i) {
      const std::string id = "j-old" + std::to_string(i);
      ASSERT_TRUE(db.exec("INSERT INTO jobs (id, seq, name, state, spec_text, spec_json, created_at, updated_at) "
                          "VALUES ('" +
                          id + "', " + std::to_string(i) + ", 'old', '" + (i == 2 ? "succeeded" : "queued") +
                          "', '', '{}', 0, 0)")
                      .is_ok());
      ASSERT_TRUE(db.exec("INSERT INTO job_labels (job_id, key, value) VALUES ('" + id + "', 'team', 'nlp')").is_ok());
    }
  }
  auto store = JobStore::open(dir.file("tailor.db")).value();
  JobFilter f;
  f.labels = {{"team", "nlp"}};
  const auto page = store->list(f).value();
  ASSERT_EQ(page.jobs.size(), 3u);
  EXPECT_EQ(page.jobs[0].id, "j-old1");
  EXPECT_EQ(page.jobs[2].id, "j-old3");
  f.state = JobState::kSucceeded;
  const auto done = store->list(f).value();
  ASSERT_EQ(done.jobs.size(), 1u);
  EXPECT_EQ(done.jobs[0].id, "j-old2");
}

TEST(JobStoreTest, InStatesOrdersByPriorityThenSubmission) {
  testing::TempDir dir;
  auto store = JobStore::open(dir.file("tailor.db")).value();
  const auto a = store->create(sample_job("a", 0))->job.id;
  const auto b = store->create(sample_job("b", 5))->job.id;
  const auto c = store->create(sample_job("c", 0))->job.id;
  auto queued = store->in_states({JobState::kQueued});
  ASSERT_EQ(queued->size(), 3u);
  EXPECT_EQ((*queued)[0].id, b);
  EXPECT_EQ((*queued)[1].id, a);
  EXPECT_EQ((*queued)[2].id, c);
}

TEST(JobStoreTest, IngestStoresMetricsAndOffsetsInOneBatchAndReplacesRepeatedSteps) {
  testing::TempDir dir;
  auto store = JobStore::open(dir.file("tailor.db")).value();
  const auto id = store->create(sample_job("m"))->job.id;
  IngestBatch batch;
  for (int s = 1; s <= 3; ++s) {
    StepMetric m;
    m.step = s;
    m.attempt = 1;
    m.loss = 5.0 - s;
    m.component_bytes = {{"weights", 100}, {"activations", 200 + s}};
    batch.metrics.push_back(m);
  }
  batch.events.push_back({"runner.start", "", "{\"event\":\"start\"}", 0});
  batch.metrics_offset = 300;
  batch.events_offset = 40;
  ASSERT_TRUE(store->ingest(id, batch).is_ok());
  // A resumed attempt repeats step 3.
  IngestBatch again;
  StepMetric m3;
  m3.step = 3;
  m3.attempt = 2;
  m3.loss = 1.5;
  again.metrics.push_back(m3);
  again.metrics_offset = 400;
  again.events_offset = 40;
  ASSERT_TRUE(store->ingest(id, again).is_ok());
  auto rows = store->metrics(id, 1);
  ASSERT_TRUE(rows.is_ok());
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].step, 2);
  EXPECT_EQ((*rows)[0].component_bytes.at("activations"), 202);
  EXPECT_EQ((*rows)[1].attempt, 2);
  EXPECT_DOUBLE_EQ(*(*rows)[1].loss, 1.5);
  auto job = store->get(id);
  EXPECT_EQ(job->metrics_offset, 400);
  EXPECT_EQ(job->events_offset, 40);
}

TEST(JobStoreTest, AnEvaluatedStepKeepsItsEvalLossAndTheJobItsNewest) {
  testing::TempDir dir;
  auto store = JobStore::open(dir.file("tailor.db")).value();
  const auto id = store->create(sample_job("e"))->job.id;
  IngestBatch batch;
  for (int s = 1; s <= 2; ++s) {
    StepMetric m;
    m.step = s;
    m.loss = 3.0;
    if (s == 2) {
      m.eval_loss = 2.5;
      m.eval_tokens = 301;
      m.eval_seconds = 0.25;
    }
    batch.metrics.push_back(m);
  }
  JobUpdate changes;
  changes.set("last_eval_step", std::int64_t{2}).set("last_eval_loss", 2.5);
  ASSERT_TRUE(store->ingest(id, batch, changes).is_ok());
  auto rows = store->metrics(id);
  ASSERT_TRUE(rows.is_ok());
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_FALSE((*rows)[0].eval_loss);
  EXPECT_DOUBLE_EQ(*(*rows)[1].eval_loss, 2.5);
  EXPECT_EQ(*(*rows)[1].eval_tokens, 301);
  EXPECT_DOUBLE_EQ(*(*rows)[1].eval_seconds, 0.25);
  auto job = store->get(id);
  EXPECT_EQ(*job->last_eval_step, 2);
  EXPECT_DOUBLE_EQ(*job->last_eval_loss, 2.5);
  // Listings read the same columns.
  auto page = store->list({});
  ASSERT_TRUE(page.is_ok());
  EXPECT_DOUBLE_EQ(*page->jobs.at(0).last_eval_loss, 2.5);
}

TEST(JobStoreTest, ConcurrentCreatesFromManyThreadsAllLand) {
  testing::TempDir dir;
  auto store = JobStore::open(dir.file("tailor.db")).value();
  std::vector<std::thread> threads;
  std::mutex mu;
  std::vector<std::string> failures;  // which create, and the store's reason
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        const std::string name = "c" + std::to_string(t * 10 + i);
        const auto created = store->create(sample_job(name));
        if (!created.is_ok()) {
          std::lock_guard lock(mu);
          failures.push_back("create " + name + ": " + created.status().to_string());
        }
      }
    });
  }
  for (auto& th : threads)
    th.join();
  EXPECT_TRUE(failures.empty()) << failures.size() << " failed, first: " << failures.front();
  JobFilter f;
  f.limit = 1000;
  auto all = store->list(f);
  ASSERT_EQ(all->jobs.size(), 80u);
  for (std::size_t i = 0; i < all->jobs.size(); ++i)
    EXPECT_EQ(all->jobs[i].seq, static_cast<std::int64_t>(i + 1));
}

// The held-lock defect: a write waits out the busy timeout, then fails as
// Unavailable (503, retry) instead of an I/O error (500); the store knows it
// cannot write, and a probe finds out when it can again.
TEST(JobStoreTest, AWriteWhileAnotherProcessHoldsTheDatabaseIsUnavailableUntilItLetsGo) {
  testing::TempDir dir;
  auto store = JobStore::open(dir.file("t.db"), 100);
  ASSERT_TRUE(store.is_ok());
  EXPECT_TRUE((*store)->health().writable);
  auto other = Database::open(dir.file("t.db"));
  ASSERT_TRUE(other.is_ok());
  ASSERT_TRUE(other->exec("BEGIN EXCLUSIVE").is_ok());
  auto made = (*store)->create(sample_job("held"));
  ASSERT_FALSE(made.is_ok());
  EXPECT_EQ(made.status().code(), StatusCode::kUnavailable) << made.status().to_string();
  EXPECT_NE(made.status().message().find("another process holds the database"), std::string::npos)
      << made.status().message();
  StoreHealth h = (*store)->probe();
  EXPECT_FALSE(h.writable);
  EXPECT_NE(h.error.find("locked"), std::string::npos) << h.error;
  EXPECT_GT(h.failing_since, 0);
  // Reads go on meanwhile (WAL).
  EXPECT_TRUE((*store)->list({}).is_ok());
  ASSERT_TRUE(other->exec("ROLLBACK").is_ok());
  EXPECT_TRUE((*store)->probe().writable);
  EXPECT_TRUE((*store)->create(sample_job("after")).is_ok());
}

// Writes that queue behind one another while another process holds the
// database: each gives up within the busy timeout of its own start (issue
// 37, item 2: they used to wait one timeout after another).
TEST(JobStoreTest, WritesQueuedBehindEachOtherEachGiveUpWithinTheirBusyTimeout) {
  testing::TempDir dir;
  auto store = JobStore::open(dir.file("t.db"), 300);
  ASSERT_TRUE(store.is_ok());
  auto other = Database::open(dir.file("t.db"));
  ASSERT_TRUE(other.is_ok());
  ASSERT_TRUE(other->exec("BEGIN EXCLUSIVE").is_ok());
  std::vector<double> seconds(6, 0);
  std::vector<std::thread> writers;
  for (std::size_t i = 0; i < seconds.size(); ++i) {
    writers.emplace_back([&, i] {
      const auto t = std::chrono::steady_clock::now();
      auto made = (*store)->create(sample_job("w" + std::to_string(i)));
      EXPECT_FALSE(made.is_ok());
      EXPECT_EQ(made.status().code(), StatusCode::kUnavailable) << made.status().to_string();
      seconds[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    });
  }
  for (auto& w : writers) w.join();
  // 0.3 s each at most, with a loaded machine's margin; queued one after
  // another they took up to 6 x 0.3 s.
  for (double s : seconds) EXPECT_LT(s, 1.0);
  // Reads meanwhile answer from their own connections.
  const auto t = std::chrono::steady_clock::now();
  EXPECT_TRUE((*store)->list({}).is_ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t, std::chrono::milliseconds(250));
  ASSERT_TRUE(other->exec("ROLLBACK").is_ok());
  EXPECT_TRUE((*store)->probe().writable);
  EXPECT_TRUE((*store)->create(sample_job("after")).is_ok());
}

// Polls (for up to 60 s) until `done` holds.
template <class F>
bool eventually(F done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Group commit (issue 37, item 7): writes that queue while a commit is under
// way are committed together in the next one, each in its own savepoint, so
// a write refused half-way undoes only its own changes.
TEST(JobStoreTest, WritesQueuedBehindACommitShareTheNextAndARefusedOneUndoesOnlyItself) {
  testing::TempDir dir;
  auto opened = JobStore::open(dir.file("t.db"), 30000);
  ASSERT_TRUE(opened.is_ok());
  JobStore& store = **opened;
  const std::string first = store.create(sample_job("first")).value().job.id;
  NewJob keyed = sample_job("keyed");
  keyed.idempotency_key = "k";
  keyed.request_hash = "h1";
  ASSERT_TRUE(store.create(keyed).is_ok());
  const WriteStats before = store.write_stats();
  EXPECT_EQ(before.commits, 2u);
  EXPECT_EQ(before.writes, 2u);

  // Another process holds the database: the next write's commit waits for
  // it, and every write after that one queues.
  auto other = Database::open(dir.file("t.db"));
  ASSERT_TRUE(other.is_ok());
  ASSERT_TRUE(other->exec("BEGIN EXCLUSIVE").is_ok());
  std::vector<std::thread> threads;
  std::mutex mu;
  std::map<std::string, Status> results;
  const auto run = [&](const std::string& name, std::function<Status()> write) {
    threads.emplace_back([&, name, write] {
      const Status s = write();
      std::lock_guard lock(mu);
      results[name] = s;
    });
  };
  run("lead", [&] { return store.create(sample_job("lead")).status(); });
  ASSERT_TRUE(eventually([&] { return store.write_stats().commits == 3; }));
  for (int i = 0; i < 5; ++i) {
    run("create" + std::to_string(i), [&, i] { return store.create(sample_job("q" + std::to_string(i))).status(); });
  }
  NewJob reused = keyed;
  reused.request_hash = "h2";
  run("reused key", [&] { return store.create(reused).status(); });
  run("wrong state", [&] { return store.transition(first, JobState::kRunning, JobState::kSucceeded, "x"); });
  run("update", [&] { return store.update(first, JobUpdate().set("priority", 7)); });
  // Events and a step are written, then the offsets' update fails: all of
  // it must go.
  IngestBatch half;
  half.events.push_back({"note", "never kept", "", 0});
  StepMetric step;
  step.step = 1;
  step.loss = 2.0;
  half.metrics.push_back(step);
  run("half ingest", [&] { return store.ingest(first, half, JobUpdate().set("no_such_column", 1)); });
  ASSERT_TRUE(eventually([&] { return store.write_stats().waiting == 9; })) << store.write_stats().waiting;
  ASSERT_TRUE(other->exec("ROLLBACK").is_ok());
  for (auto& t : threads)
    t.join();

  const WriteStats after = store.write_stats();
  EXPECT_EQ(after.commits, 4u) << "the nine queued writes share one commit";
  EXPECT_EQ(after.writes, 12u);
  EXPECT_EQ(after.waiting, 0);
  for (const char* ok : {"lead", "create0", "create1", "create2", "create3", "create4", "update"}) {
    EXPECT_TRUE(results[ok].is_ok()) << ok << ": " << results[ok].to_string();
  }
  EXPECT_EQ(results["reused key"].code(), StatusCode::kFailedPrecondition) << results["reused key"].to_string();
  EXPECT_EQ(results["wrong state"].code(), StatusCode::kFailedPrecondition) << results["wrong state"].to_string();
  EXPECT_FALSE(results["half ingest"].is_ok());
  EXPECT_TRUE(store.health().writable) << "refusals are not store failures";

  JobFilter all;
  all.limit = 100;
  EXPECT_EQ(store.list(all).value().jobs.size(), 8u);
  const JobRecord job = store.get(first).value();
  EXPECT_EQ(job.priority, 7);
  EXPECT_EQ(job.state, JobState::kQueued);
  EXPECT_EQ(job.events_offset, 0);
  const auto events = store.events(first);
  ASSERT_TRUE(events.is_ok());
  for (const EventRecord& e : *events)
    EXPECT_NE(e.kind, "note") << e.message;
  EXPECT_TRUE(store.metrics(first).value().empty());
}

// A refusal is not a store failure.
TEST(JobStoreTest, ARefusedTransitionLeavesTheStoreWritable) {
  testing::TempDir dir;
  auto store = JobStore::open(dir.file("t.db"));
  ASSERT_TRUE(store.is_ok());
  auto made = (*store)->create(sample_job("j"));
  ASSERT_TRUE(made.is_ok());
  const Status s = (*store)->transition(made->job.id, JobState::kRunning, JobState::kSucceeded, "x");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE((*store)->health().writable);
}

}  // namespace
}  // namespace tailor::daemon
