// A disk cache of tokenized data files: a file is tokenized once into a
// cache entry that later loads memory-map. Entries are validated on every
// open and rebuilt, never trusted, when anything is off.
//
// Entry format (version 2, little-endian, every section 8-byte aligned so
// the mapped arrays are naturally aligned):
//   0   char[8]  magic "TLRTOKC\0"
//   8   u32      format version (kTokenCacheVersion)
//   12  u32      header bytes (64)
//   16  u64      key bytes K
//   24  u64      documents D
//   32  u64      tokens N
//   40  u64      file bytes (the whole entry)
//   48  u64      checksum64 (hash.h) of bytes [64, file bytes)
//   56  u64      checksum64 of bytes [0, 56)
//   64  key      K bytes of text (see token_cache_key), zero-padded to 8
//       offsets  i64[D + 1]: document d is tokens [offsets[d], offsets[d+1])
//       tokens   i32[N], zero-padded to 8
//       trained  u8[N], zero-padded to 8
//       values   f32[D]: each document's number (data.margin_field), zeros
//                without one, zero-padded to 8 (version 2)
// Entries are written to a temporary file in the cache folder and renamed
// into place, so readers see a whole old entry or a whole new one, and two
// runners tokenizing the same file at once leave one valid entry. Nothing is
// fsync'd: after a power loss a torn entry fails validation and is rebuilt.
// An entry is never rewritten in place, so a mapping is never truncated
// under a reader (no SIGBUS).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "dsl/job_spec.h"
#include "runner/data/chat_tokens.h"
#include "runner/data/dataset.h"
#include "runner/data/file_io.h"
#include "runner/data/token_store.h"
#include "runner/data/tokenizer.h"

namespace tailor::runner::data {

inline constexpr std::uint32_t kTokenCacheVersion = 2;

// The default cache folder: $TAILOR_CACHE_DIR if set and non-empty, else
// $XDG_CACHE_HOME/tailor/tokens, else $HOME/.cache/tailor/tokens; empty
// when none of these variables is set (then nothing is cached).
std::string default_token_cache_dir();

// The text that must match for an entry to be used: the data file's
// identity (absolute path, size, mtime in ns), format and the jsonl field
// settings, the tokenizer's fingerprint, kDatasetFormatVersion and
// kTokenCacheVersion. The entry's file name hashes all of it but the size
// and mtime, so a changed data file replaces its stale entry.
// For chat data, `chat`'s template, special tokens and train_on settings too.
std::string token_cache_key(const FileIdentity& file, const dsl::DataSpec& spec, const Tokenizer& tok,
                            const ChatSetup* chat = nullptr);

struct TokenizedData {
  enum class Source {
    kCache,      // mapped from a valid cache entry
    kTokenized,  // tokenized now and written to the cache
    kUncached,   // tokenized now, not cached (no folder, or writing failed: see warnings)
  };
  TokenStore store;
  Source source = Source::kUncached;
  std::string cache_file;             // the entry read or written; empty when kUncached
  std::vector<std::string> warnings;  // each also logged with log_warning
  // data.on_bad_record: skip: the records left out. Tokenized data with
  // skipped records is not cached, so that every run reports them.
  SkippedRecords skipped;
};

// tokenize_file(path, spec, tok) through the cache in `cache_dir` (empty =
// no cache). A valid entry with an equal key is mapped; otherwise the file is
// tokenized and an entry written. A corrupt entry (bad magic or version,
// truncated, sizes or offsets that do not add up, checksum mismatch) is
// reported in warnings and rebuilt; a stale one (the data file or settings
// changed) is rebuilt silently. A folder that cannot be created or written
// gives a warning and an uncached result. Errors are tokenize_file's (the
// data itself is bad or unreadable). Never throws.
Result<TokenizedData> load_tokenized(const std::string& path, const dsl::DataSpec& spec, const Tokenizer& tok,
                                     const std::string& cache_dir, const ChatSetup* chat = nullptr);

// What an entry says of itself, from its header and key alone (the
// payload is not read): the data file it holds, its format, documents and
// tokens. A valid hit also sets the entry's modification time to the time
// of use, so that `tailor cache prune` (runner/io/cache_folder.h) evicts
// the least recently used first.
struct TokenCacheEntryInfo {
  std::string data_path;
  std::string format;
  std::uint64_t documents = 0, tokens = 0;
};
// InvalidArgument saying why when `file` is not a readable entry of this
// version (bad magic, another version, a damaged header or key).
Result<TokenCacheEntryInfo> read_token_cache_entry_info(const std::string& file);

}  // namespace tailor::runner::data
