// Data-driven diagnostics: each tests/dsl/cases/NAME.yaml is loaded (with
// file checks on, relative to the cases folder) and its diagnostics must
// equal NAME.expected exactly, with the folder prefix removed. An empty
// .expected file means the spec is valid. A new case is two small files
// (plus NAME.args with one --set override per line, if it needs any).
// TAILOR_UPDATE_GOLDEN=1 rewrites the .expected files from the output.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "dsl/spec_loader.h"
#include "tests/testing/golden_cases.h"

namespace tailor::dsl {
namespace {

namespace fs = std::filesystem;

const fs::path kCases = fs::path(TAILOR_SOURCE_DIR) / "tests/dsl/cases";

std::string strip_folder(std::string text) {
  const std::string prefix = fs::weakly_canonical(kCases).string() + "/";
  for (std::size_t at; (at = text.find(prefix)) != std::string::npos;) text.erase(at, prefix.size());
  const std::string rel = kCases.string() + "/";
  for (std::size_t at; (at = text.find(rel)) != std::string::npos;) text.erase(at, rel.size());
  return text;
}

class CasesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CasesTest, DiagnosticsMatchExpected) {
  const fs::path spec = kCases / (GetParam() + ".yaml");
  const fs::path expected = kCases / (GetParam() + ".expected");
  ASSERT_TRUE(fs::exists(expected) || testing::update_golden()) << "missing " << expected;
  LoadOptions opts;
  const std::string overrides_file = (kCases / (GetParam() + ".args")).string();
  if (fs::exists(overrides_file)) {
    std::istringstream lines(testing::read_file(overrides_file));
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty()) opts.overrides.push_back(line);
    }
  }
  const LoadedSpec loaded = load_job_spec(spec.string(), opts);
  const std::string actual = strip_folder(loaded.diagnostics.to_string());
  if (testing::update_golden()) {
    // Regenerates the .expected files; review the diff before committing.
    std::ofstream(expected, std::ios::binary) << actual;
    return;
  }
  EXPECT_EQ(actual, testing::read_file(expected));
  EXPECT_EQ(loaded.ok(), !loaded.diagnostics.has_errors());
}

// base-*.yaml are the bases other cases extend.
INSTANTIATE_TEST_SUITE_P(Dsl, CasesTest,
                         ::testing::ValuesIn(testing::golden_case_names(
                             kCases, [](const std::string& stem) { return stem.find("base-") != 0; })),
                         testing::golden_case_test_name);

}  // namespace
}  // namespace tailor::dsl
