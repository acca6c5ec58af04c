// jinja2's filters (filters.py) with transformers' tojson.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <string_view>
#include <unordered_map>

#include "runner/data/jinja/builtins.h"
#include "runner/data/jinja/text.h"

namespace tailor::jinja {
namespace {

Value ignore_case(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(py_lower(v.as_string()));
  return v;
}

std::vector<Value> sorted_values(std::vector<Value> items, bool reverse, bool case_sensitive, const Value& attribute) {
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& it : items) {
    Value key = attribute.is_none() ? it : get_path(it, attribute);
    keyed.emplace_back(ignore_case(key, case_sensitive), std::move(it));
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? py_less(b.first, a.first) : py_less(a.first, b.first);
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return out;
}

CallArgs shifted(const CallArgs& args, std::size_t n) {
  CallArgs out;
  for (std::size_t i = n; i < args.positional.size(); ++i) out.positional.push_back(args.positional[i]);
  out.keyword = args.keyword;
  return out;
}

std::vector<Value> select_or_reject(const Value& seq, CallArgs& args, bool select, bool lookup_attr) {
  if (!truthy(seq)) return {};  // jinja2: "if value:" before anything else
  std::size_t off = 0;
  Value attribute;
  if (lookup_attr) {
    attribute = arg_at(args, 0, "attribute", Value());
    off = 1;
  }
  std::function<bool(const Value&)> pred;
  if (args.positional.size() > off) {
    const std::string test = as_str_arg(args.positional[off], "select");
    CallArgs rest = shifted(args, off + 1);
    rest.keyword.clear();
    pred = [test, rest](const Value& v) mutable { return apply_test(test, v, rest); };
  } else {
    pred = [](const Value& v) { return truthy(v); };
  }
  std::vector<Value> out;
  for (const Value& item : iterate(seq)) {
    const Value subject = lookup_attr ? get_path(item, attribute) : item;
    if (pred(subject) == select) out.push_back(item);
  }
  return out;
}

Value python_round(const Value& v, std::int64_t precision, const std::string& method) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number()) fail("type " + type_name(v) + " doesn't define __round__ method");
  if (method == "common" && (v.is_int() || v.is_bool()) && precision >= 0) return Value(v.is_bool() ? std::int64_t{v.as_bool()} : v.as_int());
  const double x = v.as_number();
  if (method == "ceil" || method == "floor") {
    const double f = std::pow(10.0, static_cast<double>(precision));
    return Value((method == "ceil" ? std::ceil(x * f) : std::floor(x * f)) / f);
  }
  if (method != "common") fail("method must be 'common', 'ceil' or 'floor'");
  if (!std::isfinite(x)) return Value(x);
  // printf rounds the exact binary value half-to-even, like Python's round.
  if (precision > 300 || precision < -300) return Value(x);
  if (precision >= 0) {
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), x);
    return Value(std::strtod(buf, nullptr));
  }
  const double f = std::pow(10.0, static_cast<double>(-precision));
  return Value(std::nearbyint(x / f) * f);
}
Value parse_int(const Value& v, const Value& def, std::int64_t base) {
  auto from_string = [&](const std::string& s, bool* ok) -> std::int64_t {
    std::string t = py_strip(s, true, true, nullptr);
    t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
    errno = 0;
    char* end = nullptr;
    const long long r = std::strtoll(t.c_str(), &end, static_cast<int>(base));
    *ok = !t.empty() && end != nullptr && *end == '\0' && errno == 0;
    return r;
  };
  if (v.is_string()) {
    bool ok = false;
    const std::int64_t r = from_string(v.as_string(), &ok);
    if (ok) return Value(r);
    const std::string t = py_strip(v.as_string(), true, true, nullptr);
    char* end = nullptr;
    const double d = std::strtod(t.c_str(), &end);
    if (!t.empty() && *end == '\0' && std::isfinite(d)) return Value(static_cast<std::int64_t>(d));
    return def;
  }
  if (v.is_int()) return v;
  if (v.is_bool()) return Value(std::int64_t{v.as_bool()});
  if (v.is_float() && std::isfinite(v.as_float())) return Value(static_cast<std::int64_t>(v.as_float()));
  return def;
}
}  // namespace

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

namespace {

// soft_str keeps a Markup a Markup.
Value keep_markup(const Value& v, std::string s) {
  return v.is_markup() ? Value::markup(std::move(s)) : Value(std::move(s));
}

// One function a filter (or a pair that differ by a comparison), given the
// name it was called by, the value it filters and its arguments.
Value filter_safe(const std::string& /*name*/, const Value& v, CallArgs& /*args*/) {
  return v.is_markup() ? v : Value::markup(to_str(v));
}
Value filter_string(const std::string& /*name*/, const Value& v, CallArgs& /*args*/) {
  return keep_markup(v, to_str(v));
}
Value filter_trim(const std::string& /*name*/, const Value& v, CallArgs& args) {
  const Value chars = arg_at(args, 0, "chars", Value(None{}));
  std::u32string buf;
  if (!chars.is_none()) buf = decode_utf8(as_str_arg(chars, "strip"));
  return keep_markup(v, py_strip(to_str(v), true, true, chars.is_none() ? nullptr : &buf));
}
Value filter_length(const std::string& /*name*/, const Value& v, CallArgs& /*args*/) {
  if (v.is_undefined()) return Value(std::int64_t{0});
  if (v.is_string()) return Value(static_cast<std::int64_t>(count_code_points(v.as_string())));
  if (v.is_list()) return Value(static_cast<std::int64_t>(v.as_list()->items.size()));
  if (v.is_dict()) return Value(static_cast<std::int64_t>(v.as_dict()->items.size()));
  fail("object of type '" + type_name(v) + "' has no len()");
}
Value filter_first(const std::string& name, const Value& v, CallArgs& /*args*/) {
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value(Undefined{std::string("No ") + name + " item, sequence was empty."});
  return name == "first" ? items.front() : items.back();
}
Value filter_join(const std::string& /*name*/, const Value& v, CallArgs& args) {
  const std::string sep = to_str(arg_at(args, 0, "d", Value("")));
  const Value attribute = arg_at(args, 1, "attribute", Value(None{}));
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(attribute.is_none() ? item : get_path(item, attribute));
    if (out.size() > kMaxStringBytes) fail("join: result too large");
  }
  return Value(out);
}
Value filter_default(const std::string& /*name*/, const Value& v, CallArgs& args) {
  const Value def = arg_at(args, 0, "default_value", Value(""));
  const bool boolean = truthy(arg_at(args, 1, "boolean", Value(false)));
  if (v.is_undefined() || (boolean && !truthy(v))) return def;
  return v;
}
Value filter_tojson(const std::string& /*name*/, const Value& v, CallArgs& args) {
  JsonOptions o;
  o.ensure_ascii = truthy(arg_at(args, 0, "ensure_ascii", Value(false)));
  const Value indent = arg_at(args, 1, "indent", Value(None{}));
  const Value seps = arg_at(args, 2, "separators", Value(None{}));
  o.sort_keys = truthy(arg_at(args, 3, "sort_keys", Value(false)));
  if (!indent.is_none()) {
    o.has_indent = true;
    if (indent.is_string()) {
      o.indent = indent.as_string();
    } else {
      const std::int64_t n = to_index_int(indent, "indent");
      o.indent = std::string(static_cast<std::size_t>(std::clamp<std::int64_t>(n, 0, 1000)), ' ');
    }
  }
  if (!seps.is_none()) {
    if (!seps.is_list() || seps.as_list()->items.size() != 2) fail("tojson: separators must be a pair");
    o.has_separators = true;
    o.item_separator = as_str_arg(seps.as_list()->items[0], "tojson");
    o.key_separator = as_str_arg(seps.as_list()->items[1], "tojson");
  }
  return Value(to_json(v, o));
}
Value filter_int(const std::string& /*name*/, const Value& v, CallArgs& args) {
  return parse_int(v, arg_at(args, 0, "default", Value(std::int64_t{0})),
                   to_index_int(arg_at(args, 1, "base", Value(std::int64_t{10})), "base"));
}
Value filter_float(const std::string& /*name*/, const Value& v, CallArgs& args) {
  const Value def = arg_at(args, 0, "default", Value(0.0));
  if (v.is_number()) return Value(v.as_number());
  if (v.is_string()) {
    const std::string t = py_strip(v.as_string(), true, true, nullptr);
    char* end = nullptr;
    const double d = std::strtod(t.c_str(), &end);
    if (!t.empty() && *end == '\0') return Value(d);
  }
  return def;
}
Value filter_upper(const std::string& /*name*/, const Value& v, CallArgs& /*args*/) {
  return keep_markup(v, py_upper(to_str(v)));
}
Value filter_lower(const std::string& /*name*/, const Value& v, CallArgs& /*args*/) {
  return keep_markup(v, py_lower(to_str(v)));
}
Value filter_capitalize(const std::string& /*name*/, const Value& v, CallArgs& /*args*/) {
  return keep_markup(v, py_capitalize(to_str(v)));
}
Value filter_title(const std::string& /*name*/, const Value& v, CallArgs& /*args*/) {
  // jinja2: words start after "-", whitespace, "(", "{", "[" or "<".
  std::string out;
  bool start = true;
  for (char32_t c : decode_utf8(to_str(v))) {
    const bool sep = c == '-' || is_py_space(c) || c == '(' || c == '{' || c == '[' || c == '<';
    append_utf8(out, sep ? c : (start ? to_upper(c) : to_lower(c)));
    start = sep;
  }
  return Value(out);
}
Value filter_replace(const std::string& /*name*/, const Value& v, CallArgs& args) {
  const Value count = arg_at(args, 2, "count", Value(None{}));
  return Value(py_replace(to_str(v), to_str(arg_at(args, 0, "old", Value())), to_str(arg_at(args, 1, "new", Value())),
                          count.is_none() ? -1 : to_index_int(count, "count")));
}
Value filter_list(const std::string& /*name*/, const Value& v, CallArgs& /*args*/) { return make_list(iterate(v)); }
Value filter_items(const std::string& /*name*/, const Value& v, CallArgs& /*args*/) { return do_items(v); }
Value filter_reverse(const std::string& /*name*/, const Value& v, CallArgs& /*args*/) {
  if (v.is_string()) {
    std::u32string u = decode_utf8(v.as_string());
    std::reverse(u.begin(), u.end());
    return Value(encode_utf8(u));
  }
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  return make_list(std::move(items));
}
Value filter_map(const std::string& /*name*/, const Value& v, CallArgs& args) {
  std::vector<Value> out;
  if (!truthy(v)) return make_list({});
  if (args.positional.empty()) {
    const Value attribute = arg_at(args, 99, "attribute", Value());
    const Value def = arg_at(args, 99, "default", Value());
    for (const Value& item : iterate(v)) {
      Value x = get_path(item, attribute);
      out.push_back(x.is_undefined() && !def.is_undefined() ? def : x);
    }
  } else {
    const std::string filter = as_str_arg(args.positional[0], "map");
    if (!is_known_filter(filter)) fail("unknown filter '" + filter + "'");
    CallArgs rest = shifted(args, 1);
    for (const Value& item : iterate(v))
      out.push_back(apply_filter(filter, item, rest));
  }
  return make_list(std::move(out));
}
Value filter_select(const std::string& name, const Value& v, CallArgs& args) {
  return make_list(select_or_reject(v, args, name == "select", false));
}
Value filter_selectattr(const std::string& name, const Value& v, CallArgs& args) {
  return make_list(select_or_reject(v, args, name == "selectattr", true));
}
Value filter_dictsort(const std::string& /*name*/, const Value& v, CallArgs& args) {
  const bool cs = truthy(arg_at(args, 0, "case_sensitive", Value(false)));
  const std::string by = to_str(arg_at(args, 1, "by", Value("key")));
  const bool reverse = truthy(arg_at(args, 2, "reverse", Value(false)));
  if (by != "key" && by != "value") fail("You can only sort by either \"key\" or \"value\"");
  std::vector<Value> items = do_items(v).as_list()->items;
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const std::size_t i = by == "key" ? 0 : 1;
    const Value kx = ignore_case(x.as_list()->items[i], cs);
    const Value ky = ignore_case(y.as_list()->items[i], cs);
    return reverse ? py_less(ky, kx) : py_less(kx, ky);
  });
  return make_list(std::move(items));
}
Value filter_sort(const std::string& /*name*/, const Value& v, CallArgs& args) {
  return make_list(sorted_values(iterate(v), truthy(arg_at(args, 0, "reverse", Value(false))),
                                 truthy(arg_at(args, 1, "case_sensitive", Value(false))),
                                 arg_at(args, 2, "attribute", Value(None{}))));
}
Value filter_unique(const std::string& /*name*/, const Value& v, CallArgs& args) {
  const bool cs = truthy(arg_at(args, 0, "case_sensitive", Value(false)));
  const Value attribute = arg_at(args, 1, "attribute", Value(None{}));
  std::vector<Value> seen;
  std::vector<Value> out;
  for (const Value& item : iterate(v)) {
    const Value key = ignore_case(attribute.is_none() ? item : get_path(item, attribute), cs);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return py_equal(s, key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return make_list(std::move(out));
}
Value filter_min(const std::string& name, const Value& v, CallArgs& args) {
  const bool cs = truthy(arg_at(args, 0, "case_sensitive", Value(false)));
  const Value attribute = arg_at(args, 1, "attribute", Value(None{}));
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value(Undefined{"No aggregated item, sequence was empty."});
  std::size_t best = 0;
  for (std::size_t i = 1; i < items.size(); ++i) {
    const Value ki = ignore_case(attribute.is_none() ? items[i] : get_path(items[i], attribute), cs);
    const Value kb = ignore_case(attribute.is_none() ? items[best] : get_path(items[best], attribute), cs);
    if (name == "min" ? py_less(ki, kb) : py_less(kb, ki)) best = i;
  }
  return items[best];
}
Value filter_sum(const std::string& /*name*/, const Value& v, CallArgs& args) {
  const Value attribute = arg_at(args, 0, "attribute", Value(None{}));
  Value total = arg_at(args, 1, "start", Value(std::int64_t{0}));
  for (const Value& item : iterate(v)) {
    const Value x = attribute.is_none() ? item : get_path(item, attribute);
    if (!x.is_number() || !total.is_number())
      fail("unsupported operand type(s) for +: '" + type_name(total) + "' and '" + type_name(x) + "'");
    if (total.is_float() || x.is_float()) {
      total = Value(total.as_number() + x.as_number());
    } else {
      total = Value(static_cast<std::int64_t>(total.as_number()) + static_cast<std::int64_t>(x.as_number()));
    }
  }
  return total;
}
Value filter_batch(const std::string& /*name*/, const Value& v, CallArgs& args) {
  const std::int64_t n = to_index_int(arg_at(args, 0, "linecount", Value()), "linecount");
  if (n <= 0) fail("batch: linecount must be positive");
  const Value fill = arg_at(args, 1, "fill_with", Value(None{}));
  std::vector<Value> out;
  std::vector<Value> cur;
  for (const Value& item : iterate(v)) {
    cur.push_back(item);
    if (static_cast<std::int64_t>(cur.size()) == n) {
      out.push_back(make_list(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (!fill.is_none()) {
      while (static_cast<std::int64_t>(cur.size()) < n)
        cur.push_back(fill);
    }
    out.push_back(make_list(std::move(cur)));
  }
  return make_list(std::move(out));
}
Value filter_indent(const std::string& /*name*/, const Value& v, CallArgs& args) {
  const Value width = arg_at(args, 0, "width", Value(std::int64_t{4}));
  const bool first = truthy(arg_at(args, 1, "first", Value(false)));
  const bool blank = truthy(arg_at(args, 2, "blank", Value(false)));
  const std::string ind =
      width.is_string()
          ? width.as_string()
          : std::string(static_cast<std::size_t>(std::clamp<std::int64_t>(to_index_int(width, "width"), 0, 1000)), ' ');
  const std::string s = to_str(v) + "\n";
  std::vector<std::string> lines = py_splitlines(s, false);
  std::string rv;
  if (blank) {
    for (std::size_t i = 0; i < lines.size(); ++i)
      rv += (i > 0 ? "\n" + ind : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (std::size_t i = 1; i < lines.size(); ++i)
      rv += "\n" + (lines[i].empty() ? lines[i] : ind + lines[i]);
  }
  if (first) rv = ind + rv;
  return keep_markup(v, rv);
}
Value filter_abs(const std::string& /*name*/, const Value& v, CallArgs& /*args*/) {
  if (v.is_int()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  if (v.is_bool()) return Value(std::int64_t{v.as_bool()});
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  if (v.is_undefined()) fail_undefined(v);
  fail("bad operand type for abs(): '" + type_name(v) + "'");
}
Value filter_round(const std::string& /*name*/, const Value& v, CallArgs& args) {
  return python_round(v, to_index_int(arg_at(args, 0, "precision", Value(std::int64_t{0})), "precision"),
                      to_str(arg_at(args, 1, "method", Value("common"))));
}
Value filter_wordcount(const std::string& /*name*/, const Value& v, CallArgs& /*args*/) {
  std::int64_t n = 0;
  bool in_word = false;
  for (char32_t c : decode_utf8(to_str(v))) {
    const bool w = is_word_char(c);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}
Value filter_escape(const std::string& /*name*/, const Value& v, CallArgs& /*args*/) {
  return v.is_markup() ? v : Value::markup(html_escape(to_str(v)));
}
Value filter_forceescape(const std::string& /*name*/, const Value& v, CallArgs& /*args*/) {
  return Value::markup(html_escape(to_str(v)));
}
Value filter_attr(const std::string& /*name*/, const Value& v, CallArgs& args) {
  return get_attr(v, to_str(arg_at(args, 0, "name", Value())));
}
Value filter_center(const std::string& /*name*/, const Value& v, CallArgs& args) {
  CallArgs c = args;
  if (c.positional.empty()) c.positional.push_back(arg_at(args, 0, "width", Value(std::int64_t{80})));
  return get_attr(Value(to_str(v)), "center").as_function()->call(c);
}
Value filter_format(const std::string& /*name*/, const Value& v, CallArgs& args) {
  // printf-style "%s" formatting, the common case.
  const std::string fmt = to_str(v);
  std::string out;
  std::size_t next_arg = 0;
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (i + 1 >= fmt.size()) fail("incomplete format");
    const char c = fmt[++i];
    if (c == '%') {
      out.push_back('%');
      continue;
    }
    if (next_arg >= args.positional.size()) fail("not enough arguments for format string");
    const Value& x = args.positional[next_arg++];
    if (c == 's') {
      out += to_str(x);
    } else if (c == 'r') {
      out += repr(x);
    } else if (c == 'd' || c == 'i') {
      out += std::to_string(static_cast<std::int64_t>(x.is_number() ? x.as_number() : 0));
    } else {
      fail(std::string("unsupported format character '") + c + "'");
    }
  }
  return Value(out);
}
Value filter_pprint(const std::string& /*name*/, const Value& v, CallArgs& /*args*/) { return Value(repr(v)); }
Value filter_striptags(const std::string& /*name*/, const Value& v, CallArgs& /*args*/) { return Value(to_str(v)); }
Value filter_truncate(const std::string& /*name*/, const Value& v, CallArgs& args) {
  const std::int64_t length = to_index_int(arg_at(args, 0, "length", Value(std::int64_t{255})), "length");
  const std::u32string u = decode_utf8(to_str(v));
  if (static_cast<std::int64_t>(u.size()) <= length + 5) return Value(to_str(v));
  const std::string end = to_str(arg_at(args, 2, "end", Value("...")));
  return Value(encode_utf8(u.substr(0, static_cast<std::size_t>(std::max<std::int64_t>(
                                           0, length - static_cast<std::int64_t>(count_code_points(end)))))) +
               end);
}
Value filter_slice(const std::string& /*name*/, const Value& /*v*/, CallArgs& /*args*/) {
  fail("filter 'slice' is not supported");
}

using FilterFn = Value (*)(const std::string& name, const Value& v, CallArgs& args);

const std::unordered_map<std::string_view, FilterFn>& filter_table() {
  static const std::unordered_map<std::string_view, FilterFn> k = {{"abs", filter_abs},
                                                                   {"attr", filter_attr},
                                                                   {"batch", filter_batch},
                                                                   {"capitalize", filter_capitalize},
                                                                   {"center", filter_center},
                                                                   {"count", filter_length},
                                                                   {"d", filter_default},
                                                                   {"default", filter_default},
                                                                   {"dictsort", filter_dictsort},
                                                                   {"e", filter_escape},
                                                                   {"escape", filter_escape},
                                                                   {"first", filter_first},
                                                                   {"float", filter_float},
                                                                   {"forceescape", filter_forceescape},
                                                                   {"format", filter_format},
                                                                   {"indent", filter_indent},
                                                                   {"int", filter_int},
                                                                   {"items", filter_items},
                                                                   {"join", filter_join},
                                                                   {"last", filter_first},
                                                                   {"length", filter_length},
                                                                   {"list", filter_list},
                                                                   {"lower", filter_lower},
                                                                   {"map", filter_map},
                                                                   {"max", filter_min},
                                                                   {"min", filter_min},
                                                                   {"pprint", filter_pprint},
                                                                   {"reject", filter_select},
                                                                   {"rejectattr", filter_selectattr},
                                                                   {"replace", filter_replace},
                                                                   {"reverse", filter_reverse},
                                                                   {"round", filter_round},
                                                                   {"safe", filter_safe},
                                                                   {"select", filter_select},
                                                                   {"selectattr", filter_selectattr},
                                                                   {"slice", filter_slice},
                                                                   {"sort", filter_sort},
                                                                   {"string", filter_string},
                                                                   {"striptags", filter_striptags},
                                                                   {"sum", filter_sum},
                                                                   {"title", filter_title},
                                                                   {"tojson", filter_tojson},
                                                                   {"trim", filter_trim},
                                                                   {"truncate", filter_truncate},
                                                                   {"unique", filter_unique},
                                                                   {"upper", filter_upper},
                                                                   {"wordcount", filter_wordcount}};
  return k;
}

}  // namespace

bool is_known_filter(std::string_view name) { return filter_table().count(name) != 0; }

Value apply_filter(const std::string& name, const Value& v, CallArgs& args) {
  const auto& table = filter_table();
  const auto it = table.find(name);
  if (it == table.end()) fail("unknown filter '" + name + "'");
  return it->second(name, v, args);
}
}  // namespace tailor::jinja
