// Seeded orders that reproduce on every platform and standard library
// (unlike std::shuffle or std::uniform_int_distribution): the batcher's
// per-epoch shuffles and the dataset mix's samples.
#pragma once

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

namespace tailor::runner::data {

// splitmix64 (Steele, Lea, Flood 2014; constants as in Vigna's reference
// implementation): tiny and fully specified.
inline std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, bound): rejecting the 2^64 mod bound lowest draws removes
// the modulo bias.
inline std::uint64_t uniform_below(std::uint64_t& state, std::uint64_t bound) {
  const std::uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const std::uint64_t r = splitmix64(state);
    if (r >= threshold) return r % bound;
  }
}

// A stream of its own for (seed, k): one key per seed, then k mixed in, so
// pairs never share a stream the way seed + k would (seed 1 k 0 = seed 0 k 1).
inline std::uint64_t stream_state(std::uint64_t seed, std::uint64_t k) {
  std::uint64_t state = seed;
  return splitmix64(state) ^ (k * 0xD1B54A32D192ED03ull);
}

// Fisher-Yates over `v` with `state`.
template <class T>
void seeded_shuffle(std::vector<T>& v, std::uint64_t& state) {
  for (std::size_t i = v.size(); i > 1; --i) {
    const auto j = static_cast<std::size_t>(uniform_below(state, i));
    std::swap(v[i - 1], v[j]);
  }
}

// 0 .. n-1 in the order of the stream (seed, k).
inline std::vector<std::size_t> seeded_permutation(std::size_t n, std::uint64_t seed, std::uint64_t k) {
  std::vector<std::size_t> v(n);
  std::iota(v.begin(), v.end(), std::size_t{0});
  std::uint64_t state = stream_state(seed, k);
  seeded_shuffle(v, state);
  return v;
}

}  // namespace tailor::runner::data
