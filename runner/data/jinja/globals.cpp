// The globals transformers' environment offers: jinja2's range (with the
// sandbox's limit), dict and namespace, plus raise_exception and
// strftime_now.
#include <ctime>

#include "runner/data/jinja/builtins.h"

namespace tailor::jinja {
namespace {

// jinja2's sandbox refuses ranges longer than this (sandbox.MAX_RANGE).
constexpr std::int64_t kMaxRange = 100000;

std::int64_t checked_range_len(std::int64_t start, std::int64_t stop, std::int64_t step) {
  if (step > 0 && start < stop) return (stop - start + step - 1) / step;
  if (step < 0 && start > stop) return (start - stop - step - 1) / (-step);
  return 0;
}
}  // namespace

void install_globals(DictObj& globals) {
  globals.set(Value("range"), Value::function("range", [](CallArgs& a) {
                std::int64_t start = 0;
                std::int64_t stop = 0;
                std::int64_t step = 1;
                if (a.positional.size() == 1) {
                  stop = to_index_int(a.positional[0], "range() argument");
                } else if (a.positional.size() >= 2) {
                  start = to_index_int(a.positional[0], "range() argument");
                  stop = to_index_int(a.positional[1], "range() argument");
                  if (a.positional.size() >= 3) step = to_index_int(a.positional[2], "range() argument");
                } else {
                  fail("range expected at least 1 argument, got 0");
                }
                if (step == 0) fail("range() arg 3 must not be zero");
                const std::int64_t n = checked_range_len(start, stop, step);
                if (n > kMaxRange) fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
                std::vector<Value> out;
                for (std::int64_t i = 0; i < n; ++i) out.emplace_back(start + i * step);
                return make_list(std::move(out));
              }));
  auto make_dict = [](CallArgs& a, bool ns) {
    auto d = std::make_shared<DictObj>();
    d->is_namespace = ns;
    for (const Value& p : a.positional) {
      if (p.is_dict()) {
        for (const auto& kv : p.as_dict()->items) d->set(kv.first, kv.second);
      } else {
        for (const Value& pair : iterate(p)) {
          if (!pair.is_list() || pair.as_list()->items.size() != 2) fail("dictionary update sequence element has wrong length");
          d->set(pair.as_list()->items[0], pair.as_list()->items[1]);
        }
      }
    }
    for (const auto& [k, v] : a.keyword) {
      if (ns && !k.empty() && k[0] == '_') fail("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" + k + "'. Please rename the attribute.");
      d->set(Value(k), v);
    }
    return Value(d);
  };
  globals.set(Value("dict"), Value::function("dict", [make_dict](CallArgs& a) { return make_dict(a, false); }));
  globals.set(Value("namespace"), Value::function("namespace", [make_dict](CallArgs& a) { return make_dict(a, true); }));
  globals.set(Value("raise_exception"), Value::function("raise_exception", [](CallArgs& a) -> Value {
                throw TemplateError(to_str(arg_at(a, 0, "message", Value(""))), true);
              }));
  globals.set(Value("strftime_now"), Value::function("strftime_now", [](CallArgs& a) {
                const std::string fmt = as_str_arg(arg_at(a, 0, "format", Value()), "strftime_now");
                const std::time_t now = std::time(nullptr);
                std::tm tm{};
                localtime_r(&now, &tm);
                std::string buf(256 + fmt.size() * 4, '\0');
                const std::size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
                buf.resize(n);
                return Value(buf);
              }));
}
}  // namespace tailor::jinja
