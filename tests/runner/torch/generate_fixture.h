// What the generation and completion tests share: generate_reference.py
// (transformers and PEFT in .venv) making tiny models and references, and
// a folder opened for inference on the CPU.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "dsl/model_family.h"
#include "runner/torch/inference_model.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/text_file.h"

namespace tailor::runner {

inline ::testing::AssertionResult generate_reference(const tailor::testing::TempDir& dir, const std::string& args) {
  const std::string log = dir.file("python.log");
  const std::string cmd = std::string(TAILOR_SOURCE_DIR) + "/.venv/bin/python " + TAILOR_SOURCE_DIR +
                          "/tests/runner/generate_reference.py " + args + " > " + log + " 2>&1";
  const int rc = std::system(cmd.c_str());
  if (rc == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << cmd << " exited " << rc << ":\n" << tailor::testing::read_text(log);
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

}  // namespace tailor::runner
