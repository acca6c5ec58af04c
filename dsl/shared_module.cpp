#include "dsl/shared_module.h"

#include <dlfcn.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace tailor::dsl {

Result<const void*> open_shared_module(std::string_view file, std::string_view built_at, const char* symbol,
                                       const void* (*entry)(void* symbol)) {
  namespace fs = std::filesystem;
  std::vector<std::string> candidates;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back((exe.parent_path().parent_path() / "lib" / file).string());
  if (!built_at.empty()) candidates.emplace_back(built_at);
  std::string tried;
  for (const std::string& path : candidates) {
    if (!fs::exists(path, ec)) {
      tried += " " + path + " (missing)";
      continue;
    }
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (handle == nullptr) {
      tried += " " + path + " (" + ::dlerror() + ")";
      continue;
    }
    void* found = ::dlsym(handle, symbol);
    const void* api = found != nullptr ? entry(found) : nullptr;
    if (api == nullptr) {
      ::dlclose(handle);  // another build's module stays out of the process
      tried += " " + path + " (not this build's module)";
      continue;
    }
    return api;
  }
  return Status::failed_precondition(tried);
}

}  // namespace tailor::dsl
