#include "runner/data/jinja/value.h"

#include <algorithm>
#include <cstdio>

#include "runner/data/jinja/text.h"

namespace tailor::jinja {

const Value* DictObj::find(const Value& key) const {
  for (const auto& [k, v] : items) {
    if (py_equal(k, key)) return &v;
  }
  return nullptr;
}

const Value* DictObj::find(const std::string& key) const {
  for (const auto& [k, v] : items) {
    if (k.is_string() && k.as_string() == key) return &v;
  }
  return nullptr;
}

namespace {

int depth_of(const Value& v) {
  if (v.is_list()) return v.as_list()->depth;
  if (v.is_dict()) return v.as_dict()->depth;
  return 0;
}

int nested_depth(int current, const Value& child) {
  const int d = std::max(current, 1 + depth_of(child));
  if (d > kMaxValueNesting) throw TemplateError("value nested more than " + std::to_string(kMaxValueNesting) + " levels deep");
  return d;
}

// Bounds recursion through values that contain themselves (a namespace
// holding a list holding that namespace).
struct RecursionGuard {
  RecursionGuard() {
    if (++level > kMaxValueNesting + 10) {
      --level;
      throw TemplateError("maximum recursion depth exceeded");
    }
  }
  ~RecursionGuard() { --level; }
  static thread_local int level;
};
thread_local int RecursionGuard::level = 0;

}  // namespace

void DictObj::append(Value key, Value value) {
  depth = nested_depth(depth, value);
  items.emplace_back(std::move(key), std::move(value));
}

void DictObj::set(const Value& key, Value value) {
  depth = nested_depth(depth, value);
  for (auto& [k, v] : items) {
    if (py_equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

Value Value::list(std::vector<Value> items, bool tuple) {
  auto l = std::make_shared<ListObj>();
  for (const Value& v : items) l->depth = nested_depth(l->depth, v);
  l->items = std::move(items);
  l->is_tuple = tuple;
  return Value(std::move(l));
}

Value Value::markup(std::string s) {
  Value v(std::move(s));
  v.markup_ = true;
  return v;
}

Value Value::dict() { return Value(std::make_shared<DictObj>()); }

Value Value::function(std::string name, std::function<Value(CallArgs&)> fn) {
  auto f = std::make_shared<Function>();
  f->name = std::move(name);
  f->call = std::move(fn);
  return Value(std::move(f));
}

double Value::as_number() const {
  if (is_int()) return static_cast<double>(as_int());
  if (is_bool()) return as_bool() ? 1.0 : 0.0;
  return as_float();
}

bool truthy(const Value& v) {
  struct Visitor {
    bool operator()(const Undefined&) const { return false; }
    bool operator()(const None&) const { return false; }
    bool operator()(bool b) const { return b; }
    bool operator()(std::int64_t i) const { return i != 0; }
    bool operator()(double d) const { return d != 0; }
    bool operator()(const std::string& s) const { return !s.empty(); }
    bool operator()(const ListPtr& l) const { return !l->items.empty(); }
    bool operator()(const DictPtr& d) const { return d->is_namespace || !d->items.empty(); }
    bool operator()(const FunctionPtr&) const { return true; }
  };
  return std::visit(Visitor{}, v.storage());
}

std::string to_str(const Value& v) {
  if (v.is_undefined()) return "";
  if (v.is_string()) return v.as_string();
  return repr(v);
}

std::string repr(const Value& v) {
  RecursionGuard guard;
  struct Visitor {
    std::string operator()(const Undefined&) const { return "Undefined"; }
    std::string operator()(const None&) const { return "None"; }
    std::string operator()(bool b) const { return b ? "True" : "False"; }
    std::string operator()(std::int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return py_float_repr(d); }
    std::string operator()(const std::string& s) const { return py_repr_string(s); }
    std::string operator()(const ListPtr& l) const {
      std::string out = l->is_tuple ? "(" : "[";
      for (std::size_t i = 0; i < l->items.size(); ++i) {
        if (i > 0) out += ", ";
        out += repr(l->items[i]);
      }
      if (l->is_tuple && l->items.size() == 1) out += ",";
      return out + (l->is_tuple ? ")" : "]");
    }
    std::string operator()(const DictPtr& d) const {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, val] : d->items) {
        if (!first) out += ", ";
        first = false;
        out += repr(k) + ": " + repr(val);
      }
      out += "}";
      return d->is_namespace ? "<Namespace " + out + ">" : out;
    }
    std::string operator()(const FunctionPtr& f) const { return "<function " + f->name + ">"; }
  };
  return std::visit(Visitor{}, v.storage());
}

std::string type_name(const Value& v) {
  if (v.is_undefined()) return "Undefined";
  if (v.is_none()) return "NoneType";
  if (v.is_bool()) return "bool";
  if (v.is_int()) return "int";
  if (v.is_float()) return "float";
  if (v.is_string()) return "str";
  if (v.is_list()) return v.as_list()->is_tuple ? "tuple" : "list";
  if (v.is_dict()) return v.as_dict()->is_namespace ? "Namespace" : "dict";
  return "function";
}

bool py_equal(const Value& a, const Value& b) {
  RecursionGuard guard;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_number() == b.as_number();
    const std::int64_t x = a.is_bool() ? a.as_bool() : a.as_int();
    const std::int64_t y = b.is_bool() ? b.as_bool() : b.as_int();
    return x == y;
  }
  if (a.is_string() && b.is_string()) return a.as_string() == b.as_string();
  if (a.is_none() && b.is_none()) return true;
  if (a.is_undefined() && b.is_undefined()) return true;
  if (a.is_list() && b.is_list()) {
    const auto& x = *a.as_list();
    const auto& y = *b.as_list();
    if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
    for (std::size_t i = 0; i < x.items.size(); ++i) {
      if (!py_equal(x.items[i], y.items[i])) return false;
    }
    return true;
  }
  if (a.is_dict() && b.is_dict()) {
    const auto& x = *a.as_dict();
    const auto& y = *b.as_dict();
    if (x.is_namespace || y.is_namespace) return &x == &y;
    if (x.items.size() != y.items.size()) return false;
    for (const auto& [k, val] : x.items) {
      const Value* other = y.find(k);
      if (other == nullptr || !py_equal(val, *other)) return false;
    }
    return true;
  }
  if (a.is_function() && b.is_function()) return a.as_function() == b.as_function();
  return false;
}

bool py_less(const Value& a, const Value& b) {
  RecursionGuard guard;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_number() < b.as_number();
    const std::int64_t x = a.is_bool() ? a.as_bool() : a.as_int();
    const std::int64_t y = b.is_bool() ? b.as_bool() : b.as_int();
    return x < y;
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list() && b.is_list() && a.as_list()->is_tuple == b.as_list()->is_tuple) {
    const auto& x = a.as_list()->items;
    const auto& y = b.as_list()->items;
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!py_equal(x[i], y[i])) return py_less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw TemplateError("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

std::vector<Value> iterate(const Value& v) {
  if (v.is_list()) return v.as_list()->items;
  if (v.is_dict() && !v.as_dict()->is_namespace) {
    std::vector<Value> keys;
    keys.reserve(v.as_dict()->items.size());
    for (const auto& kv : v.as_dict()->items) keys.push_back(kv.first);
    return keys;
  }
  if (v.is_string()) {
    std::vector<Value> chars;
    for (char32_t c : decode_utf8(v.as_string())) {
      std::string s;
      append_utf8(s, c);
      chars.emplace_back(std::move(s));
    }
    return chars;
  }
  if (v.is_undefined()) return {};
  throw TemplateError("'" + type_name(v) + "' object is not iterable");
}

void fail_undefined(const Value& v) {
  const std::string& hint = v.as_undefined().hint;
  throw TemplateError(hint.empty() ? "value is undefined" : hint);
}

namespace {

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out.push_back('"');
  for (char32_t c : decode_utf8(s)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default: {
        char buf[16];
        if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
          if (c >= 0x10000) {
            const char32_t v = c - 0x10000;
            std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                          static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
          } else {
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          }
          out += buf;
        } else {
          append_utf8(out, c);
        }
      }
    }
  }
  out.push_back('"');
}

std::string json_float(double d) {
  if (d != d) return "NaN";
  if (d > 1e308 * 10) return "Infinity";
  if (d < -1e308 * 10) return "-Infinity";
  return py_float_repr(d);
}

void json_value(std::string& out, const Value& v, const JsonOptions& o, int level) {
  const std::string item_sep = o.has_separators ? o.item_separator : (o.has_indent ? "," : ", ");
  const std::string key_sep = o.has_separators ? o.key_separator : ": ";
  auto newline = [&](int lvl) {
    if (!o.has_indent) return;
    out.push_back('\n');
    for (int i = 0; i < lvl; ++i) out += o.indent;
  };
  if (level > 512) throw TemplateError("tojson: value nested too deeply");
  if (v.is_none()) {
    out += "null";
  } else if (v.is_bool()) {
    out += v.as_bool() ? "true" : "false";
  } else if (v.is_int()) {
    out += std::to_string(v.as_int());
  } else if (v.is_float()) {
    out += json_float(v.as_float());
  } else if (v.is_string()) {
    json_string(out, v.as_string(), o.ensure_ascii);
  } else if (v.is_list()) {
    const auto& items = v.as_list()->items;
    if (items.empty()) {
      out += "[]";
      return;
    }
    out.push_back('[');
    newline(level + 1);
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (i > 0) {
        out += item_sep;
        newline(level + 1);
      }
      json_value(out, items[i], o, level + 1);
    }
    newline(level);
    out.push_back(']');
  } else if (v.is_dict() && !v.as_dict()->is_namespace) {
    std::vector<std::pair<std::string, const Value*>> entries;
    for (const auto& [k, val] : v.as_dict()->items) {
      std::string key;
      if (k.is_string()) {
        key = k.as_string();
      } else if (k.is_bool()) {
        key = k.as_bool() ? "true" : "false";
      } else if (k.is_int()) {
        key = std::to_string(k.as_int());
      } else if (k.is_float()) {
        key = json_float(k.as_float());
      } else if (k.is_none()) {
        key = "null";
      } else {
        throw TemplateError("keys must be str, int, float, bool or None, not " + type_name(k));
      }
      entries.emplace_back(std::move(key), &val);
    }
    if (o.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
    }
    if (entries.empty()) {
      out += "{}";
      return;
    }
    out.push_back('{');
    newline(level + 1);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) {
        out += item_sep;
        newline(level + 1);
      }
      json_string(out, entries[i].first, o.ensure_ascii);
      out += key_sep;
      json_value(out, *entries[i].second, o, level + 1);
    }
    newline(level);
    out.push_back('}');
  } else {
    throw TemplateError("Object of type " + type_name(v) + " is not JSON serializable");
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  json_value(out, v, options, 0);
  return out;
}

}  // namespace tailor::jinja
