#include "runner/data/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

namespace tailor::runner::data {

namespace {

std::string& root_storage() {
  static std::string root;
  return root;
}

}  // namespace

Status set_read_root(const std::string& root) {
  if (root.empty()) {
    root_storage().clear();
    return Status::ok();
  }
  std::error_code ec;
  const auto canonical = std::filesystem::canonical(root, ec);
  if (ec) return Status::invalid_argument("the spec root " + root + ": " + ec.message());
  root_storage() = canonical.string();
  return Status::ok();
}

const std::string& read_root() { return root_storage(); }

Status check_inside_read_root(int fd, const std::string& path) {
  if (read_root().empty()) return Status::ok();
  // What was opened, whatever links led there (checked after the open: no
  // window for a swap between the check and the read).
  std::error_code ec;
  const auto opened = std::filesystem::read_symlink("/proc/self/fd/" + std::to_string(fd), ec);
  const std::string inside = read_root() == "/" ? "/" : read_root() + "/";
  if (ec || opened.string().rfind(inside, 0) != 0) {
    return Status::invalid_argument(path + ": resolves to " + (ec ? "an unknown file" : opened.string()) +
                                    ", outside the spec root " + read_root());
  }
  return Status::ok();
}

Result<std::string> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = path + ": " + std::strerror(err);
    return err == ENOENT ? Status::not_found(msg) : Status::io_error(msg);
  }
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_fd{fd};
  TAILOR_RETURN_IF_ERROR(check_inside_read_root(fd, path));
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::io_error(path + ": " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return Status::io_error(path + ": is a folder");
  std::string bytes(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::io_error(path + ": read failed: " + std::strerror(errno));
    if (n == 0) break;  // shrank meanwhile
    done += static_cast<std::size_t>(n);
  }
  bytes.resize(done);
  return bytes;
}

Result<int> open_data_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = path + ": " + std::strerror(err);
    return err == ENOENT ? Status::not_found(msg) : Status::io_error(msg);
  }
  Status inside = check_inside_read_root(fd, path);
  struct stat st {};
  if (inside.is_ok() && ::fstat(fd, &st) != 0) inside = Status::io_error(path + ": " + std::strerror(errno));
  if (inside.is_ok() && !S_ISREG(st.st_mode)) inside = Status::io_error(path + ": not a regular file");
  if (!inside.is_ok()) {
    ::close(fd);
    return inside;
  }
  return fd;
}

Result<FileIdentity> file_identity(const std::string& path) {
  // stat(2) rather than std::filesystem::last_write_time: file_time_type's
  // epoch and resolution are implementation-defined, st_mtim is not.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    const std::string msg = path + ": " + std::strerror(err);
    if (err == ENOENT) return Status::not_found(msg);
    return Status::io_error(msg);
  }
  std::error_code ec;
  auto absolute = std::filesystem::absolute(path, ec);
  if (ec) return Status::io_error(path + ": " + ec.message());
  FileIdentity id;
  id.absolute_path = absolute.lexically_normal().string();
  id.size_bytes = static_cast<std::uint64_t>(st.st_size);
  id.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  if (S_ISDIR(st.st_mode)) {
    // A save_to_disk folder: its files' sizes added up and the latest
    // change among them (rewriting a shard in place moves its mtime).
    for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
      struct stat fst {};
      if (::stat(entry.path().c_str(), &fst) != 0 || !S_ISREG(fst.st_mode)) continue;
      id.size_bytes += static_cast<std::uint64_t>(fst.st_size);
      id.mtime_ns = std::max<std::int64_t>(
          id.mtime_ns, static_cast<std::int64_t>(fst.st_mtim.tv_sec) * 1'000'000'000 + fst.st_mtim.tv_nsec);
    }
    if (ec) return Status::io_error(path + ": " + ec.message());
  }
  return id;
}

}  // namespace tailor::runner::data
