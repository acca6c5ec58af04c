// Little-endian integers in byte buffers and 8-byte padding: the layouts
// of the runner's own cache files (data/token_cache, io/logp_cache), the
// same on any host byte order.
#pragma once

#include <cstdint>

namespace tailor::runner::data {

inline std::uint64_t pad8(std::uint64_t n) { return (n + 7) & ~std::uint64_t{7}; }

// The low `bytes` bytes of v at p, least significant first.
inline void put_le(unsigned char* p, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

inline std::uint64_t get_le(const unsigned char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace tailor::runner::data
