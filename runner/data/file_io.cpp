#include "runner/data/file_io.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

namespace tailor::runner::data {

Result<std::string> read_file(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) {
    const std::string msg = path + ": " + ec.message();
    if (ec == std::errc::no_such_file_or_directory) return Status::not_found(msg);
    return Status::io_error(msg);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::io_error(path + ": cannot open for reading");
  std::string bytes(size, '\0');
  if (size > 0 && !in.read(bytes.data(), static_cast<std::streamsize>(size))) {
    return Status::io_error(path + ": read failed");
  }
  return bytes;
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
  return id;
}

}  // namespace tailor::runner::data
