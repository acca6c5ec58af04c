#include "runner/device_choice.h"

#include <charconv>

#include "runner/variant_choice.h"

namespace tailor::runner {

Result<DeviceChoice> choose_device(const std::string& flag, dsl::TrainDevice spec_device, bool plan_for_gpus,
                                   int cuda_devices, bool cuda_built, const char* cuda_visible) {
  DeviceChoice d;
  if (!cuda_built) cuda_devices = 0;
  std::string no_cuda = no_cuda_path_reason();
  if (cuda_built && cuda_visible != nullptr) {
    no_cuda = "LibTorch sees no CUDA device: CUDA_VISIBLE_DEVICES='" + std::string(cuda_visible) +
              "' hides them, or there is no NVIDIA driver";
  } else if (cuda_built) {
    no_cuda = "LibTorch sees no CUDA device: no NVIDIA driver, or no GPU on this machine";
  }
  if (flag == "cpu") {
    d.reason = "--device cpu";
    return d;
  }
  if (flag.empty() || flag == "auto") {
    if (spec_device == dsl::TrainDevice::kCpu) {
      d.reason = plan_for_gpus ? "resources.device: cpu (the plan is for GPUs; its memory budget does not apply)"
                               : "resources.device: cpu";
    } else if (!plan_for_gpus) {
      d.reason = "the plan is for CPU training";
    } else if (cuda_devices > 0) {
      d.cuda = true;
      d.reason = "the plan is for GPUs and LibTorch sees " + std::to_string(cuda_devices) + " CUDA device" +
                 (cuda_devices == 1 ? "" : "s");
    } else {
      return Status::invalid_argument("the plan is for GPUs but " + no_cuda +
                                      "; to train it on the CPU anyway, set resources.device: cpu in the spec "
                                      "(or --device cpu)");
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
