// Every example spec shipped in configs/examples/ must validate.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

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

// configs/examples/hf/ holds specs of Hugging Face models the user downloads
// first, into the repository's models/ (ignored by git), as the walkthrough
// (docs/walkthrough.md) does. Where the download is not made, the one error
// allowed is that folder's absence; everything else, data files included,
// validates.
std::vector<std::string> download_example_files() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(fs::path(TAILOR_SOURCE_DIR) / "configs/examples/hf")) {
    if (e.path().extension() == ".yaml") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

fs::path download_folder() { return (fs::path(TAILOR_SOURCE_DIR) / "models").lexically_normal(); }

TEST(ExamplesTest, DownloadExamplesValidateButForTheModelFolder) {
  const auto files = download_example_files();
  EXPECT_FALSE(files.empty());
  for (const std::string& file : files) {
    LoadOptions without_files;
    without_files.check_files = false;
    const LoadedSpec away = load_job_spec(file, without_files);
    ASSERT_TRUE(away.ok()) << away.diagnostics.to_string();
    EXPECT_TRUE(away.diagnostics.empty()) << away.diagnostics.to_string();
    const fs::path model = fs::path(away.spec->model.path).lexically_normal();
    EXPECT_EQ(model.parent_path(), download_folder()) << file;
    EXPECT_TRUE(fs::is_regular_file(away.spec->data.train)) << away.spec->data.train;
    EXPECT_TRUE(away.spec->data.eval.empty() || fs::is_regular_file(away.spec->data.eval)) << away.spec->data.eval;

    const LoadedSpec here = load_job_spec(file);
    if (fs::is_directory(model)) {
      EXPECT_TRUE(here.ok()) << here.diagnostics.to_string();
      continue;
    }
    ASSERT_EQ(here.diagnostics.error_count(), 1u) << here.diagnostics.to_string();
    EXPECT_EQ(here.diagnostics.items()[0].path, "model.path");
    EXPECT_NE(here.diagnostics.items()[0].message.find("does not exist"), std::string::npos)
        << here.diagnostics.to_string();
  }
}

TEST(ExamplesTest, TheWalkthroughExampleTrainsLoraWithEval) {
  LoadOptions without_files;
  without_files.check_files = false;
  const LoadedSpec s = load_job_spec(
      (fs::path(TAILOR_SOURCE_DIR) / "configs/examples/hf/qwen2.5-0.5b-lora.yaml").string(), without_files);
  ASSERT_TRUE(s.ok()) << s.diagnostics.to_string();
  EXPECT_EQ(fs::path(s.spec->model.path).lexically_normal(), download_folder() / "qwen2.5-0.5b");
  EXPECT_FALSE(s.spec->data.eval.empty());
  EXPECT_GT(s.spec->training.eval_every, 0);
  EXPECT_FALSE(s.spec->data.prompt_field.empty());
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
