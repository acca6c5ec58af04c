#include "core/json_writer.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/check.h"
#include "core/text.h"

namespace tailor {

namespace {

// Bytes that JSON text may carry as they are: printable ASCII other than
// the quote and the backslash.
bool plain(unsigned char c) { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\'; }

}  // namespace

void append_json_escaped(std::string& out, std::string_view s) {
  out += '"';
  std::size_t i = 0;
  while (i < s.size()) {
    // Runs of plain bytes (nearly all of a listing) are copied at once.
    std::size_t run = i;
    while (run < s.size() && plain(static_cast<unsigned char>(s[run]))) ++run;
    out.append(s.data() + i, run - i);
    i = run;
    if (i == s.size()) break;
    const char c = s[i];
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          static constexpr char kHex[] = "0123456789abcdef";
          out += "\\u00";
          out += kHex[(c >> 4) & 0xf];
          out += kHex[c & 0xf];
        } else {
          // JSON text is UTF-8 (RFC 8259 section 8.1): bytes that are not
          // (a client's percent-encoded query, a stray byte in a log line)
          // become U+FFFD rather than making the whole document unreadable.
          const std::size_t len = utf8_sequence_length(s, i);
          if (len == 0) {
            out += "\\ufffd";
          } else {
            out.append(s.substr(i, len));
            i += len - 1;
          }
        }
    }
    ++i;
  }
  out += '"';
}

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  append_json_escaped(out, s);
  return out;
}

void JsonWriter::newline() {
  if (indent_ <= 0) return;
  out_ += '\n';
  out_.append(stack_.size() * static_cast<std::size_t>(indent_), ' ');
}

void JsonWriter::before_value() {
  if (stack_.empty()) return;
  Level& top = stack_.back();
  if (top.object) {
    TAILOR_CHECK(top.has_key);
    top.has_key = false;
    return;
  }
  if (!top.empty) out_ += ',';
  top.empty = false;
  newline();
}

JsonWriter& JsonWriter::key(std::string_view k) {
  TAILOR_CHECK(!stack_.empty() && stack_.back().object && !stack_.back().has_key);
  Level& top = stack_.back();
  if (!top.empty) out_ += ',';
  top.empty = false;
  newline();
  append_json_escaped(out_, k);
  out_ += indent_ > 0 ? ": " : ":";
  top.has_key = true;
  return *this;
}

JsonWriter& JsonWriter::begin_object() {
  before_value();
  out_ += '{';
  stack_.push_back({true});
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  TAILOR_CHECK(!stack_.empty() && stack_.back().object);
  const bool empty = stack_.back().empty;
  stack_.pop_back();
  if (!empty) newline();
  out_ += '}';
  return *this;
}

JsonWriter& JsonWriter::begin_array() {
  before_value();
  out_ += '[';
  stack_.push_back({false});
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  TAILOR_CHECK(!stack_.empty() && !stack_.back().object);
  const bool empty = stack_.back().empty;
  stack_.pop_back();
  if (!empty) newline();
  out_ += ']';
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view v) {
  before_value();
  append_json_escaped(out_, v);
  return *this;
}

JsonWriter& JsonWriter::value(std::int64_t v) {
  before_value();
  char buf[24];
  const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
  out_.append(buf, end);
  return *this;
}

JsonWriter& JsonWriter::value(double v) {
  before_value();
  if (!std::isfinite(v)) {
    out_ += "null";
    return *this;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  out_ += buf;
  return *this;
}

JsonWriter& JsonWriter::value(bool v) {
  before_value();
  out_ += v ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::raw(std::string_view json) {
  before_value();
  out_ += json;
  return *this;
}

JsonWriter& JsonWriter::null() {
  before_value();
  out_ += "null";
  return *this;
}

}  // namespace tailor
