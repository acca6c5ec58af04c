// Attribute and item access as jinja2's ImmutableSandboxedEnvironment does
// it, and the Python str, dict and list methods templates call.
#include <algorithm>
#include <limits>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "runner/data/jinja/builtins.h"
#include "runner/data/jinja/text.h"

namespace tailor::jinja {
namespace {

std::string object_desc(const Value& v) {
  if (v.is_none()) return "None";
  return type_name(v) + " object";
}

Value undefined_attr(const Value& obj, const std::string& name) {
  return Value(Undefined{"'" + object_desc(obj) + "' has no attribute '" + name + "'"});
}

// strip's optional characters, decoded into `buf`; null when not given.
const std::u32string* chars_arg(const std::string& name, CallArgs& args, std::u32string* buf) {
  const Value c = arg_at(args, 0, "chars", Value(None{}));
  if (c.is_none()) return nullptr;
  *buf = decode_utf8(as_str_arg(c, name.c_str()));
  return buf;
}

// Whether `self` is not empty and every code point satisfies `pred`.
template <typename Pred>
Value all_chars(const std::string& self, Pred pred) {
  const std::u32string u = decode_utf8(self);
  if (u.empty()) return Value(false);
  for (char32_t c : u) {
    if (!pred(c)) return Value(false);
  }
  return Value(true);
}

// One function a str method (or a family that differ by a comparison),
// given the string, the name it was called by and its arguments.
Value str_strip(const std::string& self, const std::string& name, CallArgs& args) {
  std::u32string buf;
  const std::u32string* chars = chars_arg(name, args, &buf);
  return Value(py_strip(self, name != "rstrip", name != "lstrip", chars));
}
Value str_split(const std::string& self, const std::string& name, CallArgs& args) {
  const Value sep = arg_at(args, 0, "sep", Value(None{}));
  const Value maxsplit = arg_at(args, 1, "maxsplit", Value(std::int64_t{-1}));
  std::string sep_s;
  const std::string* sep_p = nullptr;
  if (!sep.is_none()) {
    sep_s = as_str_arg(sep, name.c_str());
    if (sep_s.empty()) fail("empty separator");
    sep_p = &sep_s;
  }
  const auto parts = name == "split" ? py_split(self, sep_p, to_index_int(maxsplit, "maxsplit"))
                                     : py_rsplit(self, sep_p, to_index_int(maxsplit, "maxsplit"));
  std::vector<Value> out(parts.begin(), parts.end());
  return make_list(std::move(out));
}
Value str_splitlines(const std::string& self, const std::string& /*name*/, CallArgs& args) {
  const auto parts = py_splitlines(self, truthy(arg_at(args, 0, "keepends", Value(false))));
  return make_list(std::vector<Value>(parts.begin(), parts.end()));
}
Value str_startswith(const std::string& self, const std::string& name, CallArgs& args) {
  const Value p = arg_at(args, 0, "prefix", Value());
  std::vector<std::string> cands;
  if (p.is_list() && p.as_list()->is_tuple) {
    for (const auto& x : p.as_list()->items)
      cands.push_back(as_str_arg(x, name.c_str()));
  } else {
    cands.push_back(as_str_arg(p, name.c_str()));
  }
  for (const auto& c : cands) {
    if (name == "startswith" ? self.compare(0, c.size(), c) == 0 && self.size() >= c.size()
                             : self.size() >= c.size() && self.compare(self.size() - c.size(), c.size(), c) == 0) {
      return Value(true);
    }
  }
  return Value(false);
}
Value str_replace(const std::string& self, const std::string& /*name*/, CallArgs& args) {
  return Value(py_replace(self, as_str_arg(arg_at(args, 0, "old", Value()), "replace"),
                          as_str_arg(arg_at(args, 1, "new", Value()), "replace"),
                          to_index_int(arg_at(args, 2, "count", Value(std::int64_t{-1})), "count")));
}
Value str_upper(const std::string& self, const std::string& /*name*/, CallArgs& /*args*/) {
  return Value(py_upper(self));
}
Value str_lower(const std::string& self, const std::string& /*name*/, CallArgs& /*args*/) {
  return Value(py_lower(self));
}
Value str_title(const std::string& self, const std::string& /*name*/, CallArgs& /*args*/) {
  return Value(py_title(self));
}
Value str_capitalize(const std::string& self, const std::string& /*name*/, CallArgs& /*args*/) {
  return Value(py_capitalize(self));
}
Value str_swapcase(const std::string& self, const std::string& /*name*/, CallArgs& /*args*/) {
  std::string out;
  for (char32_t c : decode_utf8(self))
    append_utf8(out, to_upper(c) != c ? to_upper(c) : to_lower(c));
  return Value(out);
}
Value str_find(const std::string& self, const std::string& name, CallArgs& args) {
  const std::string sub = as_str_arg(arg_at(args, 0, "sub", Value()), name.c_str());
  const std::size_t p = (name == "find" || name == "index") ? self.find(sub) : self.rfind(sub);
  if (p == std::string::npos) {
    if (name == "index" || name == "rindex") fail("substring not found");
    return Value(std::int64_t{-1});
  }
  return Value(static_cast<std::int64_t>(count_code_points(std::string_view(self).substr(0, p))));
}
Value str_count(const std::string& self, const std::string& /*name*/, CallArgs& args) {
  const std::string sub = as_str_arg(arg_at(args, 0, "sub", Value()), "count");
  if (sub.empty()) return Value(static_cast<std::int64_t>(count_code_points(self) + 1));
  std::int64_t n = 0;
  for (std::size_t p = self.find(sub); p != std::string::npos; p = self.find(sub, p + sub.size()))
    ++n;
  return Value(n);
}
Value str_join(const std::string& self, const std::string& /*name*/, CallArgs& args) {
  std::string out;
  bool first = true;
  for (const Value& v : iterate(arg_at(args, 0, "iterable", Value()))) {
    if (!first) out += self;
    first = false;
    if (!v.is_string()) fail("sequence item: expected str instance, " + type_name(v) + " found");
    out += v.as_string();
  }
  return Value(out);
}
Value str_isdigit(const std::string& self, const std::string& /*name*/, CallArgs& /*args*/) {
  return all_chars(self, is_digit);
}
Value str_isalpha(const std::string& self, const std::string& /*name*/, CallArgs& /*args*/) {
  return all_chars(self, is_alpha);
}
Value str_isalnum(const std::string& self, const std::string& /*name*/, CallArgs& /*args*/) {
  return all_chars(self, [](char32_t c) { return is_alpha(c) || is_digit(c); });
}
Value str_isspace(const std::string& self, const std::string& /*name*/, CallArgs& /*args*/) {
  return all_chars(self, is_py_space);
}
Value str_islower(const std::string& self, const std::string& name, CallArgs& /*args*/) {
  bool cased = false;
  for (char32_t c : decode_utf8(self)) {
    if (to_upper(c) == c && to_lower(c) == c) continue;
    cased = true;
    if (name == "islower" ? to_lower(c) != c : to_upper(c) != c) return Value(false);
  }
  return Value(cased);
}
Value str_removeprefix(const std::string& self, const std::string& name, CallArgs& args) {
  const std::string a = as_str_arg(arg_at(args, 0, "prefix", Value()), name.c_str());
  if (name == "removeprefix" && self.compare(0, a.size(), a) == 0 && self.size() >= a.size())
    return Value(self.substr(a.size()));
  if (name == "removesuffix" && self.size() >= a.size() && !a.empty() &&
      self.compare(self.size() - a.size(), a.size(), a) == 0) {
    return Value(self.substr(0, self.size() - a.size()));
  }
  return Value(self);
}
Value str_partition(const std::string& self, const std::string& name, CallArgs& args) {
  const std::string sep = as_str_arg(arg_at(args, 0, "sep", Value()), name.c_str());
  if (sep.empty()) fail("empty separator");
  const std::size_t p = name == "partition" ? self.find(sep) : self.rfind(sep);
  if (p == std::string::npos) {
    if (name == "partition") return Value::list({Value(self), Value(""), Value("")}, true);
    return Value::list({Value(""), Value(""), Value(self)}, true);
  }
  return Value::list({Value(self.substr(0, p)), Value(sep), Value(self.substr(p + sep.size()))}, true);
}
Value str_center(const std::string& self, const std::string& name, CallArgs& args) {
  const std::int64_t width = to_index_int(arg_at(args, 0, "width", Value()), "width");
  std::string fill = name == "zfill" ? "0" : as_str_arg(arg_at(args, 1, "fillchar", Value(" ")), name.c_str());
  const auto len = static_cast<std::int64_t>(count_code_points(self));
  if (width <= len) return Value(self);
  if (width > static_cast<std::int64_t>(kMaxStringBytes)) fail("string too long");
  const std::int64_t pad = width - len;
  auto rep = [&](std::int64_t n) {
    std::string s;
    for (std::int64_t i = 0; i < n; ++i)
      s += fill;
    return s;
  };
  if (name == "ljust") return Value(self + rep(pad));
  if (name == "rjust") return Value(rep(pad) + self);
  if (name == "zfill") {
    if (!self.empty() && (self[0] == '-' || self[0] == '+'))
      return Value(self.substr(0, 1) + rep(pad) + self.substr(1));
    return Value(rep(pad) + self);
  }
  const std::int64_t left = pad / 2 + (pad & width & 1);
  return Value(rep(left) + self + rep(pad - left));
}
Value str_format(const std::string& self, const std::string& /*name*/, CallArgs& args) {
  // Auto-numbered and named fields without format specs: what templates use.
  std::string out;
  std::size_t next_index = 0;
  for (std::size_t i = 0; i < self.size(); ++i) {
    const char c = self[i];
    if (c == '{' && i + 1 < self.size() && self[i + 1] == '{') {
      out.push_back('{');
      ++i;
    } else if (c == '}' && i + 1 < self.size() && self[i + 1] == '}') {
      out.push_back('}');
      ++i;
    } else if (c == '{') {
      const std::size_t close = self.find('}', i);
      if (close == std::string::npos) fail("Single '{' encountered in format string");
      const std::string field = self.substr(i + 1, close - i - 1);
      Value v;
      if (field.empty()) {
        v = arg_at(args, next_index++, "", Value());
      } else if (std::all_of(field.begin(), field.end(),
                             [](char d) { return std::isdigit(static_cast<unsigned char>(d)); })) {
        v = arg_at(args, static_cast<std::size_t>(std::stoul(field)), "", Value());
      } else {
        v = arg_at(args, std::numeric_limits<std::size_t>::max(), field.c_str(), Value());
      }
      if (v.is_undefined()) fail("format: no value for field '" + field + "'");
      out += to_str(v);
      i = close;
    } else {
      out.push_back(c);
    }
  }
  return Value(out);
}

using StrMethod = Value (*)(const std::string& self, const std::string& name, CallArgs& args);

const std::unordered_map<std::string_view, StrMethod>& str_methods() {
  static const std::unordered_map<std::string_view, StrMethod> k = {{"capitalize", str_capitalize},
                                                                    {"casefold", str_lower},
                                                                    {"center", str_center},
                                                                    {"count", str_count},
                                                                    {"endswith", str_startswith},
                                                                    {"find", str_find},
                                                                    {"format", str_format},
                                                                    {"index", str_find},
                                                                    {"isalnum", str_isalnum},
                                                                    {"isalpha", str_isalpha},
                                                                    {"isdecimal", str_isdigit},
                                                                    {"isdigit", str_isdigit},
                                                                    {"islower", str_islower},
                                                                    {"isnumeric", str_isdigit},
                                                                    {"isspace", str_isspace},
                                                                    {"isupper", str_islower},
                                                                    {"join", str_join},
                                                                    {"ljust", str_center},
                                                                    {"lower", str_lower},
                                                                    {"lstrip", str_strip},
                                                                    {"partition", str_partition},
                                                                    {"removeprefix", str_removeprefix},
                                                                    {"removesuffix", str_removeprefix},
                                                                    {"replace", str_replace},
                                                                    {"rfind", str_find},
                                                                    {"rindex", str_find},
                                                                    {"rjust", str_center},
                                                                    {"rpartition", str_partition},
                                                                    {"rsplit", str_split},
                                                                    {"rstrip", str_strip},
                                                                    {"split", str_split},
                                                                    {"splitlines", str_splitlines},
                                                                    {"startswith", str_startswith},
                                                                    {"strip", str_strip},
                                                                    {"swapcase", str_swapcase},
                                                                    {"title", str_title},
                                                                    {"upper", str_upper},
                                                                    {"zfill", str_center}};
  return k;
}

Value str_method_plain(const std::string& self, const std::string& name, CallArgs& args) {
  const auto& methods = str_methods();
  const auto it = methods.find(name);
  if (it == methods.end()) fail("'str' object has no attribute '" + name + "'");
  return it->second(self, name, args);
}

// Markup's wrapped methods return Markup again.
Value str_method(const Value& self_value, const std::string& name, CallArgs& args) {
  Value r = str_method_plain(self_value.as_string(), name, args);
  static const char* const kWrapped[] = {"strip", "lstrip", "rstrip", "upper", "lower", "capitalize", "title",
                                         "replace", "center", "ljust", "rjust", "zfill", "swapcase"};
  if (self_value.is_markup() && r.is_string()) {
    for (const char* w : kWrapped) {
      if (name == w) return Value::markup(r.as_string());
    }
  }
  return r;
}

bool is_str_method(const std::string& name) { return str_methods().count(name) != 0; }

Value bound(const std::string& name, std::function<Value(CallArgs&)> fn) { return Value::function(name, std::move(fn)); }

Value unsafe_attr(const Value& obj, const std::string& name) {
  return Value(Undefined{"access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe."});
}
Value dict_method(const Value& self, const std::string& name) {
  const DictPtr d = self.as_dict();
  if (name == "items") return bound(name, [self](CallArgs&) { return do_items(self); });
  if (name == "keys") return bound(name, [self](CallArgs&) { return make_list(iterate(self)); });
  if (name == "values") {
    return bound(name, [d](CallArgs&) {
      std::vector<Value> out;
      for (const auto& kv : d->items) out.push_back(kv.second);
      return make_list(std::move(out));
    });
  }
  if (name == "get") {
    return bound(name, [d](CallArgs& a) {
      const Value* v = d->find(arg_at(a, 0, "key", Value()));
      return v != nullptr ? *v : arg_at(a, 1, "default", Value(None{}));
    });
  }
  if (name == "copy") {
    return bound(name, [d](CallArgs&) {
      auto c = std::make_shared<DictObj>(*d);
      return Value(c);
    });
  }
  if (name == "pop" || name == "popitem" || name == "setdefault" || name == "update" || name == "clear") {
    return unsafe_attr(self, name);
  }
  return Value();
}

Value list_method(const Value& self, const std::string& name) {
  const ListPtr l = self.as_list();
  if (name == "index" || name == "count") {
    return bound(name, [l, name](CallArgs& a) {
      const Value x = arg_at(a, 0, "value", Value());
      std::int64_t n = 0;
      for (std::size_t i = 0; i < l->items.size(); ++i) {
        if (py_equal(l->items[i], x)) {
          if (name == "index") return Value(static_cast<std::int64_t>(i));
          ++n;
        }
      }
      if (name == "index") fail(repr(x) + " is not in list");
      return Value(n);
    });
  }
  if (name == "copy" && !l->is_tuple) {
    return bound(name, [l](CallArgs&) { return make_list(l->items); });
  }
  if (!l->is_tuple && (name == "append" || name == "extend" || name == "insert" || name == "pop" ||
                       name == "remove" || name == "reverse" || name == "sort" || name == "clear")) {
    return unsafe_attr(self, name);
  }
  return Value();
}
}  // namespace

std::int64_t to_index_int(const Value& v, const char* what) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool() ? 1 : 0;
  if (v.is_undefined()) fail_undefined(v);
  fail(std::string(what) + " must be an integer, not " + type_name(v));
}

std::string as_str_arg(const Value& v, const char* fn) {
  if (v.is_string()) return v.as_string();
  if (v.is_undefined()) fail_undefined(v);
  fail(std::string(fn) + "() argument must be str, not " + type_name(v));
}

Value do_items(const Value& v) {
  if (v.is_undefined()) return make_list({});
  if (!v.is_dict() || v.as_dict()->is_namespace) fail("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, val] : v.as_dict()->items) out.push_back(Value::list({k, val}, true));
  return make_list(std::move(out));
}

Value get_path(const Value& v, const Value& attribute) {
  if (!attribute.is_string()) return get_item(v, attribute);
  Value cur = v;
  static const std::string kDot = ".";
  for (const auto& part : py_split(attribute.as_string(), &kDot, -1)) {
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    cur = get_item(cur, digits ? Value(static_cast<std::int64_t>(std::stoll(part))) : Value(part));
  }
  return cur;
}

Value arg_at(const CallArgs& args, std::size_t index, const char* name, Value def) {
  if (index < args.positional.size()) return args.positional[index];
  if (name != nullptr && name[0] != '\0') {
    for (const auto& [k, v] : args.keyword) {
      if (k == name) return v;
    }
  }
  return def;
}
Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (!name.empty() && name[0] == '_') return Value(Undefined{"access to attribute '" + name + "' is unsafe."});
  if (obj.is_dict()) {
    const DictPtr& d = obj.as_dict();
    if (!d->is_namespace) {
      Value m = dict_method(obj, name);
      if (!m.is_undefined() || !m.as_undefined().hint.empty()) return m;
    }
    if (const Value* v = d->find(name)) return *v;
    return undefined_attr(obj, name);
  }
  if (obj.is_string()) {
    if (is_str_method(name)) {
      return Value::function(name, [obj, name](CallArgs& a) { return str_method(obj, name, a); });
    }
    return undefined_attr(obj, name);
  }
  if (obj.is_list()) {
    Value m = list_method(obj, name);
    if (!m.is_undefined() || !m.as_undefined().hint.empty()) return m;
    return undefined_attr(obj, name);
  }
  return undefined_attr(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (key.is_list() && !key.as_list()->is_tuple) fail("unhashable type: 'list'");
  if (obj.is_dict() && !obj.as_dict()->is_namespace) {
    if (const Value* v = obj.as_dict()->find(key)) return *v;
  } else if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    std::int64_t i = key.is_bool() ? key.as_bool() : key.as_int();
    if (obj.is_list()) {
      const auto n = static_cast<std::int64_t>(obj.as_list()->items.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.as_list()->items[static_cast<std::size_t>(i)];
    } else {
      const std::u32string u = decode_utf8(obj.as_string());
      const auto n = static_cast<std::int64_t>(u.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return Value(encode_utf8(std::u32string_view(u).substr(static_cast<std::size_t>(i), 1)));
    }
  }
  if (key.is_string()) {
    // jinja2 falls back to the attribute of that name: l['count'] is a method.
    return get_attr(obj, key.as_string());
  }
  return Value(Undefined{"'" + object_desc(obj) + "' has no attribute " + repr(key)});
}

Value slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  if (obj.is_undefined()) fail_undefined(obj);
  auto bound_of = [](const Value& v, const char* what) -> std::optional<std::int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    return to_index_int(v, what);
  };
  const auto step_o = bound_of(step_v, "slice step");
  const std::int64_t step = step_o.value_or(1);
  if (step == 0) fail("slice step cannot be zero");
  std::vector<Value> items;
  std::u32string chars;
  std::int64_t n = 0;
  if (obj.is_list()) {
    n = static_cast<std::int64_t>(obj.as_list()->items.size());
  } else if (obj.is_string()) {
    chars = decode_utf8(obj.as_string());
    n = static_cast<std::int64_t>(chars.size());
  } else {
    // jinja2's getitem turns the TypeError into an Undefined.
    return Value(Undefined{"'" + object_desc(obj) + "' has no attribute 'slice'"});
  }
  auto norm = [&](std::optional<std::int64_t> v, std::int64_t def) {
    if (!v) return def;
    std::int64_t x = *v;
    if (x < 0) x += n;
    if (step > 0) return std::clamp<std::int64_t>(x, 0, n);
    return std::clamp<std::int64_t>(x, -1, n - 1);
  };
  const std::int64_t start = norm(bound_of(start_v, "slice indices"), step > 0 ? 0 : n - 1);
  const std::int64_t stop = norm(bound_of(stop_v, "slice indices"), step > 0 ? n : -1);
  std::vector<std::int64_t> idx;
  if (step > 0) {
    for (std::int64_t i = start; i < stop; i += step) idx.push_back(i);
  } else {
    for (std::int64_t i = start; i > stop; i += step) idx.push_back(i);
  }
  if (obj.is_list()) {
    for (auto i : idx) items.push_back(obj.as_list()->items[static_cast<std::size_t>(i)]);
    return Value::list(std::move(items), obj.as_list()->is_tuple);
  }
  std::u32string out;
  for (auto i : idx) out.push_back(chars[static_cast<std::size_t>(i)]);
  return obj.is_markup() ? Value::markup(encode_utf8(out)) : Value(encode_utf8(out));
}

bool contains(const Value& haystack, const Value& needle) {
  if (haystack.is_string()) {
    if (needle.is_undefined()) fail_undefined(needle);
    if (!needle.is_string()) fail("'in <string>' requires string as left operand, not " + type_name(needle));
    return haystack.as_string().find(needle.as_string()) != std::string::npos;
  }
  if (haystack.is_list()) {
    for (const auto& v : haystack.as_list()->items) {
      if (py_equal(v, needle)) return true;
    }
    return false;
  }
  if (haystack.is_dict() && !haystack.as_dict()->is_namespace) {
    if (needle.is_list() && !needle.as_list()->is_tuple) fail("unhashable type: 'list'");
    return haystack.as_dict()->find(needle) != nullptr;
  }
  if (haystack.is_undefined()) return false;
  fail("argument of type '" + type_name(haystack) + "' is not iterable");
}
}  // namespace tailor::jinja
