// The cache folder (tailor-runner's --cache-dir, default
// ~/.cache/tailor/tokens): its tokenized data files (data/token_cache.h)
// and precomputed references' log-probabilities (logp_cache.h) listed
// with what each holds, and pruned least recently used first. What
// `tailor cache` shows and removes. Torch-free.
//
// Removing is safe while runners use the folder: a runner that has an
// entry mapped keeps reading it (the file lives until it is unmapped), and
// one that finds it gone tokenizes or scores again. Only files of Tailor's
// names are ever removed; a writer's temporary file only once it is older
// than PruneRules::partial_grace (a writer still at work keeps its own).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace tailor::runner::io {

enum class CacheEntryKind {
  kTokens,     // tokens-<hash>.bin: one data file tokenized
  kReference,  // reference-<hash>.logps: a reference's pair log-probabilities
  kPartial,    // a writer's temporary file (*.tmp-XXXXXX, *.part-PID)
};
const char* to_string(CacheEntryKind k);

struct CacheEntry {
  std::string file;  // its path
  CacheEntryKind kind = CacheEntryKind::kTokens;
  std::uint64_t bytes = 0;
  std::int64_t last_used_ns = 0;  // its modification time: when it was written or last read
  // kTokens: the data file it holds, whether that file is gone (then no job
  // can read the entry again: the data file's path is part of its key),
  // and its documents and tokens.
  std::string data_path;
  bool data_missing = false;
  std::uint64_t documents = 0, tokens = 0;
  // kReference: the pairs it scores, and the first line of its identity
  // (the starting weights' checksum).
  std::uint64_t pairs = 0;
  std::string reference;
  // Why it cannot be read (damaged, another version); empty when it can.
  std::string problem;
};

// The folder's entries, most recently used first; an empty list when the
// folder does not exist. IOError naming the folder when it cannot be read.
Result<std::vector<CacheEntry>> list_cache(const std::string& dir);

struct PruneRules {
  bool all = false;                           // every entry (tailor cache clear)
  std::optional<std::uint64_t> max_bytes;     // least recently used first, until the rest fit
  std::optional<std::int64_t> unused_for_ns;  // entries not used for longer than this
  bool orphaned = false;                      // token entries whose data file is gone
  // Damaged entries and writers' leftovers older than partial_grace_ns go
  // with any rule.
  std::int64_t partial_grace_ns = std::int64_t{3600} * 1'000'000'000;
};

struct PrunedEntry {
  CacheEntry entry;
  std::string why;  // "over the size limit", "unused for 31 days", "its data file is gone", ...
};
struct PruneResult {
  std::vector<PrunedEntry> removed;  // removed, or that would be (dry_run)
  std::vector<CacheEntry> kept;
  std::vector<std::string> errors;  // files that could not be removed, with the reason (they are kept)
};

// Applies `rules` to `entries` (list_cache's, most recently used first) at
// time `now_ns`; removes the chosen files unless `dry_run`.
PruneResult prune_cache(const std::vector<CacheEntry>& entries, const PruneRules& rules, std::int64_t now_ns,
                        bool dry_run);

// "30d", "12h", "90m", "45s" (a whole number and one unit): nanoseconds.
// InvalidArgument naming the text otherwise.
Result<std::int64_t> parse_age(const std::string& text);
// 93 * 86400 s -> "93 days", 5400 s -> "1.5 hours", "12 minutes", "8 seconds".
std::string format_age(std::int64_t ns);

}  // namespace tailor::runner::io
