// A YAML document as a plain tree with a source position on every node and
// key. yaml-cpp stays behind this header: it is parsed through yaml-cpp's
// event interface, which lets the loader catch what yaml-cpp's Node API
// accepts silently (duplicate keys), bound depth and alias expansion (alias
// bombs), and reject non-UTF-8 input with a position.
// Supports one document per file and YAML merge keys (`<<: *anchor`).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dsl/diagnostics.h"

namespace tailor::dsl {

struct MapEntry;

struct Node {
  enum class Kind { kNull, kScalar, kSequence, kMap };

  Kind kind = Kind::kNull;
  SourceLocation location;
  std::string scalar;           // kScalar: the text as written (no type guessing)
  bool plain = true;            // kScalar: unquoted (so `true` is a bool, `"true"` a string)
  std::vector<Node> items;      // kSequence
  std::vector<MapEntry> entries;  // kMap, in document order, keys unique

  bool is_null() const { return kind == Kind::kNull; }
  bool is_scalar() const { return kind == Kind::kScalar; }
  bool is_sequence() const { return kind == Kind::kSequence; }
  bool is_map() const { return kind == Kind::kMap; }

  // Map lookup; nullptr when absent or when this is not a map.
  const Node* find(std::string_view key) const;
  Node* find(std::string_view key);
  const MapEntry* find_entry(std::string_view key) const;

  // Sets or replaces a map entry (this must be a map or null; null becomes a map).
  Node& set(std::string key, Node value, SourceLocation key_location = {});
  bool erase(std::string_view key);

  static Node make_scalar(std::string text, SourceLocation loc = {}, bool plain = true);
  static Node make_map(SourceLocation loc = {});
  static Node make_sequence(SourceLocation loc = {});

  // "a map", "a list", "a string", "null": for messages.
  std::string_view kind_name() const;
  // Number of nodes in this subtree (this one included).
  std::size_t size() const;
};

struct MapEntry {
  std::string key;
  SourceLocation key_location;
  Node value;
};

// Bounds that keep a hostile document from exhausting time or memory.
struct YamlLimits {
  std::size_t max_bytes = 1 << 20;   // 1 MiB per file
  int max_depth = 64;                // nested maps/lists
  std::size_t max_nodes = 100'000;   // nodes after alias expansion
  // Keys of one map: a spec's largest maps hold tens (labels at most 64,
  // catalogs a few hundred), and a bound keeps a hostile 45,000-key map
  // from being checked for duplicates and validated at all.
  std::size_t max_map_keys = 10'000;
};

// Parses `text` (named `file_name` in diagnostics) into a tree. On any
// error, reports it to `diags` and returns nullopt. Never throws.
// An empty document yields a null node.
std::optional<Node> parse_yaml(std::string_view text, std::string_view file_name, Diagnostics& diags,
                               const YamlLimits& limits = {});

// Reads and parses a file; a missing or unreadable file is a diagnostic at
// `referenced_from` (the key that named it), or without a position.
std::optional<Node> load_yaml_file(const std::string& path, Diagnostics& diags,
                                   const SourceLocation& referenced_from = {}, const std::string& key_path = {},
                                   const YamlLimits& limits = {});

// Writes a tree back as block-style YAML (scalars quoted where YAML would
// read them differently). Used for `tailor validate --resolved`.
std::string emit_yaml(const Node& node);

// Offset of the first invalid UTF-8 sequence, or nullopt when `text` is valid.
std::optional<std::size_t> find_invalid_utf8(std::string_view text);

}  // namespace tailor::dsl

namespace tailor::dsl {
// The tree as JSON: plain scalars that read as numbers, booleans or null
// become those JSON types; quoted scalars stay strings.
std::string emit_json(const Node& node, int indent = 2);
}  // namespace tailor::dsl
