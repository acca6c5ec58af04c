// The API's two scopes of bearer token, each in a file of the data folder:
// DATA/token (admin: everything) and DATA/token.read (read-only: GET).
// Both are created on first start (auth.h's load_or_create_token). They are
// re-read when their file changes, so a token is rotated without a
// restart: write the new one to a temporary file (mode 0600) and rename it
// over the old, or delete the file to have a fresh one generated; the old
// token stops working with the next request.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "core/status.h"
#include "daemon/http/message.h"

namespace tailor::daemon {

enum class Access { kNone, kRead, kAdmin };

class TokenFiles {
 public:
  static Result<std::unique_ptr<TokenFiles>> open(const std::string& admin_path, const std::string& read_path);

  // What the request's "Authorization: Bearer ..." may do.
  Access access(const HttpRequest& request);
  // What `token` (as posted to sign in) may do.
  Access access_of(std::string_view token);
  // Whether the token of scope `a` is still the one whose fingerprint
  // (sessions.h) a session keeps: rotating a token ends its sessions.
  bool holds(Access a, std::uint64_t fingerprint);

 private:
  struct File {
    std::string path;
    std::string token;
    ino_t inode = 0;
    std::int64_t mtime_ns = 0;
    std::int64_t size = 0;
  };
  TokenFiles(File admin, File read) : admin_(std::move(admin)), read_(std::move(read)) {}
  // Re-reads `f` if its file changed; a file that cannot be read keeps the
  // token it had (and says why in the log).
  static void refresh(File& f);

  std::mutex mu_;
  File admin_, read_;
};

}  // namespace tailor::daemon
