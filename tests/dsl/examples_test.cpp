// Every example spec shipped in configs/examples/ must validate.
#include <gtest/gtest.h>

#include <filesystem>

#include "dsl/spec_loader.h"

namespace tailor::dsl {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> example_files() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(fs::path(TAILOR_SOURCE_DIR) / "configs/examples")) {
    if (e.path().extension() == ".yaml") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ExamplesTest, TheRequiredExamplesExist) {
  const auto files = example_files();
  for (const char* name : {"tiny-cpu.yaml", "llama2-7b-qlora-24gb.yaml", "llama2-13b-4090.yaml",
                           "llama2-70b-2xa6000.yaml", "llama3-8b-full-8xa100.yaml", "gpt2-t4.yaml"}) {
    EXPECT_TRUE(fs::exists(fs::path(TAILOR_SOURCE_DIR) / "configs/examples" / name)) << name;
  }
  EXPECT_GE(files.size(), 6u);
}

TEST(ExamplesTest, EveryExampleValidatesWithoutWarnings) {
  for (const std::string& file : example_files()) {
    LoadedSpec s = load_job_spec(file);
    EXPECT_TRUE(s.ok()) << s.diagnostics.to_string();
    EXPECT_TRUE(s.diagnostics.empty()) << s.diagnostics.to_string();
  }
}

TEST(ExamplesTest, FullFineTuneExamplesForbidAdapters) {
  for (const char* name : {"llama3-8b-full-8xa100.yaml", "gpt2-t4.yaml"}) {
    LoadedSpec s = load_job_spec((fs::path(TAILOR_SOURCE_DIR) / "configs/examples" / name).string());
    ASSERT_TRUE(s.ok()) << s.diagnostics.to_string();
    EXPECT_EQ(s.spec->strategy.forbid, std::vector<dsl::Technique>{dsl::Technique::kAdapters}) << name;
  }
}

}  // namespace
}  // namespace tailor::dsl
