// tailor-runner in a CUDA build: runs tailor-runner-cuda where the NVIDIA
// driver loads and tailor-runner-cpu where it does not (variant_choice.h),
// as the same process (exec), so that whoever started tailor-runner keeps
// its pid, signals, pipes and exit code. Links no LibTorch.
#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>

#include "runner/protocol/exit_code.h"
#include "runner/variant_choice.h"

namespace {

// Shells' code for a program that is not there.
constexpr int kExitNotFound = 127;

// Empty when the driver's library loads, else why not. The handle is left
// open: exec unmaps it, and the CUDA build loads the same library.
std::string driver_error() {
  if (::dlopen(tailor::runner::kCudaDriverLibrary, RTLD_LAZY | RTLD_LOCAL) != nullptr) return "";
  const char* why = ::dlerror();
  return why != nullptr ? why : std::string(tailor::runner::kCudaDriverLibrary) + " does not load";
}

}  // namespace

int main(int, char** argv) {
  using namespace tailor::runner;
  namespace fs = std::filesystem;
  auto choice = choose_variant(std::getenv(kVariantEnv), driver_error);
  if (!choice.is_ok()) {
    std::cerr << "tailor-runner: " << choice.status().message() << "\n";
    return exit_status(RunnerExit::kBadInput);
  }
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) {
    std::cerr << "tailor-runner: cannot read /proc/self/exe: " << ec.message() << "\n";
    return exit_status(RunnerExit::kFailure);
  }
  const fs::path program = self.parent_path() / variant_program(choice->variant);
  if (choice->variant == RunnerVariant::kCpu) {
    ::setenv(kNoCudaEnv, choice->no_cuda.c_str(), 1);
  } else {
    ::unsetenv(kNoCudaEnv);
  }
  ::execv(program.c_str(), argv);
  const int err = errno;
  std::cerr << "tailor-runner: cannot run " << program.string() << ": " << std::strerror(err)
            << (err == ENOENT
                    ? " (the runner's " + std::string(choice->variant == RunnerVariant::kCuda ? "CUDA" : "CPU-only") +
                          " build belongs beside tailor-runner: reinstall, or set " + kVariantEnv + ")"
                    : std::string())
            << "\n";
  return kExitNotFound;
}
