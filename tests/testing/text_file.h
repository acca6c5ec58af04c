// A test's whole-file read, for logs and reference files.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace tailor::testing {

// The file's bytes; empty when it cannot be read.
inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace tailor::testing
