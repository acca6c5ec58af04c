#include "dsl/yaml_tree.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

#include "core/json_writer.h"
#include "core/text.h"
#include "core/units.h"

namespace tailor::dsl {

// ---- Node ------------------------------------------------------------------

const MapEntry* Node::find_entry(std::string_view key) const {
  if (kind != Kind::kMap) return nullptr;
  for (const MapEntry& e : entries) {
    if (e.key == key) return &e;
  }
  return nullptr;
}

const Node* Node::find(std::string_view key) const {
  const MapEntry* e = find_entry(key);
  return e ? &e->value : nullptr;
}

Node* Node::find(std::string_view key) { return const_cast<Node*>(static_cast<const Node*>(this)->find(key)); }

Node& Node::set(std::string key, Node value, SourceLocation key_location) {
  if (kind == Kind::kNull) kind = Kind::kMap;
  for (MapEntry& e : entries) {
    if (e.key == key) {
      e.value = std::move(value);
      if (key_location.line > 0) e.key_location = std::move(key_location);
      return e.value;
    }
  }
  entries.push_back({std::move(key), std::move(key_location), std::move(value)});
  return entries.back().value;
}

bool Node::erase(std::string_view key) {
  for (auto it = entries.begin(); it != entries.end(); ++it) {
    if (it->key == key) {
      entries.erase(it);
      return true;
    }
  }
  return false;
}

Node Node::make_scalar(std::string text, SourceLocation loc, bool is_plain) {
  Node n;
  n.kind = Kind::kScalar;
  n.scalar = std::move(text);
  n.location = std::move(loc);
  n.plain = is_plain;
  return n;
}

Node Node::make_map(SourceLocation loc) {
  Node n;
  n.kind = Kind::kMap;
  n.location = std::move(loc);
  return n;
}

Node Node::make_sequence(SourceLocation loc) {
  Node n;
  n.kind = Kind::kSequence;
  n.location = std::move(loc);
  return n;
}

std::string_view Node::kind_name() const {
  switch (kind) {
    case Kind::kNull: return "null";
    case Kind::kScalar: return "a scalar";
    case Kind::kSequence: return "a list";
    case Kind::kMap: return "a map";
  }
  return "?";
}

std::size_t Node::size() const {
  std::size_t n = 1;
  for (const Node& i : items) n += i.size();
  for (const MapEntry& e : entries) n += e.value.size();
  return n;
}

// ---- UTF-8 -----------------------------------------------------------------

std::optional<std::size_t> find_invalid_utf8(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    if (text[i] == '\0') return i;  // NUL is valid UTF-8 but never valid YAML text
    const std::size_t len = utf8_sequence_length(text, i);
    if (len == 0) return i;
    i += len;
  }
  return std::nullopt;
}

namespace {

SourceLocation location_of_offset(std::string_view text, std::size_t offset, std::string_view file) {
  int line = 1, column = 1;
  for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
      ++column;
    }
  }
  return {std::string(file), line, column};
}

// The first flow-collection opening ('[' or '{') nested deeper than
// `limit`, outside quotes and comments. yaml-cpp's scanner tokenizes a
// flow collection ahead of the events it gives (a token of a few hundred
// bytes each), so 100,000 brackets cost tens of MB before the event
// handler's depth limit is ever reached; this bounds what it is handed. A
// bracket inside a plain scalar counts too: only a document with more than
// `limit` of them unclosed is refused here.
std::optional<std::size_t> too_deep_flow(std::string_view text, int limit) {
  int depth = 0;
  char quote = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote == '"') {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        quote = 0;
      }
      continue;
    }
    if (quote == '\'') {
      if (c == '\'') quote = 0;  // '' inside is two quotes: closes and opens again
      continue;
    }
    if (c == '#' && (i == 0 || text[i - 1] == ' ' || text[i - 1] == '\t' || text[i - 1] == '\n')) {
      while (i < text.size() && text[i] != '\n') ++i;
      continue;
    }
    if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}

// Thrown from inside the event handler to stop yaml-cpp's parser once a
// diagnostic has been recorded; never leaves this file.
struct StopParsing {};

// Builds a Node tree from yaml-cpp parse events.
class TreeBuilder final : public YAML::EventHandler {
 public:
  TreeBuilder(std::string_view file, Diagnostics& diags, const YamlLimits& limits)
      : file_(file), diags_(diags), limits_(limits) {}

  std::optional<Node> take_root() { return std::move(root_); }
  int documents() const { return documents_; }

  void OnDocumentStart(const YAML::Mark& mark) override {
    if (++documents_ > 1) fail(loc(mark), "a job spec file holds one YAML document; found a second one");
  }
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    count_nodes(1, mark);
    Node n;
    n.location = loc(mark);
    complete(std::move(n), anchor);
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    auto it = anchors_.find(anchor);
    if (it == anchors_.end()) fail(loc(mark), "alias refers to an unknown anchor");
    // Expanding aliases copies; the node budget bounds the total so that
    // "billion laughs" documents stop early instead of exhausting memory.
    const std::size_t cost = it->second.size();
    count_nodes(cost, mark);
    Node copy = it->second;
    complete(std::move(copy), 0);
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    count_nodes(1, mark);
    // The file is UTF-8, but yaml-cpp decodes a double-quoted "\N" (U+0085)
    // to the lone byte 0x85, and "\0" is NUL: every later layer (JSON,
    // SQLite, logs) assumes text.
    if (auto bad = find_invalid_utf8(value)) {
      fail(loc(mark), value[*bad] == '\0' ? "string contains a NUL character (from an escape)"
                                          : "string's escapes decode to bytes that are not UTF-8 (write the character itself, or \\uXXXX)");
    }
    // yaml-cpp reports "?" for plain scalars and "!" for quoted ones.
    complete(Node::make_scalar(value, loc(mark), tag == "?"), anchor);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open(Node::make_sequence(loc(mark)), anchor, mark);
  }
  void OnSequenceEnd() override { close(); }

  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    open(Node::make_map(loc(mark)), anchor, mark);
  }
  void OnMapEnd() override { close(); }

  [[noreturn]] void fail(SourceLocation where, std::string message) {
    diags_.error(std::move(where), path(), std::move(message));
    throw StopParsing{};
  }

 private:
  struct Frame {
    Node node;
    YAML::anchor_t anchor = 0;
    bool has_key = false;
    std::string key;
    SourceLocation key_location;
    std::vector<Node> merges;  // values of `<<` keys, applied when the map closes
    // A map's keys, to its entries' indices: duplicates found in constant
    // time, so that a map of n keys parses in O(n) rather than O(n^2).
    std::unordered_map<std::string, std::size_t> index;
  };

  SourceLocation loc(const YAML::Mark& mark) const {
    return {file_, mark.line + 1, mark.column + 1};  // yaml-cpp marks are 0-based
  }

  // The key path of the node being built, for messages.
  std::string path() const {
    std::string p;
    for (const Frame& f : stack_) {
      if (f.node.is_map() && f.has_key) {
        if (!p.empty()) p += '.';
        p += f.key;
      } else if (f.node.is_sequence()) {
        p += "[" + std::to_string(f.node.items.size()) + "]";
      }
    }
    // Deeply nested paths are noise; the position says where.
    if (p.size() > 80) p = p.substr(0, 60) + "...";
    return p;
  }

  void count_nodes(std::size_t n, const YAML::Mark& mark) {
    nodes_ += n;
    if (nodes_ > limits_.max_nodes) {
      fail(loc(mark), "document expands to more than " + std::to_string(limits_.max_nodes) +
                          " nodes (aliases expanded); refusing it as a possible alias bomb");
    }
  }

  void open(Node n, YAML::anchor_t anchor, const YAML::Mark& mark) {
    count_nodes(1, mark);
    if (static_cast<int>(stack_.size()) >= limits_.max_depth) {
      fail(loc(mark), "nesting deeper than " + std::to_string(limits_.max_depth) + " levels");
    }
    stack_.push_back(Frame{std::move(n), anchor, false, {}, {}, {}, {}});
  }

  void close() {
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    if (f.node.is_map()) apply_merges(f);
    complete(std::move(f.node), f.anchor);
  }

  // YAML merge keys: entries of the merged maps that the map does not set itself.
  void apply_merges(Frame& f) {
    for (const Node& m : f.merges) {
      std::vector<const Node*> sources;
      if (m.is_map()) {
        sources.push_back(&m);
      } else if (m.is_sequence()) {
        for (const Node& item : m.items) sources.push_back(&item);
      }
      for (const Node* src : sources) {
        if (!src->is_map()) {
          diags_.error(src->location, path(), "the merge key '<<' takes a map or a list of maps");
          continue;
        }
        for (const MapEntry& e : src->entries) {
          if (f.index.emplace(e.key, f.node.entries.size()).second) f.node.entries.push_back(e);
        }
      }
    }
  }

  void complete(Node n, YAML::anchor_t anchor) {
    if (anchor != 0) anchors_[anchor] = n;
    if (stack_.empty()) {
      root_ = std::move(n);
      return;
    }
    Frame& top = stack_.back();
    if (top.node.is_sequence()) {
      top.node.items.push_back(std::move(n));
      return;
    }
    if (!top.has_key) {
      if (!n.is_scalar() && !n.is_null()) fail(n.location, "map keys must be plain strings");
      top.has_key = true;
      top.key = n.scalar;
      top.key_location = n.location;
      return;
    }
    top.has_key = false;
    if (top.key == "<<") {
      top.merges.push_back(std::move(n));
      return;
    }
    const auto [at, added] = top.index.emplace(top.key, top.node.entries.size());
    if (!added) {
      // yaml-cpp keeps both silently; a later value would win unnoticed.
      const MapEntry& e = top.node.entries[at->second];
      std::string p = path();
      p += p.empty() ? "" : ".";
      p += top.key;
      diags_.error(top.key_location, p,
                   "duplicate key; first defined at line " + std::to_string(e.key_location.line) + ", column " +
                       std::to_string(e.key_location.column));
      return;
    }
    if (top.node.entries.size() >= limits_.max_map_keys) {
      fail(top.key_location, "more than " + std::to_string(limits_.max_map_keys) + " keys in one map");
    }
    top.node.entries.push_back({std::move(top.key), std::move(top.key_location), std::move(n)});
  }

  std::string file_;
  Diagnostics& diags_;
  const YamlLimits& limits_;
  std::vector<Frame> stack_;
  std::map<YAML::anchor_t, Node> anchors_;
  std::optional<Node> root_;
  std::size_t nodes_ = 0;
  int documents_ = 0;
};

// "file is 18.1 MiB; job spec files are limited to 1.00 MiB": sizes people
// read at a glance (a byte count of 19 digits is not).
std::string too_large(std::size_t size, std::size_t limit, bool at_least) {
  std::string is = Bytes(static_cast<std::int64_t>(size)).to_string();
  const std::string most = Bytes(static_cast<std::int64_t>(limit)).to_string();
  if (is == most) is += " (" + std::to_string(size) + " bytes)";  // just over: rounding would hide it
  return std::string("file is ") + (at_least ? "over " : "") + is + "; job spec files are limited to " + most;
}

}  // namespace

std::optional<Node> parse_yaml(std::string_view text, std::string_view file_name, Diagnostics& diags,
                               const YamlLimits& limits) {
  const std::string file(file_name);
  if (text.size() > limits.max_bytes) {
    diags.error({file, 0, 0}, "", too_large(text.size(), limits.max_bytes, false));
    return std::nullopt;
  }
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // UTF-8 byte order mark
  if (auto bad = find_invalid_utf8(text)) {
    diags.error(location_of_offset(text, *bad, file), "",
                text[*bad] == '\0' ? "file contains a NUL byte; expected UTF-8 text"
                                   : "file is not valid UTF-8 (invalid byte sequence here)");
    return std::nullopt;
  }
  // Far deeper than the limit: refused before yaml-cpp scans it (the
  // event handler words the ordinary case, with the key path).
  if (auto deep = too_deep_flow(text, 4 * limits.max_depth)) {
    diags.error(location_of_offset(text, *deep, file), "",
                "nesting deeper than " + std::to_string(limits.max_depth) + " levels");
    return std::nullopt;
  }
  const std::size_t errors_before = diags.error_count();
  TreeBuilder builder(file, diags, limits);
  try {
    std::istringstream in{std::string(text)};
    YAML::Parser parser(in);
    while (parser.HandleNextDocument(builder)) {
    }
  } catch (const StopParsing&) {
    return std::nullopt;
  } catch (const YAML::Exception& e) {
    // DeepRecursion and malformed input both land here with a mark.
    SourceLocation where{file, e.mark.line + 1, e.mark.column + 1};
    if (e.mark.is_null()) where = {file, 0, 0};
    diags.error(where, "", "malformed YAML: " + e.msg);
    return std::nullopt;
  } catch (const std::exception& e) {
    diags.error({file, 0, 0}, "", std::string("could not parse YAML: ") + e.what());
    return std::nullopt;
  }
  if (diags.error_count() > errors_before) return std::nullopt;
  std::optional<Node> root = builder.take_root();
  if (!root) {
    Node empty;
    empty.location = {file, 1, 1};
    return empty;
  }
  return root;
}

std::optional<Node> load_yaml_file(const std::string& path, Diagnostics& diags, const SourceLocation& referenced_from,
                                   const std::string& key_path, const YamlLimits& limits) {
  SourceLocation where = referenced_from;
  if (where.file.empty()) where.file = path;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    diags.error(where, key_path, "cannot open " + quote(path) + ": " + std::strerror(errno));
    return std::nullopt;
  }
  // Read at most one byte past the limit: enough to know it is too large.
  std::string text(limits.max_bytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (in.bad()) {
    diags.error(where, key_path, "cannot read " + quote(path));
    return std::nullopt;
  }
  if (text.size() > limits.max_bytes) {
    // Only max_bytes + 1 were read: the size to report is the file's.
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    diags.error({path, 0, 0}, "", ec ? too_large(text.size(), limits.max_bytes, true)
                                     : too_large(static_cast<std::size_t>(size), limits.max_bytes, false));
    return std::nullopt;
  }
  return parse_yaml(text, path, diags, limits);
}

// ---- emitter ---------------------------------------------------------------

namespace {

bool needs_quotes(const Node& n) {
  const std::string& s = n.scalar;
  if (s.empty()) return true;
  if (!n.plain) {
    // A quoted scalar that YAML would read as another type keeps its quotes.
    static const char* kSpecial[] = {"true", "false", "yes", "no", "on", "off", "null", "~", "auto"};
    for (const char* k : kSpecial) {
      if (to_lower(s) == k) return true;
    }
    char* end = nullptr;
    std::strtod(s.c_str(), &end);
    if (end && *end == '\0') return true;
  }
  if (s.front() == ' ' || s.back() == ' ') return true;
  static const std::string_view kIndicators = "-?:,[]{}#&*!|>'\"%@`";
  if (kIndicators.find(s.front()) != std::string_view::npos) return true;
  for (char c : s) {
    if (c == '\n' || c == '\t' || static_cast<unsigned char>(c) < 0x20) return true;
  }
  return s.find(": ") != std::string::npos || s.find(" #") != std::string::npos;
}

// YAML double-quoted scalars accept JSON's escapes.
std::string quote_yaml(const std::string& s) { return json_escape(s); }

std::string scalar_text(const Node& n) {
  if (n.is_null()) return "null";
  return needs_quotes(n) ? quote_yaml(n.scalar) : n.scalar;
}

bool is_inline(const Node& n) {
  if (n.is_scalar() || n.is_null()) return true;
  if (n.is_map()) return n.entries.empty();
  if (n.items.empty()) return true;
  for (const Node& i : n.items) {
    if (!i.is_scalar()) return false;
  }
  return true;
}

std::string inline_text(const Node& n) {
  if (n.is_map()) return "{}";
  if (n.is_sequence()) {
    std::string out = "[";
    for (std::size_t i = 0; i < n.items.size(); ++i) {
      if (i) out += ", ";
      out += scalar_text(n.items[i]);
    }
    return out + "]";
  }
  return scalar_text(n);
}

void emit(const Node& n, int indent, std::string& out) {
  const std::string pad(static_cast<std::size_t>(indent), ' ');
  if (n.is_map()) {
    for (const MapEntry& e : n.entries) {
      out += pad + (needs_quotes(Node::make_scalar(e.key)) ? quote_yaml(e.key) : e.key) + ":";
      if (is_inline(e.value)) {
        out += " " + inline_text(e.value) + "\n";
      } else {
        out += "\n";
        emit(e.value, indent + 2, out);
      }
    }
  } else if (n.is_sequence()) {
    for (const Node& item : n.items) {
      if (is_inline(item)) {
        out += pad + "- " + inline_text(item) + "\n";
      } else {
        std::string nested;
        emit(item, indent + 2, nested);
        // Put the first line of the nested block on the dash line.
        out += pad + "- " + nested.substr(static_cast<std::size_t>(indent) + 2);
      }
    }
  } else {
    out += pad + inline_text(n) + "\n";
  }
}

}  // namespace

std::string emit_yaml(const Node& node) {
  std::string out;
  emit(node, 0, out);
  return out;
}

}  // namespace tailor::dsl

#include <nlohmann/json.hpp>

namespace tailor::dsl {
namespace {

nlohmann::ordered_json to_json(const Node& n) {
  switch (n.kind) {
    case Node::Kind::kNull: return nullptr;
    case Node::Kind::kScalar: {
      if (!n.plain) return n.scalar;
      if (n.scalar == "true") return true;
      if (n.scalar == "false") return false;
      if (n.scalar == "null" || n.scalar == "~") return nullptr;
      char* end = nullptr;
      const long long i = std::strtoll(n.scalar.c_str(), &end, 10);
      if (!n.scalar.empty() && *end == '\0') return i;
      const double d = std::strtod(n.scalar.c_str(), &end);
      if (!n.scalar.empty() && *end == '\0' && std::isfinite(d)) return d;
      return n.scalar;
    }
    case Node::Kind::kSequence: {
      auto a = nlohmann::ordered_json::array();
      for (const Node& i : n.items) a.push_back(to_json(i));
      return a;
    }
    case Node::Kind::kMap: {
      auto o = nlohmann::ordered_json::object();
      for (const MapEntry& e : n.entries) o[e.key] = to_json(e.value);
      return o;
    }
  }
  return nullptr;
}

}  // namespace

std::string emit_json(const Node& node, int indent) { return to_json(node).dump(indent); }

}  // namespace tailor::dsl
