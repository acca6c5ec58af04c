// Field tables: one declarative row per spec key that reads it from the
// tree (with type and range checks), writes it back (for --resolved) and
// describes it in JSON Schema (for `tailor schema`). Because the three come
// from one row they cannot drift apart.
// Internal to tailor_dsl: included by its .cpp files only.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/text.h"
#include "core/units.h"
#include "dsl/diagnostics.h"
#include "dsl/yaml_tree.h"

namespace tailor::dsl::fields {

using Json = nlohmann::ordered_json;

std::string join_path(const std::string& parent, const std::string& key);

// What a key of another trainer (TRL's and transformers' arguments) is
// called here, for its unknown-key error ("TRL's rpo_alpha is ..."), or
// empty: a spelling's nearest key can mislead (rpo_alpha is not
// cpo_alpha).
std::string foreign_key_hint(const std::string& path);

// ---- scalar parsing --------------------------------------------------------

// Each returns nullopt after reporting a diagnostic at `n`.
std::optional<std::int64_t> read_int(const Node& n, const std::string& path, Diagnostics& d);
std::optional<double> read_number(const Node& n, const std::string& path, Diagnostics& d);
std::optional<bool> read_bool(const Node& n, const std::string& path, Diagnostics& d);
std::optional<std::string> read_string(const Node& n, const std::string& path, Diagnostics& d);
std::optional<Bytes> read_bytes(const Node& n, const std::string& path, Diagnostics& d);
std::optional<double> read_fraction(const Node& n, const std::string& path, Diagnostics& d);
bool is_auto(const Node& n);

std::string format_number(double v);

// ---- codecs: how one C++ type is read, written and described --------------

template <class T>
struct Codec;

template <>
struct Codec<std::int64_t> {
  static std::optional<std::int64_t> read(const Node& n, const std::string& p, Diagnostics& d) { return read_int(n, p, d); }
  static Node write(std::int64_t v) { return Node::make_scalar(std::to_string(v)); }
  static Json schema() { return {{"type", Json::array({"integer", "string"})}, {"pattern", "^[0-9.]+[kKMBT]?$"}}; }
};

template <>
struct Codec<double> {
  static std::optional<double> read(const Node& n, const std::string& p, Diagnostics& d) { return read_number(n, p, d); }
  static Node write(double v) { return Node::make_scalar(format_number(v)); }
  static Json schema() { return {{"type", "number"}}; }
};

template <>
struct Codec<bool> {
  static std::optional<bool> read(const Node& n, const std::string& p, Diagnostics& d) { return read_bool(n, p, d); }
  static Node write(bool v) { return Node::make_scalar(v ? "true" : "false"); }
  static Json schema() { return {{"type", "boolean"}}; }
};

template <>
struct Codec<std::string> {
  static std::optional<std::string> read(const Node& n, const std::string& p, Diagnostics& d) {
    return read_string(n, p, d);
  }
  static Node write(const std::string& v) { return Node::make_scalar(v, {}, false); }
  static Json schema() { return {{"type", "string"}}; }
};

template <>
struct Codec<Bytes> {
  static std::optional<Bytes> read(const Node& n, const std::string& p, Diagnostics& d) { return read_bytes(n, p, d); }
  static Node write(Bytes v);
  static Json schema() {
    return {{"type", Json::array({"string", "integer"})},
            {"pattern", "^[0-9.]+ ?([KMGT]i?B|B)?$"},
            {"examples", Json::array({"24GiB", "80GB", "512MiB"})}};
  }
};

// A fraction written as "10%" or 0.1.
struct Fraction {
  double value = 0;
};

template <>
struct Codec<Fraction> {
  static std::optional<Fraction> read(const Node& n, const std::string& p, Diagnostics& d) {
    auto f = read_fraction(n, p, d);
    return f ? std::optional<Fraction>(Fraction{*f}) : std::nullopt;
  }
  static Node write(Fraction v) { return Node::make_scalar(format_number(v.value * 100) + "%"); }
  static Json schema() { return {{"type", Json::array({"string", "number"})}, {"examples", Json::array({"10%", 0.1})}}; }
};

// Enumerations: a table of (value, name) pairs.
template <class E>
struct EnumNames;  // specialised with: static const std::vector<std::pair<E, const char*>>& names();

template <class E>
std::vector<std::string> enum_name_list() {
  std::vector<std::string> out;
  for (const auto& [v, name] : EnumNames<E>::names()) out.emplace_back(name);
  return out;
}

void report_bad_choice(const Node& n, const std::string& path, const std::vector<std::string>& choices,
                       Diagnostics& d);

template <class E>
  requires std::is_enum_v<E>
struct Codec<E> {
  static std::optional<E> read(const Node& n, const std::string& p, Diagnostics& d) {
    if (n.is_scalar()) {
      for (const auto& [v, name] : EnumNames<E>::names()) {
        if (n.scalar == name) return v;
      }
    }
    report_bad_choice(n, p, enum_name_list<E>(), d);
    return std::nullopt;
  }
  static Node write(E v) {
    for (const auto& [e, name] : EnumNames<E>::names()) {
      if (e == v) return Node::make_scalar(name);
    }
    return Node::make_scalar("?");
  }
  static Json schema() { return {{"type", "string"}, {"enum", enum_name_list<E>()}}; }
};

template <class T>
struct Codec<std::vector<T>> {
  static std::optional<std::vector<T>> read(const Node& n, const std::string& p, Diagnostics& d) {
    std::vector<T> out;
    if (n.is_scalar() && !n.scalar.empty()) {  // a single item is a one-item list
      auto v = Codec<T>::read(n, p, d);
      if (!v) return std::nullopt;
      out.push_back(std::move(*v));
      return out;
    }
    if (!n.is_sequence()) {
      d.error(n.location, p, "expected a list, got " + std::string(n.kind_name()));
      return std::nullopt;
    }
    bool ok = true;
    for (std::size_t i = 0; i < n.items.size(); ++i) {
      auto v = Codec<T>::read(n.items[i], p + "[" + std::to_string(i) + "]", d);
      if (v) {
        out.push_back(std::move(*v));
      } else {
        ok = false;
      }
    }
    if (!ok) return std::nullopt;
    return out;
  }
  static Node write(const std::vector<T>& v) {
    Node n = Node::make_sequence();
    for (const T& item : v) n.items.push_back(Codec<T>::write(item));
    return n;
  }
  static Json schema() { return {{"type", "array"}, {"items", Codec<T>::schema()}}; }
};

template <>
struct Codec<std::map<std::string, std::string>> {
  static std::optional<std::map<std::string, std::string>> read(const Node& n, const std::string& p,
                                                                Diagnostics& d);
  static Node write(const std::map<std::string, std::string>& v);
  static Json schema() { return {{"type", "object"}, {"additionalProperties", {{"type", "string"}}}}; }
};

// ---- checks ----------------------------------------------------------------

// A check returns an error message for a bad value, or nullopt.
template <class T>
using Check = std::function<std::optional<std::string>(const T&)>;

Check<std::int64_t> int_at_least(std::int64_t lo);
Check<std::int64_t> int_in_range(std::int64_t lo, std::int64_t hi);
// 1..hi, worded as int_at_least(1) below and as a maximum above.
Check<std::int64_t> positive_int_at_most(std::int64_t hi);
Check<double> number_above(double lo);
Check<double> number_at_least(double lo);
Check<double> number_in_range(double lo, double hi, bool hi_inclusive);
Check<Bytes> bytes_positive();
Check<std::string> string_not_empty();

template <class T>
void add_bounds(Json& schema, const Check<T>&) {}  // ranges are documented in the description

// ---- fields ----------------------------------------------------------------

template <class S>
struct Field {
  std::string key;
  std::string doc;
  bool required = false;
  std::function<Json()> schema;
  // Reads `n` into `s`; reports problems to `d`.
  std::function<void(const Node& n, S& s, const std::string& path, Diagnostics& d)> read;
  // The value to print in the resolved spec; nullopt to omit it.
  std::function<std::optional<Node>(const S& s)> write;
};

template <class T>
bool run_check(const Check<T>& check, const T& v, const Node& n, const std::string& path, Diagnostics& d) {
  if (!check) return true;
  if (auto msg = check(v)) {
    d.error(n.location, path, *msg);
    return false;
  }
  return true;
}

inline Json with_doc(Json schema, const std::string& doc) {
  schema["description"] = doc;
  return schema;
}

// A plain field: absent or null keeps the default.
template <class S, class T>
Field<S> field(std::string key, std::string doc, T S::*member, Check<T> check = {}, bool required = false) {
  Field<S> f;
  f.key = key;
  f.doc = doc;
  f.required = required;
  f.schema = [doc] { return with_doc(Codec<T>::schema(), doc); };
  f.read = [member, check](const Node& n, S& s, const std::string& path, Diagnostics& d) {
    if (n.is_null()) return;
    if (auto v = Codec<T>::read(n, path, d)) {
      if (run_check(check, *v, n, path, d)) s.*member = std::move(*v);
    }
  };
  f.write = [member](const S& s) -> std::optional<Node> {
    if constexpr (std::is_same_v<T, std::string>) {
      if ((s.*member).empty()) return std::nullopt;  // unset optional text
    }
    return Codec<T>::write(s.*member);
  };
  return f;
}

// An optional field whose empty state means "not set" (absent or null).
template <class S, class T>
Field<S> optional_field(std::string key, std::string doc, std::optional<T> S::*member, Check<T> check = {}) {
  Field<S> f;
  f.key = key;
  f.doc = doc;
  f.schema = [doc] { return with_doc(Codec<T>::schema(), doc); };
  f.read = [member, check](const Node& n, S& s, const std::string& path, Diagnostics& d) {
    if (n.is_null()) {
      (s.*member).reset();
      return;
    }
    if (auto v = Codec<T>::read(n, path, d)) {
      if (run_check(check, *v, n, path, d)) s.*member = std::move(*v);
    }
  };
  f.write = [member](const S& s) -> std::optional<Node> {
    if (!(s.*member)) return std::nullopt;
    return Codec<T>::write(*(s.*member));
  };
  return f;
}

// A strategy knob: "auto" (or absent) leaves the choice to the planner.
template <class S, class T>
Field<S> auto_field(std::string key, std::string doc, std::optional<T> S::*member, Check<T> check = {}) {
  Field<S> f;
  f.key = key;
  f.doc = doc;
  f.schema = [doc] {
    return Json{{"description", doc}, {"anyOf", Json::array({Codec<T>::schema(), Json{{"const", "auto"}}})}};
  };
  f.read = [member, check](const Node& n, S& s, const std::string& path, Diagnostics& d) {
    if (n.is_null() || is_auto(n)) {
      (s.*member).reset();
      return;
    }
    if (auto v = Codec<T>::read(n, path, d)) {
      if (run_check(check, *v, n, path, d)) s.*member = std::move(*v);
    }
  };
  f.write = [member](const S& s) -> std::optional<Node> {
    if (!(s.*member)) return Node::make_scalar("auto");
    return Codec<T>::write(*(s.*member));
  };
  return f;
}

template <class S>
Field<S> custom_field(std::string key, std::string doc, Json schema,
                      std::function<void(const Node&, S&, const std::string&, Diagnostics&)> read,
                      std::function<std::optional<Node>(const S&)> write) {
  Field<S> f;
  f.key = key;
  f.doc = doc;
  f.schema = [schema, doc] { return with_doc(schema, doc); };
  f.read = std::move(read);
  f.write = std::move(write);
  return f;
}

// Reads a map with the given fields: unknown keys are errors with a
// suggestion, required keys must be present.
template <class S>
void read_map(const Node& n, S& s, const std::vector<Field<S>>& table, const std::string& path, Diagnostics& d) {
  if (n.is_null()) {
    for (const Field<S>& f : table) {
      if (f.required) d.error(n.location, join_path(path, f.key), "missing required key");
    }
    return;
  }
  if (!n.is_map()) {
    d.error(n.location, path, "expected a map of keys, got " + std::string(n.kind_name()));
    return;
  }
  std::vector<std::string> keys;
  for (const Field<S>& f : table) keys.push_back(f.key);
  for (const MapEntry& e : n.entries) {
    const Field<S>* field = nullptr;
    for (const Field<S>& f : table) {
      if (f.key == e.key) field = &f;
    }
    const std::string p = join_path(path, e.key);
    if (field == nullptr) {
      std::string msg = "unknown key";
      const std::string foreign = foreign_key_hint(p);
      std::string hint = foreign.empty() ? closest_match(e.key, keys) : "";
      if (!foreign.empty()) msg += "; " + foreign;
      if (!hint.empty()) msg += "; did you mean '" + hint + "'?";
      d.error(e.key_location, p, msg);
      continue;
    }
    if (field->read) field->read(e.value, s, p, d);
  }
  for (const Field<S>& f : table) {
    if (f.required && n.find(f.key) == nullptr) {
      d.error(n.location, join_path(path, f.key), "missing required key");
    }
  }
}

template <class S>
Node write_map(const S& s, const std::vector<Field<S>>& table) {
  Node n = Node::make_map();
  for (const Field<S>& f : table) {
    if (!f.write) continue;
    if (auto v = f.write(s)) n.set(f.key, std::move(*v));
  }
  return n;
}

template <class S>
Json schema_of(const std::vector<Field<S>>& table, const std::string& doc) {
  Json props = Json::object();
  Json required = Json::array();
  for (const Field<S>& f : table) {
    props[f.key] = f.schema();
    if (f.required) required.push_back(f.key);
  }
  Json out{{"type", "object"}, {"description", doc}, {"additionalProperties", false}, {"properties", props}};
  if (!required.empty()) out["required"] = required;
  return out;
}

// A count whose 0 means "not given" (the family's default applies): 0 is
// not written, so a resolved spec reads back (0 is not a valid value).
template <class S, class T>
Field<S> zero_unset(Field<S> f, T S::*member) {
  f.write = [member, write = std::move(f.write)](const S& s) -> std::optional<Node> {
    if (s.*member == 0) return std::nullopt;
    return write(s);
  };
  return f;
}

// A nested section read with its own table.
template <class S, class Sub>
Field<S> section(std::string key, std::string doc, Sub S::*member, const std::vector<Field<Sub>>* table) {
  Field<S> f;
  f.key = key;
  f.doc = doc;
  f.schema = [table, doc] { return schema_of(*table, doc); };
  f.read = [member, table](const Node& n, S& s, const std::string& path, Diagnostics& d) {
    read_map(n, s.*member, *table, path, d);
  };
  f.write = [member, table](const S& s) -> std::optional<Node> { return write_map(s.*member, *table); };
  return f;
}

}  // namespace tailor::dsl::fields
