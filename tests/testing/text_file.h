// A test's whole-file reads and writes, for logs, reference files and
// the files a test gives the code under test.
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

// Replaces the file's bytes with `text`.
inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

}  // namespace tailor::testing
