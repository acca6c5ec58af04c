#include "core/units.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "core/text.h"

namespace tailor {
namespace {

// Splits "1.5 GiB" into its number and its (trimmed) suffix.
struct NumberAndSuffix {
  double number = 0;
  std::string_view suffix;
};

Result<NumberAndSuffix> split_number(std::string_view text, std::string_view what) {
  std::string_view t = trim(text);
  if (t.empty()) return Status::invalid_argument("expected " + std::string(what) + ", got an empty value");
  double value = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
  if (ec != std::errc() || end == t.data()) {
    return Status::invalid_argument("expected " + std::string(what) + ", got \"" + std::string(t) + "\"");
  }
  if (!std::isfinite(value)) {
    return Status::invalid_argument("expected a finite " + std::string(what) + ", got \"" + std::string(t) + "\"");
  }
  if (value < 0) {
    return Status::invalid_argument("expected a non-negative " + std::string(what) + ", got \"" +
                                    std::string(t) + "\"");
  }
  return NumberAndSuffix{value, trim(std::string_view(end, t.data() + t.size() - end))};
}

}  // namespace

std::string Bytes::to_string() const {
  static constexpr std::array<const char*, 6> kUnits = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = std::fabs(static_cast<double>(n_));
  const char* sign = n_ < 0 ? "-" : "";
  if (v < 1024) return sign + std::to_string(static_cast<long long>(v)) + " B";
  std::size_t unit = 0;
  while (v >= 1024 && unit + 1 < kUnits.size()) {
    v /= 1024;
    ++unit;
  }
  char buf[48];
  const int decimals = v >= 100 ? 0 : (v >= 10 ? 1 : 2);
  std::snprintf(buf, sizeof buf, "%s%.*f %s", sign, decimals, v, kUnits[unit]);
  return buf;
}

Result<Bytes> parse_bytes(std::string_view text) {
  TAILOR_ASSIGN_OR_RETURN(NumberAndSuffix ns, split_number(text, "a size such as 24GiB or 512MiB"));
  struct Unit {
    std::string_view name;
    double scale;
  };
  static constexpr std::array<Unit, 10> kUnits = {{
      {"", 1.0},
      {"b", 1.0},
      {"kib", 1024.0},
      {"mib", 1024.0 * 1024},
      {"gib", 1024.0 * 1024 * 1024},
      {"tib", 1024.0 * 1024 * 1024 * 1024},
      {"kb", 1e3},
      {"mb", 1e6},
      {"gb", 1e9},
      {"tb", 1e12},
  }};
  const std::string suffix = to_lower(ns.suffix);
  for (const Unit& u : kUnits) {
    if (suffix == u.name) {
      const double bytes = std::round(ns.number * u.scale);
      if (bytes > static_cast<double>(std::numeric_limits<std::int64_t>::max() / 2)) {
        return Status::invalid_argument("size \"" + std::string(trim(text)) + "\" is too large");
      }
      return Bytes(static_cast<std::int64_t>(bytes));
    }
  }
  if (suffix == "k" || suffix == "m" || suffix == "g" || suffix == "t") {
    const std::string up(1, static_cast<char>(std::toupper(static_cast<unsigned char>(suffix[0]))));
    return Status::invalid_argument("ambiguous size unit \"" + std::string(ns.suffix) + "\" in \"" +
                                    std::string(trim(text)) + "\": write " + up + "iB (powers of 1024) or " + up +
                                    "B (powers of 1000)");
  }
  return Status::invalid_argument("unknown size unit \"" + std::string(ns.suffix) + "\" in \"" +
                                  std::string(trim(text)) + "\"; use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB");
}

Result<double> parse_count(std::string_view text) {
  TAILOR_ASSIGN_OR_RETURN(NumberAndSuffix ns, split_number(text, "a count such as 2k or 1.5M"));
  if (ns.suffix.empty()) return ns.number;
  if (ns.suffix == "k" || ns.suffix == "K") return ns.number * 1e3;
  if (ns.suffix == "M") return ns.number * 1e6;
  if (ns.suffix == "B" || ns.suffix == "G") return ns.number * 1e9;
  if (ns.suffix == "T") return ns.number * 1e12;
  return Status::invalid_argument("unknown count suffix \"" + std::string(ns.suffix) + "\" in \"" +
                                  std::string(trim(text)) + "\"; use k, M, B or T");
}

std::string format_count(double n) {
  static constexpr std::pair<double, const char*> kScales[] = {{1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "k"}};
  for (const auto& [scale, suffix] : kScales) {
    if (std::fabs(n) >= scale) {
      const double v = n / scale;
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.*f%s", v >= 100 ? 0 : (v >= 10 ? 1 : 2), v, suffix);
      return buf;
    }
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f", n);
  return buf;
}

Result<double> parse_fraction(std::string_view text) {
  TAILOR_ASSIGN_OR_RETURN(NumberAndSuffix ns, split_number(text, "a percentage such as 10% or a fraction such as 0.1"));
  double f = ns.number;
  if (ns.suffix == "%") {
    f /= 100.0;
  } else if (!ns.suffix.empty()) {
    return Status::invalid_argument("expected a percentage such as 10% or a fraction such as 0.1, got \"" +
                                    std::string(trim(text)) + "\"");
  }
  if (f > 1.0) {
    return Status::invalid_argument("fraction \"" + std::string(trim(text)) + "\" is above 100%");
  }
  return f;
}

}  // namespace tailor
