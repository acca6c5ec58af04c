// Planner golden cases: each tests/strategies/cases/NAME.yaml (a job spec,
// usually extending an example with a few keys) is planned on the hardware
// its resources declare, or on the `--gpus` flag of a first line
// "# --gpus FLAG", with 64 GiB of host memory where nothing declares it,
// and the plan, rendered as text (the chosen strategy, every component's
// bytes, the budget, each decision of the tree, the advice, the closest
// alternatives), must equal NAME.expected exactly. A change to the memory
// model, the cost model or the tree shows as a diff of these files.
// TAILOR_UPDATE_GOLDEN=1 rewrites them from the output: review the diff.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "dsl/catalog.h"
#include "dsl/spec_loader.h"
#include "strategies/planner.h"
#include "tests/testing/golden_cases.h"

namespace tailor::strategies {
namespace {

namespace fs = std::filesystem;

const fs::path kCases = fs::path(TAILOR_SOURCE_DIR) / "tests/strategies/cases";

std::string bytes(Bytes b) { return b.to_string() + " (" + std::to_string(b.count()) + ")"; }

std::string render(const Plan& plan) {
  std::ostringstream out;
  for (const std::string& e : plan.errors) out << "error: " << e << "\n";
  if (!plan.errors.empty()) return out.str();
  out << "hardware: " << plan.hardware.describe() << "\n";
  out << "fits: " << (plan.fits ? "yes" : "no: " + plan.no_fit_reason()) << "\n";
  out << "strategy: " << plan.chosen.strategy.describe() << "\n";
  out << "budget per device: " << bytes(plan.budget_per_device) << "; host " << bytes(plan.host_budget) << "\n";
  out << "memory per device:\n";
  const MemoryBreakdown& m = plan.chosen.memory.per_device;
  for (const MemoryComponent& c : kMemoryComponents) out << "  " << c.key << ": " << bytes(m.*c.member) << "\n";
  out << "  overlap: " << bytes(m.overlap) << "\n";
  out << "  total: " << bytes(m.total()) << "\n";
  out << "host: " << bytes(plan.chosen.memory.host) << "\n";
  char rate[64];
  std::snprintf(rate, sizeof rate, "%.0f tokens/s", plan.chosen.throughput.tokens_per_second);
  out << "throughput: " << rate << "\n";
  out << "decisions:\n";
  for (const Decision& d : plan.decisions) {
    out << "  " << d.step << " [" << to_string(d.verdict) << "] " << d.question << " -> " << d.answer() << " -> "
        << d.action() << "\n";
  }
  for (const PinAdvice& a : plan.advice) out << "advice: " << a.text << "\n";
  const std::size_t shown = std::min<std::size_t>(3, plan.alternatives.size());
  for (std::size_t i = 0; i < shown; ++i) {
    out << "alternative: " << plan.alternatives[i].candidate.strategy.describe() << " (" << plan.alternatives[i].why
        << ")\n";
  }
  return out.str();
}

class PlannerCasesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PlannerCasesTest, PlanMatchesExpected) {
  const fs::path spec = kCases / (GetParam() + ".yaml");
  const fs::path expected = kCases / (GetParam() + ".expected");
  const bool update = testing::update_golden();
  ASSERT_TRUE(fs::exists(expected) || update) << "missing " << expected;
  const dsl::LoadedSpec loaded = dsl::load_job_spec(spec.string(), {});
  ASSERT_TRUE(loaded.ok()) << loaded.diagnostics.to_string();
  std::optional<std::string> flag;
  const std::string text = testing::read_file(spec);
  const std::string marker = "# --gpus ";
  if (text.rfind(marker, 0) == 0) flag = text.substr(marker.size(), text.find('\n') - marker.size());
  const auto hw = resolve_hardware(*loaded.spec, flag, {}, Bytes::gib(64), dsl::Catalog::builtin());
  ASSERT_TRUE(hw.is_ok()) << hw.status().message();
  const std::string actual = render(plan_job(*loaded.spec, *hw));
  if (update) {
    std::ofstream(expected, std::ios::binary) << actual;
    return;
  }
  EXPECT_EQ(actual, testing::read_file(expected));
}

INSTANTIATE_TEST_SUITE_P(Planner, PlannerCasesTest, ::testing::ValuesIn(testing::golden_case_names(kCases)),
                         testing::golden_case_test_name);

}  // namespace
}  // namespace tailor::strategies
