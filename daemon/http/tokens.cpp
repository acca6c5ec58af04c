#include "daemon/http/tokens.h"

#include <sys/stat.h>

#include "core/log.h"
#include "daemon/http/auth.h"
#include "daemon/http/sessions.h"

namespace tailor::daemon {
namespace {

bool same_file(const struct stat& st, ino_t inode, std::int64_t mtime_ns, std::int64_t size) {
  return st.st_ino == inode &&
         static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec == mtime_ns &&
         st.st_size == size;
}

}  // namespace

void TokenFiles::refresh(File& f) {
  struct stat st {};
  if (::stat(f.path.c_str(), &st) == 0 && same_file(st, f.inode, f.mtime_ns, f.size)) return;
  // Changed or gone: a deleted file is generated afresh (a rotation too).
  auto token = load_or_create_token(f.path);
  if (!token.is_ok()) {
    log_error("tailord: keeping the previous token of " + f.path + ": " + token.status().message());
    return;
  }
  if (::stat(f.path.c_str(), &st) != 0) return;
  f.token = *token;
  f.inode = st.st_ino;
  f.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  f.size = st.st_size;
}

Result<std::unique_ptr<TokenFiles>> TokenFiles::open(const std::string& admin_path, const std::string& read_path) {
  File admin, read;
  admin.path = admin_path;
  read.path = read_path;
  for (File* f : {&admin, &read}) {
    TAILOR_ASSIGN_OR_RETURN(f->token, load_or_create_token(f->path));
    struct stat st {};
    if (::stat(f->path.c_str(), &st) == 0) {
      f->inode = st.st_ino;
      f->mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
      f->size = st.st_size;
    }
  }
  if (admin.token == read.token) {
    return Status::failed_precondition(admin_path + " and " + read_path + " hold the same token; give each its own");
  }
  return std::unique_ptr<TokenFiles>(new TokenFiles(std::move(admin), std::move(read)));
}

Access TokenFiles::access(const HttpRequest& request) {
  std::lock_guard lock(mu_);
  refresh(admin_);
  refresh(read_);
  // Both compared, whatever the first gives: the time taken says nothing.
  const bool admin = has_bearer_token(request, admin_.token);
  const bool read = has_bearer_token(request, read_.token);
  return admin ? Access::kAdmin : read ? Access::kRead : Access::kNone;
}

Access TokenFiles::access_of(std::string_view token) {
  std::lock_guard lock(mu_);
  refresh(admin_);
  refresh(read_);
  const bool admin = constant_time_equal(token, admin_.token);
  const bool read = constant_time_equal(token, read_.token);
  return token.empty() ? Access::kNone : admin ? Access::kAdmin : read ? Access::kRead : Access::kNone;
}

bool TokenFiles::holds(Access a, std::uint64_t fingerprint) {
  std::lock_guard lock(mu_);
  File& f = a == Access::kAdmin ? admin_ : read_;
  if (a == Access::kNone) return false;
  refresh(f);
  return token_fingerprint(f.token) == fingerprint;
}

}  // namespace tailor::daemon
