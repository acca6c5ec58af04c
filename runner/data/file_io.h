// File helpers shared by the dataset loader, the token cache and the
// tokenizers: whole-file reads with errors naming the path, and a file's
// identity for cache keys.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace tailor::runner::data {

// The bytes of `path`. NotFound when it does not exist, IOError when it
// cannot be read (a folder, no permission); messages start with the path.
// Under a read root: InvalidArgument when the file opened lies outside it.
Result<std::string> read_file(const std::string& path);

// The folder the files a spec names (data, tokenizer models) must lie in,
// as tailord checked them at submission. read_file() checks the file it
// actually opened (its /proc/self/fd link), so a path swapped for a symlink
// after submission cannot lead outside. Empty (the default, `tailor run`):
// no check. tailor-runner sets it from what tailord passes
// (runner/protocol/launch_env.h).
Status set_read_root(const std::string& root);
const std::string& read_root();

// Under a read root: InvalidArgument when the file open as `fd` (opened
// from `path`) lies outside it. OK when it lies inside, and without a root.
// For readers that open files themselves (safetensors maps its file).
Status check_inside_read_root(int fd, const std::string& path);

// `path` opened for reading (a descriptor the caller closes), checked as
// read_file checks it: NotFound, IOError (not a regular file), or
// InvalidArgument outside the read root. The table readers' opener
// (dsl/table_records.h).
Result<int> open_data_file(const std::string& path);

// What identifies a file's content without reading it: if any of these
// changes, the content may have. (Same path, size and nanosecond mtime with
// other content needs a deliberate `touch -d`; accepted, like make does.)
// For a folder (a save_to_disk dataset), its files' sizes summed and their
// latest mtime.
struct FileIdentity {
  std::string absolute_path;  // lexically normal, symlinks not resolved
  std::uint64_t size_bytes = 0;
  std::int64_t mtime_ns = 0;  // last modification, ns since the Unix epoch
  bool operator==(const FileIdentity&) const = default;
};
Result<FileIdentity> file_identity(const std::string& path);

}  // namespace tailor::runner::data
