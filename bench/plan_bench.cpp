// How long `tailor plan` spends planning: the full search (every candidate
// estimated), the decision-tree trace and the alternatives, for the example
// jobs. The target is under 50 ms per plan; the no-fit case also searches
// every catalog GPU for the smallest that would fit.
//   build/bin/plan_bench
#include <benchmark/benchmark.h>

#include <filesystem>

#include "dsl/spec_loader.h"
#include "strategies/planner.h"

namespace {

using namespace tailor;

dsl::JobSpec load(const char* example, std::vector<std::string> overrides = {}) {
  dsl::LoadOptions opts;
  opts.overrides = std::move(overrides);
  return *dsl::load_job_spec((std::filesystem::path(TAILOR_SOURCE_DIR) / "configs/examples" / example).string(), opts).spec;
}

strategies::Hardware hardware(const char* flag) {
  strategies::Hardware hw;
  hw.gpus = *strategies::parse_gpus_flag(flag, dsl::Catalog::builtin());
  hw.host_memory = Bytes::gib(256);
  hw.cpu = strategies::cpu_device(hw.host_memory);
  return hw;
}

void plan(benchmark::State& state, const dsl::JobSpec& spec, const strategies::Hardware& hw) {
  int candidates = 0;
  for (auto _ : state) {
    const strategies::Plan p = strategies::plan_job(spec, hw);
    candidates = p.candidates_considered;
    benchmark::DoNotOptimize(p.chosen.throughput.tokens_per_second);
  }
  state.counters["candidates"] = candidates;
}

void BM_Plan7bOn24GiB(benchmark::State& s) { plan(s, load("llama2-7b-qlora-24gb.yaml"), hardware("1x24GiB")); }
void BM_Plan70bOn2xA6000(benchmark::State& s) { plan(s, load("llama2-70b-2xa6000.yaml"), hardware("2xA6000")); }
void BM_Plan8bOn8xA100(benchmark::State& s) { plan(s, load("llama3-8b-full-8xa100.yaml"), hardware("8xA100-80")); }
void BM_PlanNoFitSearchesCatalog(benchmark::State& s) {
  plan(s, load("llama2-70b-2xa6000.yaml", {"strategy.forbid=[adapters]"}), hardware("1xT4"));
}

BENCHMARK(BM_Plan7bOn24GiB)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Plan70bOn2xA6000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Plan8bOn8xA100)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PlanNoFitSearchesCatalog)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
