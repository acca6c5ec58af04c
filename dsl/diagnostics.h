// Diagnostics: every problem found in a document, collected rather than
// thrown, each with a position and the key path it concerns:
//   job.yaml:12:5: error: training.micro_batch: unknown key; did you mean 'micro_batch_size'?
#pragma once

#include <string>
#include <vector>

namespace tailor::dsl {

// A position in a source file. line and column are 1-based; line 0 means
// "no position" (a value that came from a --set flag or a default).
struct SourceLocation {
  std::string file;
  int line = 0;
  int column = 0;

  std::string to_string() const;  // "job.yaml:12:5", or "job.yaml" without a position
};

enum class Severity { kError, kWarning, kNote };

struct Diagnostic {
  Severity severity = Severity::kError;
  SourceLocation location;
  std::string path;     // key path such as "training.micro_batch_size"; may be empty
  std::string message;  // what is wrong, and the hint if there is one

  // "job.yaml:12:5: error: training.lr: expected a number greater than 0, got \"abc\""
  std::string to_string() const;
};

class Diagnostics {
 public:
  void error(SourceLocation loc, std::string path, std::string message);
  void warning(SourceLocation loc, std::string path, std::string message);
  void add(Diagnostic d) { items_.push_back(std::move(d)); }
  void append(const Diagnostics& other);

  bool has_errors() const;
  std::size_t error_count() const;
  const std::vector<Diagnostic>& items() const { return items_; }
  bool empty() const { return items_.empty(); }

  // One diagnostic per line, in the order found, sorted stably by file and
  // position so the output reads top to bottom.
  std::string to_string() const;
  // The closing line of an invalid spec: "job.yaml: invalid (1 error)".
  std::string verdict(const std::string& file) const;

 private:
  std::vector<Diagnostic> items_;
};

}  // namespace tailor::dsl
