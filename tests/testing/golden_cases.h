// Data-driven golden cases (tests/dsl/cases, tests/strategies/cases): the
// case names of a folder, a file's text, and a ctest-safe name per case.
// TAILOR_UPDATE_GOLDEN=1 makes the tests rewrite their .expected files.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace tailor::testing {

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline bool update_golden() { return std::getenv("TAILOR_UPDATE_GOLDEN") != nullptr; }

// The stems of `folder`'s .yaml files that `keep` accepts, sorted.
inline std::vector<std::string> golden_case_names(const std::filesystem::path& folder,
                                                  const std::function<bool(const std::string&)>& keep = {}) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(folder)) {
    const std::string stem = e.path().stem().string();
    if (e.path().extension() == ".yaml" && (!keep || keep(stem))) out.push_back(stem);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A case name as a GoogleTest parameter name: letters and digits, '_' else.
inline std::string golden_case_test_name(const ::testing::TestParamInfo<std::string>& param) {
  std::string n = param.param;
  for (char& c : n) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return n;
}

}  // namespace tailor::testing
