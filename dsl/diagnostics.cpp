#include "dsl/diagnostics.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace tailor::dsl {

std::string SourceLocation::to_string() const {
  if (line <= 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

std::string Diagnostic::to_string() const {
  static constexpr const char* kSeverity[] = {"error", "warning", "note"};
  std::string out = location.to_string();
  if (!out.empty()) out += ": ";
  out += kSeverity[static_cast<int>(severity)];
  out += ": ";
  if (!path.empty()) {
    out += path;
    out += ": ";
  }
  out += message;
  return out;
}

void Diagnostics::error(SourceLocation loc, std::string path, std::string message) {
  items_.push_back({Severity::kError, std::move(loc), std::move(path), std::move(message)});
}

void Diagnostics::warning(SourceLocation loc, std::string path, std::string message) {
  items_.push_back({Severity::kWarning, std::move(loc), std::move(path), std::move(message)});
}

void Diagnostics::append(const Diagnostics& other) {
  items_.insert(items_.end(), other.items_.begin(), other.items_.end());
}

bool Diagnostics::has_errors() const { return error_count() > 0; }

std::size_t Diagnostics::error_count() const {
  return static_cast<std::size_t>(std::count_if(items_.begin(), items_.end(),
                                                [](const Diagnostic& d) { return d.severity == Severity::kError; }));
}

std::string Diagnostics::to_string() const {
  // Files in the order they were first reported; within a file, by position.
  std::map<std::string, std::size_t> file_rank;
  for (const Diagnostic& d : items_) file_rank.emplace(d.location.file, file_rank.size());
  std::vector<const Diagnostic*> sorted;
  for (const Diagnostic& d : items_) sorted.push_back(&d);
  std::stable_sort(sorted.begin(), sorted.end(), [&](const Diagnostic* a, const Diagnostic* b) {
    return std::tuple(file_rank[a->location.file], a->location.line, a->location.column) <
           std::tuple(file_rank[b->location.file], b->location.line, b->location.column);
  });
  std::string out;
  for (const Diagnostic* d : sorted) {
    out += d->to_string();
    out += '\n';
  }
  return out;
}

std::string Diagnostics::verdict(const std::string& file) const {
  const std::size_t n = error_count();
  return file + ": invalid (" + std::to_string(n) + (n == 1 ? " error)" : " errors)");
}

}  // namespace tailor::dsl
