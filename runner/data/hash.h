// 64-bit non-cryptographic hashes for the token cache: naming and keying
// entries, and detecting corrupted files. Not for adversarial input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tailor::runner::data {

// FNV-1a, 64-bit (Fowler, Noll, Vo; offset basis and prime from the IETF
// draft-eastlake-fnv). Byte at a time: for short strings such as cache keys.
std::uint64_t fnv1a64(std::string_view bytes);

// A checksum of `size` bytes at `data`, 8 bytes per step, for payloads of
// hundreds of MB (a few GB/s). Each step xors a little-endian word into the
// state, rotates and multiplies by an odd constant, a bijection of the state,
// so any change to a single word changes the result; the length is mixed in
// so zero padding is not invisible. Same value on any host byte order.
std::uint64_t checksum64(const void* data, std::size_t size, std::uint64_t seed = 0);

// checksum64 over consecutive pieces of any sizes: update() with each piece
// in order, then finish(). Equal to checksum64 of the pieces joined.
class Checksum64 {
 public:
  explicit Checksum64(std::uint64_t seed = 0);
  void update(const void* data, std::size_t size);
  std::uint64_t finish() const;

 private:
  std::uint64_t h_;
  std::uint64_t tail_ = 0;      // the bytes of a partial word so far
  unsigned tail_bytes_ = 0;     // 0..7
  std::uint64_t size_ = 0;
};

// 16 lowercase hex digits.
std::string hex64(std::uint64_t v);

}  // namespace tailor::runner::data
