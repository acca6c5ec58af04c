// tailor-runner: the LibTorch training worker. Today it reports what the
// local LibTorch can do (`--probe`); training from a plan document arrives
// with the runner issue.
#include <cstring>
#include <iostream>

#include "runner/torch_probe.h"

namespace {

constexpr const char* kHelp = R"(usage: tailor-runner --probe | --version | --help

  --probe     print LibTorch's version, devices, threads and matmul rates as JSON
  --version   print the version
  --help      show this help

exit codes: 0 ok, 2 bad command line, 70 internal error
)";

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::cout << kHelp;
    return 0;
  }
  if (argc == 2 && std::strcmp(argv[1], "--version") == 0) {
    std::cout << "tailor-runner 0.1.0\n";
    return 0;
  }
  if (argc == 2 && std::strcmp(argv[1], "--probe") == 0) {
    auto probe = tailor::runner::probe_torch();
    if (!probe.is_ok()) {
      std::cerr << "tailor-runner: " << probe.status().to_string() << "\n";
      return 70;
    }
    std::cout << probe->to_json() << "\n";
    return 0;
  }
  std::cerr << "tailor-runner: expected --probe, --version or --help\n" << kHelp;
  return 2;
}
