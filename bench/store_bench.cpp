// tailord's SQLite store: step-metric ingestion (rows/s, one transaction per
// batch as the supervisor does) and listing jobs with 1,000 in the store.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "daemon/store/job_store.h"

namespace {

using tailor::daemon::IngestBatch;
using tailor::daemon::JobFilter;
using tailor::daemon::JobStore;
using tailor::daemon::NewJob;
using tailor::daemon::StepMetric;

struct Store {
  std::filesystem::path dir;
  std::unique_ptr<JobStore> store;
  Store() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tailor-store-bench-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) std::abort();
    dir = tmpl;
    auto opened = JobStore::open((dir / "tailor.db").string());
    if (!opened.is_ok()) std::abort();
    store = std::move(opened).value();
  }
  ~Store() {
    store.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::string add_job(int i) {
    NewJob j;
    j.name = "bench-" + std::to_string(i);
    j.spec_text = "name: bench";
    j.spec_json = "{}";
    j.plan_json = "{\"fits\": true}";
    j.labels = {{"team", i % 2 == 0 ? "nlp" : "vision"}};
    auto created = store->create(j);
    if (!created.is_ok()) std::abort();
    return created->job.id;
  }
};

StepMetric metric(std::int64_t step) {
  StepMetric m;
  m.step = step;
  m.time = 1.0 * static_cast<double>(step);
  m.loss = 2.5;
  m.lr = 1e-4;
  m.grad_norm = 0.9;
  m.tokens = 2048;
  m.tokens_per_second = 8000;
  m.step_seconds = 0.25;
  m.allocated_bytes = 1 << 28;
  m.peak_bytes = 1 << 29;
  for (const auto& c : tailor::daemon::memory_component_names()) m.component_bytes[c] = 1 << 20;
  return m;
}

// One batch of `range(0)` step rows per iteration, in one transaction.
void BM_IngestStepMetrics(benchmark::State& state) {
  Store s;
  const std::string id = s.add_job(0);
  std::int64_t step = 0;
  for (auto _ : state) {
    IngestBatch b;
    for (std::int64_t i = 0; i < state.range(0); ++i) b.metrics.push_back(metric(++step));
    b.metrics_offset = step * 200;
    if (!s.store->ingest(id, b).is_ok()) state.SkipWithError("ingest failed");
  }
  state.SetItemsProcessed(step);  // rows/s
}
BENCHMARK(BM_IngestStepMetrics)->Arg(1)->Arg(20)->Arg(200)->Unit(benchmark::kMicrosecond);

// GET /v1/jobs's query: the first page (50) of 1,000 jobs, and a label filter.
void BM_ListJobs(benchmark::State& state) {
  Store s;
  for (int i = 0; i < 1000; ++i) s.add_job(i);
  JobFilter f;
  if (state.range(0) == 1) f.labels = {{"team", "nlp"}};
  for (auto _ : state) {
    auto page = s.store->list(f);
    if (!page.is_ok()) state.SkipWithError("list failed");
    benchmark::DoNotOptimize(page);
  }
}
BENCHMARK(BM_ListJobs)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
