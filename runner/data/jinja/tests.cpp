// jinja2's tests (tests.py): what "x is name" checks.
#include <algorithm>
#include <array>

#include "runner/data/jinja/builtins.h"
#include "runner/data/jinja/text.h"

namespace tailor::jinja {
namespace {

const std::array<std::string_view, 38> kTests = {
    "defined",  "undefined", "none",     "boolean", "false",    "true",  "integer", "float",
    "number",   "string",    "mapping",  "iterable", "sequence", "callable", "sameas", "escaped",
    "in",       "eq",        "equalto",  "==",      "ne",       "!=",    "lt",      "lessthan",
    "<",        "le",        "<=",       "gt",      "greaterthan", ">",  "ge",      ">=",
    "even",     "odd",       "divisibleby", "lower", "upper",   "filter"};

}  // namespace

bool is_known_test(std::string_view name) { return std::find(kTests.begin(), kTests.end(), name) != kTests.end(); }

bool apply_test(const std::string& name, const Value& v, CallArgs& args) {
  const Value other = arg_at(args, 0, "", Value());
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict() && !v.as_dict()->is_namespace;
  if (name == "iterable") return v.is_list() || v.is_string() || (v.is_dict() && !v.as_dict()->is_namespace) || v.is_undefined();
  if (name == "sequence") return v.is_list() || v.is_string() || (v.is_dict() && !v.as_dict()->is_namespace) || v.is_undefined();
  if (name == "callable") return v.is_function();
  if (name == "escaped") return false;
  if (name == "sameas") {
    if (v.is_none() || v.is_bool() || other.is_none() || other.is_bool()) return py_equal(v, other) && type_name(v) == type_name(other);
    // CPython shares the objects of small ints, so "is" holds for them.
    if (v.is_int() && other.is_int()) return v.as_int() == other.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    if (v.is_list() && other.is_list()) return v.as_list() == other.as_list();
    if (v.is_dict() && other.is_dict()) return v.as_dict() == other.as_dict();
    return false;
  }
  if (name == "in") return contains(other, v);
  if (name == "eq" || name == "equalto" || name == "==") return py_equal(v, other);
  if (name == "ne" || name == "!=") return !py_equal(v, other);
  if (v.is_undefined()) fail_undefined(v);
  if (name == "lt" || name == "lessthan" || name == "<") return py_less(v, other);
  if (name == "le" || name == "<=") return !py_less(other, v);
  if (name == "gt" || name == "greaterthan" || name == ">") return py_less(other, v);
  if (name == "ge" || name == ">=") return !py_less(v, other);
  if (name == "even" || name == "odd" || name == "divisibleby") {
    if (!v.is_int() && !v.is_bool()) fail("unsupported operand type(s) for %: '" + type_name(v) + "' and 'int'");
    const std::int64_t x = v.is_bool() ? v.as_bool() : v.as_int();
    if (name == "even") return x % 2 == 0;
    if (name == "odd") return x % 2 != 0;
    const std::int64_t d = to_index_int(other, "divisibleby");
    if (d == 0) fail("integer division or modulo by zero");
    return ((x % d) + d) % d == 0;
  }
  if (name == "lower" || name == "upper") {
    const std::string s = to_str(v);
    return name == "lower" ? py_lower(s) == s : py_upper(s) == s;
  }
  if (name == "filter") return v.is_string() && is_known_filter(v.as_string());
  fail("unknown test '" + name + "'");
}
}  // namespace tailor::jinja
