// What a template can call besides its own macros: jinja2's filters
// (filters.cpp) and tests (tests.cpp), attribute and item access with the
// sandbox's rules and the Python str/dict/list methods templates use
// (access.cpp), and the globals transformers installs (globals.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runner/data/jinja/value.h"

namespace tailor::jinja {

bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

// jinja2's environment.getattr / getitem under ImmutableSandboxedEnvironment:
// methods of str, dict and list come back bound; a missing attribute or key
// is an Undefined that names what was missing; using an Undefined raises.
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

Value apply_filter(const std::string& name, const Value& subject, CallArgs& args);
bool apply_test(const std::string& name, const Value& subject, CallArgs& args);

// markupsafe.escape of a plain string.
std::string html_escape(const std::string& s);

// Python's "in": needle in haystack.
bool contains(const Value& haystack, const Value& needle);

// range, dict, namespace, raise_exception, strftime_now, lipsum-free.
void install_globals(DictObj& globals);

// ---- shared by the builtins' files

// A template error at run time (no position: the interpreter adds it).
[[noreturn]] inline void fail(const std::string& msg) { throw TemplateError(msg); }
inline Value make_list(std::vector<Value> items) { return Value::list(std::move(items)); }

// The longest string a builtin builds (join, center...).
constexpr std::size_t kMaxStringBytes = std::size_t{64} << 20;

// Reads argument i (or keyword name) of a call; def when absent.
Value arg_at(const CallArgs& args, std::size_t index, const char* name, Value def);
// An int argument (a bool counts, as in Python); what names it in errors.
std::int64_t to_index_int(const Value& v, const char* what);
// A str argument of the Python function fn.
std::string as_str_arg(const Value& v, const char* fn);
// jinja2's do_items: a dict's (key, value) tuples; nothing for Undefined.
Value do_items(const Value& v);
// jinja2's make_attrgetter: a dotted path, digits as indices, each step a
// subscript ("a.0.b").
Value get_path(const Value& v, const Value& attribute);

}  // namespace tailor::jinja
