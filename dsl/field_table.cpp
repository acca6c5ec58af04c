#include "dsl/field_table.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/text.h"

namespace tailor::dsl::fields {
namespace {

// The scalar text of `n`, or a diagnostic when it is a map or a list.
const std::string* scalar_or_report(const Node& n, const std::string& path, std::string_view expected,
                                    Diagnostics& d) {
  if (n.is_scalar()) return &n.scalar;
  d.error(n.location, path, "expected " + std::string(expected) + ", got " + std::string(n.kind_name()));
  return nullptr;
}

}  // namespace

std::string join_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

bool is_auto(const Node& n) { return n.is_scalar() && n.scalar == "auto"; }

std::string format_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

std::optional<std::int64_t> read_int(const Node& n, const std::string& path, Diagnostics& d) {
  const std::string* s = scalar_or_report(n, path, "an integer", d);
  if (!s) return std::nullopt;
  auto count = parse_count(*s);
  if (!count.is_ok()) {
    // "-3" reaches here too: counts are non-negative, and negative integers
    // are never valid where Tailor wants one except priority, handled below.
    char* end = nullptr;
    const long long v = std::strtoll(s->c_str(), &end, 10);
    if (end && *end == '\0' && !s->empty()) return static_cast<std::int64_t>(v);
    d.error(n.location, path, "expected an integer, got " + quote(*s));
    return std::nullopt;
  }
  const double v = *count;
  if (v != std::floor(v) || v > 9.0e15) {
    d.error(n.location, path, "expected a whole number, got " + quote(*s));
    return std::nullopt;
  }
  return static_cast<std::int64_t>(v);
}

std::optional<double> read_number(const Node& n, const std::string& path, Diagnostics& d) {
  const std::string* s = scalar_or_report(n, path, "a number", d);
  if (!s) return std::nullopt;
  const std::string t(trim(*s));
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (t.empty() || end == nullptr || *end != '\0' || !std::isfinite(v)) {
    // Allow counts such as "2k" where a number is expected.
    auto count = parse_count(t);
    if (count.is_ok()) return *count;
    d.error(n.location, path, "expected a number, got " + quote(*s));
    return std::nullopt;
  }
  return v;
}

std::optional<bool> read_bool(const Node& n, const std::string& path, Diagnostics& d) {
  const std::string* s = scalar_or_report(n, path, "true or false", d);
  if (!s) return std::nullopt;
  const std::string v = to_lower(*s);
  if (v == "true" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "no" || v == "off") return false;
  d.error(n.location, path, "expected true or false, got " + quote(*s));
  return std::nullopt;
}

std::optional<std::string> read_string(const Node& n, const std::string& path, Diagnostics& d) {
  const std::string* s = scalar_or_report(n, path, "a string", d);
  if (!s) return std::nullopt;
  return *s;
}

std::optional<Bytes> read_bytes(const Node& n, const std::string& path, Diagnostics& d) {
  const std::string* s = scalar_or_report(n, path, "a size such as 24GiB", d);
  if (!s) return std::nullopt;
  auto b = parse_bytes(*s);
  if (!b.is_ok()) {
    d.error(n.location, path, b.status().message());
    return std::nullopt;
  }
  return *b;
}

std::optional<double> read_fraction(const Node& n, const std::string& path, Diagnostics& d) {
  const std::string* s = scalar_or_report(n, path, "a percentage such as 10%", d);
  if (!s) return std::nullopt;
  auto f = parse_fraction(*s);
  if (!f.is_ok()) {
    d.error(n.location, path, f.status().message());
    return std::nullopt;
  }
  return *f;
}

Node Codec<Bytes>::write(Bytes v) {
  // Exact binary units when the value is a whole number of them.
  static constexpr std::pair<std::int64_t, const char*> kUnits[] = {
      {1LL << 40, "TiB"}, {1LL << 30, "GiB"}, {1LL << 20, "MiB"}, {1LL << 10, "KiB"}};
  for (const auto& [scale, name] : kUnits) {
    if (v.count() >= scale && v.count() % scale == 0) {
      return Node::make_scalar(std::to_string(v.count() / scale) + name);
    }
  }
  return Node::make_scalar(std::to_string(v.count()));
}

std::string foreign_key_hint(const std::string& path) {
  // TRL's (DPOConfig, CPOConfig) and transformers' TrainingArguments names.
  static const std::pair<const char*, const char*> kHints[] = {
      {"training.rpo_alpha",
       "TRL's rpo_alpha (before 1.0) is loss_type: [sigmoid, sft] with loss_weights: [1, rpo_alpha] here"},
      {"training.simpo_gamma", "TRL's simpo_gamma is gamma here (training.method: simpo)"},
      {"training.learning_rate", "transformers' learning_rate is lr here"},
      {"training.num_train_epochs", "transformers' num_train_epochs is epochs here"},
      {"training.max_grad_norm", "transformers' max_grad_norm is grad_clip here"},
      {"training.lr_scheduler_type", "transformers' lr_scheduler_type is scheduler here"},
      {"training.per_device_train_batch_size",
       "transformers' per_device_train_batch_size is micro_batch_size here (or auto: the planner's choice)"},
      {"training.gradient_accumulation_steps",
       "accumulation follows from global_batch_size / (micro_batch_size x GPUs); set global_batch_size"},
      {"training.max_length", "TRL's max_length is data.seq_len here"},
      {"training.gradient_checkpointing", "gradient checkpointing is strategy.gradient_checkpointing here"},
  };
  for (const auto& [key, hint] : kHints) {
    if (path == key) return hint;
  }
  return "";
}

void report_bad_choice(const Node& n, const std::string& path, const std::vector<std::string>& choices,
                       Diagnostics& d) {
  const std::string got = n.is_scalar() ? quote(n.scalar) : std::string(n.kind_name());
  std::string msg = "expected one of " + join(choices, ", ") + "; got " + got;
  if (n.is_scalar()) {
    const std::string hint = closest_match(n.scalar, choices);
    if (!hint.empty()) msg += "; did you mean '" + hint + "'?";
  }
  d.error(n.location, path, msg);
}

std::optional<std::map<std::string, std::string>> Codec<std::map<std::string, std::string>>::read(
    const Node& n, const std::string& p, Diagnostics& d) {
  if (!n.is_map()) {
    d.error(n.location, p, "expected a map of strings, got " + std::string(n.kind_name()));
    return std::nullopt;
  }
  std::map<std::string, std::string> out;
  bool ok = true;
  for (const MapEntry& e : n.entries) {
    if (auto v = read_string(e.value, join_path(p, e.key), d)) {
      out[e.key] = *v;
    } else {
      ok = false;
    }
  }
  if (!ok) return std::nullopt;
  return out;
}

Node Codec<std::map<std::string, std::string>>::write(const std::map<std::string, std::string>& v) {
  Node n = Node::make_map();
  for (const auto& [k, val] : v) n.set(k, Node::make_scalar(val, {}, false));
  return n;
}

Check<std::int64_t> int_at_least(std::int64_t lo) {
  return [lo](const std::int64_t& v) -> std::optional<std::string> {
    if (v >= lo) return std::nullopt;
    if (lo == 1) return "expected a positive integer, got " + std::to_string(v);
    return "expected an integer of at least " + std::to_string(lo) + ", got " + std::to_string(v);
  };
}

Check<std::int64_t> int_in_range(std::int64_t lo, std::int64_t hi) {
  return [lo, hi](const std::int64_t& v) -> std::optional<std::string> {
    if (v >= lo && v <= hi) return std::nullopt;
    return "expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi) + ", got " +
           std::to_string(v);
  };
}

Check<std::int64_t> positive_int_at_most(std::int64_t hi) {
  return [hi](const std::int64_t& v) -> std::optional<std::string> {
    if (v < 1) return int_at_least(1)(v);
    if (v <= hi) return std::nullopt;
    return "expected an integer of at most " + std::to_string(hi) + ", got " + std::to_string(v);
  };
}

Check<double> number_above(double lo) {
  return [lo](const double& v) -> std::optional<std::string> {
    if (v > lo) return std::nullopt;
    return "expected a number greater than " + format_number(lo) + ", got " + format_number(v);
  };
}

Check<double> number_at_least(double lo) {
  return [lo](const double& v) -> std::optional<std::string> {
    if (v >= lo) return std::nullopt;
    return "expected a number of at least " + format_number(lo) + ", got " + format_number(v);
  };
}

Check<double> number_in_range(double lo, double hi, bool hi_inclusive) {
  return [lo, hi, hi_inclusive](const double& v) -> std::optional<std::string> {
    if (v >= lo && (hi_inclusive ? v <= hi : v < hi)) return std::nullopt;
    return "expected a number in [" + format_number(lo) + ", " + format_number(hi) + (hi_inclusive ? "]" : ")") +
           ", got " + format_number(v);
  };
}

Check<Bytes> bytes_positive() {
  return [](const Bytes& v) -> std::optional<std::string> {
    if (v.count() > 0) return std::nullopt;
    return std::string("expected a size greater than 0");
  };
}

Check<std::string> string_not_empty() {
  return [](const std::string& v) -> std::optional<std::string> {
    if (!v.empty()) return std::nullopt;
    return std::string("expected a non-empty string");
  };
}

}  // namespace tailor::dsl::fields
