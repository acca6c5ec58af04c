// The reference model's log-probabilities of preference pairs
// (strategy.reference: precomputed), kept on disk so that a later job with
// the same starting weights and pairs runs no reference forward at all.
//
// A file holds one reference: its identity (the starting weights' checksum,
// the architecture, dtype, quantisation and device, as the runner writes it)
// is the file's key, and its name hashes that key. Inside, each pair is
// found by the checksum of its two rows as a batch holds them (pair_key), so
// the data file, its format, the chat template, the tokenizer and seq_len
// (which all shape the rows) need no key of their own: a pair tokenized any
// other way is another pair. A job adds the pairs it computed to the file;
// any number of datasets share it.
//
// Format (version 1, little-endian):
//   0   char[8]  magic "TLRLOGP\0"
//   8   u32      format version (kLogpCacheVersion)
//   12  u32      header bytes (64)
//   16  u64      key bytes K
//   24  u64      entries N
//   32  u64      file bytes (64 + K padded to 8 + 16 N)
//   40  u64      checksum64 (data/hash.h) of bytes [64, file bytes)
//   48  u64      0
//   56  u64      checksum64 of bytes [0, 56)
//   64  key      K bytes of text, zero-padded to 8
//       entries  N x {u64 pair key, f32 chosen, f32 rejected}, by pair key
// Written whole to a file of the writing process's own and renamed into
// place: readers see an old file or a new one, and of two jobs finishing at
// once the last one's file stays (each whole).
// Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "core/status.h"
#include "runner/data/batcher.h"

namespace tailor::runner::io {

inline constexpr std::uint32_t kLogpCacheVersion = 1;

// A pair's summed completion log-probabilities under the reference.
struct PairLogps {
  float chosen = 0, rejected = 0;
  bool operator==(const PairLogps&) const = default;
};
using LogpTable = std::unordered_map<std::uint64_t, PairLogps>;

// Pair p of a pair batch (rows p and pairs + p, batcher.h's layout): a
// checksum of both rows' inputs and targets up to each row's end (its
// padding, which depends on the batch, left out). Not for adversarial
// input: 64 bits, so two different pairs share a key with odds of about
// n^2 / 2^65 for n pairs.
std::uint64_t pair_key(const data::Batch& b, std::int64_t pair);

// `dir`/reference-<16 hex digits of the identity's hash>.logps.
std::string logp_cache_file(const std::string& dir, const std::string& identity);

struct LoadedLogps {
  LogpTable table;
  // Why the file was not used, when it exists and was not: damaged
  // (truncated, bad magic, version or checksums) or written for another
  // reference. Empty when it was read, or is missing.
  std::string problem;
};
// The pairs of `file` when its key is `identity`; nothing (and no
// problem) when the file does not exist. Never throws.
LoadedLogps read_logp_cache(const std::string& file, const std::string& identity);

// What a file says of itself, from its header and key (cache_folder.h
// lists files with it): the reference's identity and its pairs.
// InvalidArgument saying why when it is not a readable file of this
// version. A read that finds the pairs also sets the file's modification
// time to the time of use (`tailor cache prune` evicts the least recently
// used first).
struct LogpCacheInfo {
  std::string identity;
  std::uint64_t pairs = 0;
};
Result<LogpCacheInfo> read_logp_cache_info(const std::string& file);

// `table` as `file` for `identity`, atomically, creating the folder.
// IOError naming the file (NoSpace on a full disk); nothing half-written.
Status write_logp_cache(const std::string& file, const std::string& identity, const LogpTable& table);

}  // namespace tailor::runner::io
