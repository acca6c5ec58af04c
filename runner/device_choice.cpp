#include "runner/device_choice.h"

#include <charconv>

namespace tailor::runner {

Result<DeviceChoice> choose_device(const std::string& flag, bool plan_for_gpus, int cuda_devices, bool cuda_built) {
  DeviceChoice d;
  if (!cuda_built) cuda_devices = 0;
  const std::string no_cuda = cuda_built ? "LibTorch sees no CUDA device (no driver, or none visible)"
                                         : "this tailor-runner was built without its CUDA path (TAILOR_CUDA=OFF)";
  if (flag == "cpu") {
    d.reason = "--device cpu";
    return d;
  }
  if (flag.empty() || flag == "auto") {
    if (!plan_for_gpus) {
      d.reason = "the plan is for CPU training";
    } else if (cuda_devices > 0) {
      d.cuda = true;
      d.reason = "the plan is for GPUs and LibTorch sees " + std::to_string(cuda_devices) + " CUDA device" +
                 (cuda_devices == 1 ? "" : "s");
    } else {
      d.reason = "the plan is for GPUs but " + no_cuda + ": training on the CPU";
    }
    return d;
  }
  if (flag.rfind("cuda", 0) != 0) {
    return Status::invalid_argument("--device: expected auto, cpu, cuda or cuda:N, got '" + flag + "'");
  }
  if (flag.size() > 4) {
    const char* first = flag.data() + 5;
    const char* last = flag.data() + flag.size();
    const auto [end, ec] = std::from_chars(first, last, d.index);
    if (flag[4] != ':' || first == last || ec != std::errc() || end != last || d.index < 0) {
      return Status::invalid_argument("--device: expected cuda or cuda:N with N a device index, got '" + flag + "'");
    }
  }
  if (cuda_devices == 0) {
    return Status::invalid_argument("--device " + flag + ": " + no_cuda);
  }
  if (d.index >= cuda_devices) {
    return Status::invalid_argument("--device " + flag + ": LibTorch sees " + std::to_string(cuda_devices) +
                                    " CUDA device" + (cuda_devices == 1 ? "" : "s"));
  }
  d.cuda = true;
  d.reason = "--device " + flag;
  return d;
}

}  // namespace tailor::runner
