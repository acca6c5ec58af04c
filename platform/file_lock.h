// An exclusive flock(2) on a file, handed to a launched process: the lock
// belongs to the open file description, which fork and exec share, so it
// stays held while any process holding that description lives, whoever
// started it and whether or not its pid was ever recorded. tailord takes a
// job's lock before it forks the runner; after a crash at any moment of the
// launch, a held lock still says "a runner of this job lives".
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "core/status.h"

namespace tailor::platform {

class FileLock {
 public:
  // Creates `path` if missing and locks it. FailedPrecondition when another
  // open description holds the lock; IOError when the file cannot be opened.
  static Result<FileLock> acquire(const std::string& path);

  FileLock(FileLock&& other) noexcept;
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  // Closes this process' descriptor: the lock is released unless a child
  // inherited it (LaunchRequest::inherit_fd).
  ~FileLock();

  int fd() const { return fd_; }

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// Whether some open description holds the lock on `path` (false when the
// file does not exist). Probes with a descriptor of its own, closed before
// it returns.
Result<bool> file_lock_held(const std::string& path);

// The processes with `path` open (compared by device and inode), read from
// /proc; this process excluded. Processes whose descriptors cannot be read
// (another user's) are not seen.
std::vector<pid_t> processes_with_file_open(const std::string& path);

}  // namespace tailor::platform
