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

namespace tailor::dsl {
namespace {

namespace fs = std::filesystem;

const fs::path kCases = fs::path(TAILOR_SOURCE_DIR) / "tests/dsl/cases";

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

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
  ASSERT_TRUE(fs::exists(expected) || std::getenv("TAILOR_UPDATE_GOLDEN")) << "missing " << expected;
  LoadOptions opts;
  const std::string overrides_file = (kCases / (GetParam() + ".args")).string();
  if (fs::exists(overrides_file)) {
    std::istringstream lines(read(overrides_file));
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty()) opts.overrides.push_back(line);
    }
  }
  const LoadedSpec loaded = load_job_spec(spec.string(), opts);
  const std::string actual = strip_folder(loaded.diagnostics.to_string());
  if (std::getenv("TAILOR_UPDATE_GOLDEN") != nullptr) {
    // Regenerates the .expected files; review the diff before committing.
    std::ofstream(expected, std::ios::binary) << actual;
    return;
  }
  EXPECT_EQ(actual, read(expected));
  EXPECT_EQ(loaded.ok(), !loaded.diagnostics.has_errors());
}

std::vector<std::string> case_names() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(kCases)) {
    if (e.path().extension() == ".yaml" && e.path().stem().string().find("base-") != 0) {
      out.push_back(e.path().stem().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

INSTANTIATE_TEST_SUITE_P(Dsl, CasesTest, ::testing::ValuesIn(case_names()),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           std::string n = param.param;
                           for (char& c : n) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace tailor::dsl
