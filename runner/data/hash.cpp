#include "runner/data/hash.h"

#include <bit>
#include <cstring>


namespace tailor::runner::data {
namespace {

std::uint64_t load_le64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// The finaliser of splitmix64 (Steele, Lea, Flood 2014; constants from
// Vigna's reference code): spreads every input bit over the output.
std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

std::uint64_t fnv1a64(std::string_view bytes) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ull;
  }
  return h;
}

constexpr std::uint64_t kMul = 0x9E3779B97F4A7C15ull;  // odd: multiplication is invertible mod 2^64

Checksum64::Checksum64(std::uint64_t seed) : h_(mix(seed ^ 0x5851F42D4C957F2Dull)) {}

void Checksum64::update(const void* data, std::size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  size_ += size;
  std::size_t i = 0;
  // First complete a word left partial by the previous piece.
  while (tail_bytes_ != 0 && i < size) {
    tail_ |= std::uint64_t{p[i++]} << (8 * tail_bytes_);
    if (++tail_bytes_ == 8) {
      h_ = std::rotl(h_ ^ tail_, 29) * kMul;
      tail_ = 0;
      tail_bytes_ = 0;
    }
  }
  if constexpr (std::endian::native == std::endian::little) {
    for (; i + 8 <= size; i += 8) {
      std::uint64_t w;
      std::memcpy(&w, p + i, 8);  // unaligned-safe; compiles to one load
      h_ = std::rotl(h_ ^ w, 29) * kMul;
    }
  } else {
    for (; i + 8 <= size; i += 8) h_ = std::rotl(h_ ^ load_le64(p + i), 29) * kMul;
  }
  for (; i < size; ++i) tail_ |= std::uint64_t{p[i]} << (8 * tail_bytes_++);
}

std::uint64_t Checksum64::finish() const {
  const std::uint64_t h = std::rotl(h_ ^ tail_, 29) * kMul;
  return mix(h ^ static_cast<std::uint64_t>(size_));
}

std::uint64_t checksum64(const void* data, std::size_t size, std::uint64_t seed) {
  Checksum64 c(seed);
  c.update(data, size);
  return c.finish();
}

std::string hex64(std::uint64_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i) {
    out[static_cast<std::size_t>(i)] = kDigits[v & 0xF];
    v >>= 4;
  }
  return out;
}

}  // namespace tailor::runner::data
