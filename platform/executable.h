// Finding tailor-runner (or another of Tailor's executables) the same way
// from `tailor run` and tailord.
#pragma once

#include <string>

#include "core/status.h"

namespace tailor::platform {

// The absolute path of `name`: `configured` when given (a flag or config
// key), else $<env_var> when set, else beside this process' executable,
// else the first on PATH. NotFound saying where it looked; a given path
// that is not executable is NotFound naming it.
Result<std::string> find_executable(const std::string& name, const std::string& configured,
                                    const std::string& env_var);

}  // namespace tailor::platform
