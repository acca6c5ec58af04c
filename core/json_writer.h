// A streaming JSON writer (std only) for documents that layers without a
// JSON library emit: the plan document, the runner's JSON lines. Keys and
// strings are escaped; non-finite numbers become null. Misuse (a value
// without a key inside an object) is a programming error and checked.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tailor {

class JsonWriter {
 public:
  // indent 0: compact, one line.
  explicit JsonWriter(int indent = 2) : indent_(indent) {}

  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view k);

  JsonWriter& value(std::string_view v);
  JsonWriter& value(const char* v) { return value(std::string_view(v)); }
  JsonWriter& value(const std::string& v) { return value(std::string_view(v)); }
  JsonWriter& value(std::int64_t v);
  JsonWriter& value(int v) { return value(static_cast<std::int64_t>(v)); }
  JsonWriter& value(double v);
  JsonWriter& value(bool v);
  JsonWriter& null();
  // Inserts an already serialised JSON value as is (the caller vouches for it).
  JsonWriter& raw(std::string_view json);

  template <class T>
  JsonWriter& field(std::string_view k, const T& v) {
    key(k);
    return value(v);
  }

  const std::string& str() const { return out_; }
  // Moves the text out (the writer is spent afterwards).
  std::string take() { return std::move(out_); }
  void reserve(std::size_t bytes) { out_.reserve(bytes); }

 private:
  void before_value();
  void newline();

  struct Level {
    bool object;
    bool empty = true;
    bool has_key = false;
  };
  std::string out_;
  std::vector<Level> stack_;
  int indent_;
};

// `s` as a JSON string literal, quotes included.
std::string json_escape(std::string_view s);
// The same, appended to `out` (no temporary: the listing's hot path).
void append_json_escaped(std::string& out, std::string_view s);

}  // namespace tailor
