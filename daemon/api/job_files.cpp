#include "daemon/api/job_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/api/resource_json.h"
#include "daemon/api/tar_format.h"
#include "daemon/http/byte_range.h"
#include "daemon/http/errors.h"
#include "runner/protocol/heartbeat.h"

namespace tailor::daemon {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr std::size_t kMaxListed = 10000;

// tailord's and the runner's bookkeeping, not the job's output.
bool private_name(const std::string& name) {
  return name == "runner.lock" || name == "runner.pid" || runner::is_heartbeat_file_name(name) ||
         (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0);
}

// Whether `relative` names something inside the job's folder that may be
// served: not absolute, no "..", none of tailord's own files on the way.
bool servable(const std::string& relative, bool empty_ok) {
  const fs::path rel(relative);
  bool escapes = (rel.empty() && !empty_ok) || rel.is_absolute() || relative.find('\0') != std::string::npos;
  for (const auto& part : rel) escapes = escapes || part == ".." || private_name(part.string());
  return !escapes;
}

double mtime_seconds(const struct stat& st) {
  return static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) * 1e-9;
}

}  // namespace

HttpResponse list_job_files(const std::string& job_id, const std::string& job_dir) {
  std::vector<json> files;
  std::error_code ec;
  const fs::path root(job_dir);
  fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::recursive_directory_iterator() && files.size() < kMaxListed; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (private_name(name)) {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    struct stat st {};
    // lstat: a link is not followed, and not listed.
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    files.push_back({{"path", it->path().lexically_relative(root).string()},
                     {"bytes", static_cast<std::uint64_t>(st.st_size)},
                     {"modified", time_json(mtime_seconds(st))}});
  }
  std::sort(files.begin(), files.end(), [](const json& a, const json& b) { return a["path"] < b["path"]; });
  return HttpResponse::json(200, json_text(json{{"job_id", job_id}, {"files", files}}));
}

HttpResponse job_file(const std::string& job_dir, const std::string& relative, const HttpRequest& request) {
  const fs::path rel(relative);
  if (!servable(relative, /*empty_ok=*/false)) {
    return error_response(ApiError::kInvalidArgument,
                          "path '" + relative + "': expected a file of the job's folder, as GET .../files lists them");
  }
  std::error_code ec;
  const fs::path root = fs::canonical(job_dir, ec);
  if (ec) return error_response(ApiError::kNotFound, "the job has no files yet");
  const int raw = ::open((root / rel).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (raw < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR)
      return error_response(ApiError::kNotFound, "no file '" + relative + "' in the job's folder");
    if (err == ELOOP)
      return error_response(ApiError::kInvalidArgument, "'" + relative + "' is a link, not a file of the job");
    return error_response(ApiError::kIoError, "opening '" + relative + "': " + std::strerror(err));
  }
  const auto fd = std::shared_ptr<const int>(new int(raw), [](const int* p) {
    ::close(*p);
    delete p;
  });
  // Where the descriptor really leads (a folder on the way may be a link).
  const fs::path opened = fs::read_symlink("/proc/self/fd/" + std::to_string(raw), ec);
  if (ec || opened.string().rfind(root.string() + "/", 0) != 0) {
    return error_response(ApiError::kInvalidArgument, "'" + relative + "' leads outside the job's folder");
  }
  struct stat st {};
  if (::fstat(raw, &st) != 0)
    return error_response(ApiError::kIoError, "stat '" + relative + "': " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return error_response(ApiError::kInvalidArgument, "'" + relative + "' is not a regular file");
  const auto size = static_cast<std::uint64_t>(st.st_size);
  // Changes with the file's content as far as the file system tells: a
  // rewritten file (a new checkpoint's rename) gets a new inode or mtime.
  char tag[80];
  std::snprintf(tag, sizeof tag, "\"%llx-%llx-%llx\"", static_cast<unsigned long long>(st.st_ino),
                static_cast<unsigned long long>(size),
                static_cast<unsigned long long>(st.st_mtim.tv_sec) * 1000000000ull +
                    static_cast<unsigned long long>(st.st_mtim.tv_nsec));
  // A Range only applies to the version the client has (If-Range).
  const std::string if_range = request.header("if-range");
  const RangeChoice choice = if_range.empty() || if_range == tag ? choose_range(request.header("range"), size)
                                                                 : RangeChoice{RangeChoice::Kind::kWhole, 0, size};
  if (choice.kind == RangeChoice::Kind::kUnsatisfiable) {
    HttpResponse res =
        error_response(ApiError::kRangeNotSatisfiable,
                       "the file has " + std::to_string(size) + " bytes; the range asked for is beyond them");
    res.headers.emplace_back("Content-Range", "bytes */" + std::to_string(size));
    return res;
  }
  HttpResponse res;
  res.content_type = "application/octet-stream";
  res.headers.emplace_back("Accept-Ranges", "bytes");
  res.headers.emplace_back("ETag", tag);
  res.headers.emplace_back("Content-Disposition", "attachment; filename=\"" + rel.filename().string() + "\"");
  if (choice.kind == RangeChoice::Kind::kPart) {
    res.status = 206;
    res.headers.emplace_back("Content-Range", "bytes " + std::to_string(choice.first) + "-" +
                                                  std::to_string(choice.first + choice.length - 1) + "/" +
                                                  std::to_string(size));
  }
  res.file = FileBody{fd, choice.first, choice.length, {}};
  return res;
}

HttpResponse job_archive(const std::string& job_id, const std::string& job_dir, const std::string& given) {
  std::string relative = given;
  while (!relative.empty() && relative.back() == '/') relative.pop_back();  // "adapter/" is the folder
  if (!servable(relative, /*empty_ok=*/true)) {
    return error_response(ApiError::kInvalidArgument,
                          "path '" + relative + "': expected a folder of the job's folder, as GET .../files lists them");
  }
  std::error_code ec;
  const fs::path root = fs::canonical(job_dir, ec);
  if (ec) return error_response(ApiError::kNotFound, "the job has no files yet");
  const fs::path rel = fs::path(relative).lexically_normal();
  const fs::path folder = relative.empty() ? root : root / rel;
  struct stat st {};
  if (::lstat(folder.c_str(), &st) != 0) {
    return error_response(ApiError::kNotFound, "no folder '" + relative + "' in the job's folder");
  }
  if (!S_ISDIR(st.st_mode)) {
    return error_response(ApiError::kInvalidArgument,
                          "'" + relative + "' is not a folder (GET .../files?path= downloads a file)");
  }
  const fs::path real = fs::canonical(folder, ec);
  if (ec || (real != root && real.string().rfind(root.string() + "/", 0) != 0)) {
    return error_response(ApiError::kInvalidArgument, "'" + relative + "' leads outside the job's folder");
  }
  // What the listing would show under the folder, in path order.
  struct Entry {
    std::string path;  // in the job's folder
    std::uint64_t bytes = 0;
    std::int64_t mtime = 0;
  };
  std::vector<Entry> entries;
  fs::recursive_directory_iterator it(real, fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (private_name(it->path().filename().string())) {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    struct stat fst {};
    if (::lstat(it->path().c_str(), &fst) != 0 || !S_ISREG(fst.st_mode)) continue;
    if (entries.size() == kMaxListed) {
      return error_response(ApiError::kInvalidArgument, "'" + relative + "' holds more than " +
                                                            std::to_string(kMaxListed) +
                                                            " files: download a folder inside it");
    }
    entries.push_back({it->path().lexically_relative(root).string(), static_cast<std::uint64_t>(fst.st_size),
                       static_cast<std::int64_t>(fst.st_mtim.tv_sec)});
  }
  if (ec) return error_response(ApiError::kIoError, "listing '" + relative + "': " + ec.message());
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.path < b.path; });
  FileBody body;
  for (const Entry& e : entries) {
    body.parts.push_back({tar_file_header(e.path, e.bytes, e.mtime), "", "", 0});
    body.parts.push_back({"", (root / e.path).string(), root.string(), e.bytes});
    body.parts.push_back({tar_padding(e.bytes), "", "", 0});
  }
  body.parts.push_back({tar_end(), "", "", 0});
  HttpResponse res;
  res.content_type = "application/x-tar";
  const std::string name = relative.empty() ? job_id : job_id + "-" + rel.filename().string();
  res.headers.emplace_back("Content-Disposition", "attachment; filename=\"" + name + ".tar\"");
  res.file = std::move(body);
  return res;
}

}  // namespace tailor::daemon
