// Quantities with their unit in the type: Bytes prints "3.20 GiB", and the
// parsers accept what people write in job specs: "24GiB", "80GB", "512MiB",
// "2k", "1.5M", "10%". Memory figures are the product, so no bare numbers.
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace tailor {

class Bytes {
 public:
  constexpr Bytes() = default;
  constexpr explicit Bytes(std::int64_t n) : n_(n) {}

  static constexpr Bytes kib(double n) { return Bytes(static_cast<std::int64_t>(n * 1024.0)); }
  static constexpr Bytes mib(double n) { return Bytes(static_cast<std::int64_t>(n * 1024.0 * 1024.0)); }
  static constexpr Bytes gib(double n) {
    return Bytes(static_cast<std::int64_t>(n * 1024.0 * 1024.0 * 1024.0));
  }

  constexpr std::int64_t count() const { return n_; }
  constexpr double as_gib() const { return static_cast<double>(n_) / (1024.0 * 1024.0 * 1024.0); }
  constexpr double as_mib() const { return static_cast<double>(n_) / (1024.0 * 1024.0); }

  constexpr Bytes operator+(Bytes o) const { return Bytes(n_ + o.n_); }
  constexpr Bytes operator-(Bytes o) const { return Bytes(n_ - o.n_); }
  constexpr Bytes& operator+=(Bytes o) { n_ += o.n_; return *this; }
  constexpr Bytes& operator-=(Bytes o) { n_ -= o.n_; return *this; }
  constexpr Bytes operator*(std::int64_t k) const { return Bytes(n_ * k); }
  constexpr Bytes operator/(std::int64_t k) const { return Bytes(n_ / k); }
  constexpr auto operator<=>(const Bytes&) const = default;

  // Binary units with three significant digits: "512 B", "1.50 KiB",
  // "3.20 GiB", "-1.00 MiB".
  std::string to_string() const;

 private:
  std::int64_t n_ = 0;
};

// "24GiB", "24 GiB", "80GB", "1.5TB", "4096" (bytes). Binary units (KiB, MiB,
// GiB, TiB) are powers of 1024; decimal ones (KB, MB, GB, TB) powers of 1000,
// as GPU vendors use them. Unit names are case-insensitive. A bare "G" or "M"
// is refused as ambiguous, with a hint. Negative values are refused.
Result<Bytes> parse_bytes(std::string_view text);

// "2k", "1.5M", "7B" (billions), "3", "1e6": a non-negative count.
// Suffixes: k/K = 1e3, M = 1e6, B/G = 1e9, T = 1e12.
Result<double> parse_count(std::string_view text);

// 6738415616 -> "6.74B", 124439808 -> "124M", 512 -> "512".
std::string format_count(double n);

// "10%" or a plain fraction "0.1": returns a fraction in [0, 1].
Result<double> parse_fraction(std::string_view text);

}  // namespace tailor
