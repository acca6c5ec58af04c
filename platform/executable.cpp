#include "platform/executable.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

namespace tailor::platform {

Result<std::string> find_executable(const std::string& name, const std::string& configured,
                                    const std::string& env_var) {
  namespace fs = std::filesystem;
  auto usable = [](const std::string& p) { return !p.empty() && ::access(p.c_str(), X_OK) == 0; };
  if (!configured.empty()) {
    if (!usable(configured)) return Status::not_found(name + " " + configured + " is not an executable file");
    return fs::absolute(configured).string();
  }
  if (const char* env = std::getenv(env_var.c_str()); env && *env) {
    if (!usable(env)) return Status::not_found(env_var + "=" + env + " is not an executable file");
    return fs::absolute(env).string();
  }
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && usable((self.parent_path() / name).string())) return (self.parent_path() / name).string();
  if (const char* path = std::getenv("PATH")) {
    const std::string dirs = path;
    std::size_t start = 0;
    while (start <= dirs.size()) {
      const auto colon = dirs.find(':', start);
      const std::string dir = dirs.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
      if (!dir.empty() && usable(dir + "/" + name)) return fs::absolute(dir + "/" + name).string();
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
  }
  return Status::not_found(name + " not found: set " + env_var + ", or put it beside " + self.filename().string() +
                           " or on PATH");
}

}  // namespace tailor::platform
