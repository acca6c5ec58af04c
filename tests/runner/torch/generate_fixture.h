// What the generation and completion tests share: generate_reference.py
// (transformers and PEFT in .venv) making tiny models and references, and
// a folder opened for inference on the CPU.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "dsl/model_family.h"
#include "runner/torch/inference_model.h"
#include "tests/testing/python_scripts.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/text_file.h"

namespace tailor::runner {

// Runs tests/runner/SCRIPT ARGS with .venv's Python, its output into
// dir/SCRIPT.log (printed when `echo`, as a test's record of what it compared).
inline ::testing::AssertionResult venv_script(const tailor::testing::TempDir& dir, const std::string& script,
                                              const std::string& args, bool echo = false) {
  const std::string log = dir.file(script + ".log");
  // Appended in place: GCC 12 at -O1 sees a bound the rvalue operator+
  // chain cannot overrun (-Warray-bounds, an error in CI builds).
  std::string path = TAILOR_SOURCE_DIR;
  path += "/tests/runner/";
  path += script;
  ::testing::AssertionResult ok = tailor::testing::run_python_script(path, args, log);
  if (echo) std::printf("%s", tailor::testing::read_text(log).c_str());
  return ok;
}

inline ::testing::AssertionResult generate_reference(const tailor::testing::TempDir& dir, const std::string& args) {
  return venv_script(dir, "generate_reference.py", args);
}

// Every family's name, and them spaced for generate_reference.py's command line.
inline std::vector<std::string> family_names(std::string* spaced = nullptr) {
  std::vector<std::string> names;
  for (const dsl::ModelFamilyInfo& f : dsl::model_families()) {
    names.emplace_back(f.name);
    if (spaced) *spaced += " " + names.back();
  }
  return names;
}

inline Result<InferenceModel> open_on_cpu(const std::string& target, const std::string& adapter = "") {
  TAILOR_ASSIGN_OR_RETURN(ModelSources s, resolve_model_sources(target, adapter));
  return open_inference_model(s, torch::kCPU, "auto");
}

// A suite over the tiny chat model (generate_reference.py chat: a ChatML
// Qwen2-style model with a trained byte-level tokenizer, its conversation
// and transformers' greedy reply), made and opened once per suite.
class TinyChatModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new tailor::testing::TempDir();
    ASSERT_TRUE(generate_reference(*dir_, "chat " + dir_->path().string() + " --tools"));
    auto m = open_on_cpu(dir_->file("model"));
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    model_ = new InferenceModel(std::move(*m));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete dir_;
    model_ = nullptr;
    dir_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(model_, nullptr); }

  inline static tailor::testing::TempDir* dir_ = nullptr;
  inline static InferenceModel* model_ = nullptr;
};

}  // namespace tailor::runner
