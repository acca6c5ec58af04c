// The values a chat template computes with, modelled on the Python objects
// jinja2 hands a template: None, bool, int, float, str, list/tuple, dict,
// namespace, callables and jinja2's Undefined.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace tailor::jinja {

// Raised inside the engine and converted to a Status at its edge; never
// leaves the engine. line/col are 0 until the node that failed adds them.
class TemplateError : public std::exception {
 public:
  explicit TemplateError(std::string message, bool from_raise = false)
      : message_(std::move(message)), from_raise_(from_raise) {}
  const char* what() const noexcept override { return message_.c_str(); }
  const std::string& message() const { return message_; }
  bool from_raise() const { return from_raise_; }
  int line = 0;
  int col = 0;
  std::string construct;

 private:
  std::string message_;
  bool from_raise_;
};

class Value;

struct Undefined {
  // What using it says: "'foo' is undefined" or "'dict object' has no attribute 'x'".
  std::string hint;
};
struct None {};

// Containers know how deeply they nest, so that a template building
// [[[...]]] in a loop ends in an error rather than in recursion that
// exhausts the stack (printing, comparing or freeing it).
constexpr int kMaxValueNesting = 1000;

struct ListObj {
  std::vector<Value> items;
  bool is_tuple = false;
  int depth = 1;
};

struct DictObj {
  std::vector<std::pair<Value, Value>> items;
  bool is_namespace = false;
  int depth = 1;
  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  void set(const Value& key, Value value);
  // Adds a key known to be new (JSON objects have unique keys).
  void append(Value key, Value value);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Function {
  std::string name;
  std::function<Value(CallArgs&)> call;
};

using ListPtr = std::shared_ptr<ListObj>;
using DictPtr = std::shared_ptr<DictObj>;
using FunctionPtr = std::shared_ptr<Function>;

class Value {
 public:
  using Storage = std::variant<Undefined, None, bool, std::int64_t, double, std::string, ListPtr, DictPtr, FunctionPtr>;

  Value() : v_(Undefined{}) {}
  Value(Undefined u) : v_(std::move(u)) {}  // NOLINT: values convert freely, as in Python
  Value(None n) : v_(n) {}                  // NOLINT
  Value(bool b) : v_(b) {}                  // NOLINT
  Value(std::int64_t i) : v_(i) {}          // NOLINT
  Value(int i) : v_(static_cast<std::int64_t>(i)) {}  // NOLINT
  Value(double d) : v_(d) {}                // NOLINT
  Value(std::string s) : v_(std::move(s)) {}  // NOLINT
  Value(const char* s) : v_(std::string(s)) {}  // NOLINT
  Value(ListPtr l) : v_(std::move(l)) {}    // NOLINT
  Value(DictPtr d) : v_(std::move(d)) {}    // NOLINT
  Value(FunctionPtr f) : v_(std::move(f)) {}  // NOLINT

  static Value list(std::vector<Value> items = {}, bool tuple = false);
  // A markupsafe.Markup string: what |safe and |escape return. Adding a
  // plain string to it HTML-escapes that string, as Python does.
  static Value markup(std::string s);
  static Value dict();
  static Value function(std::string name, std::function<Value(CallArgs&)> fn);

  bool is_undefined() const { return std::holds_alternative<Undefined>(v_); }
  bool is_none() const { return std::holds_alternative<None>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_int() const { return std::holds_alternative<std::int64_t>(v_); }
  bool is_float() const { return std::holds_alternative<double>(v_); }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_markup() const { return markup_ && is_string(); }
  bool is_list() const { return std::holds_alternative<ListPtr>(v_); }
  bool is_dict() const { return std::holds_alternative<DictPtr>(v_); }
  bool is_function() const { return std::holds_alternative<FunctionPtr>(v_); }

  bool as_bool() const { return std::get<bool>(v_); }
  std::int64_t as_int() const { return std::get<std::int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  // int, bool or float as a double.
  double as_number() const;
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const ListPtr& as_list() const { return std::get<ListPtr>(v_); }
  const DictPtr& as_dict() const { return std::get<DictPtr>(v_); }
  const FunctionPtr& as_function() const { return std::get<FunctionPtr>(v_); }
  const Undefined& as_undefined() const { return std::get<Undefined>(v_); }

  const Storage& storage() const { return v_; }

 private:
  Storage v_;
  bool markup_ = false;
};

// Python's bool(x); an Undefined is false.
bool truthy(const Value& v);
// Python's str(x), with Undefined printing as "".
std::string to_str(const Value& v);
// Python's repr(x).
std::string repr(const Value& v);
// Python's type(x).__name__ as error messages name it.
std::string type_name(const Value& v);
// Python's ==.
bool py_equal(const Value& a, const Value& b);
// Python's <; throws TemplateError where Python raises TypeError.
bool py_less(const Value& a, const Value& b);
// The items a for loop sees: list items, dict keys, string characters.
std::vector<Value> iterate(const Value& v);
// Throws the error jinja2's Undefined raises when used.
[[noreturn]] void fail_undefined(const Value& v);

struct JsonOptions {
  bool ensure_ascii = false;
  bool sort_keys = false;
  bool has_indent = false;
  std::string indent;
  std::string item_separator;  // empty: Python's default for the indent
  std::string key_separator;
  bool has_separators = false;
};
// Python's json.dumps.
std::string to_json(const Value& v, const JsonOptions& options);

}  // namespace tailor::jinja
