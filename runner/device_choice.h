// Which device tailor-runner trains on: the plan's kind of hardware, what
// this LibTorch build can reach, the spec's resources.device and the
// --device flag. Torch-free, so the rules are tested with the fast unit
// tests.
#pragma once

#include <string>

#include "core/status.h"
#include "dsl/job_spec.h"

namespace tailor::runner {

struct DeviceChoice {
  bool cuda = false;
  int index = 0;       // the CUDA device's index
  std::string reason;  // one line for the start event and the log

  std::string name() const { return cuda ? "cuda:" + std::to_string(index) : "cpu"; }
};

// `flag`: "auto" (the default), "cpu", "cuda" or "cuda:N"; a flag other than
// auto wins over `spec_device` (resources.device). Under auto with
// resources.device auto, a CPU plan trains on the CPU and a plan for GPUs on
// CUDA device 0; when LibTorch sees no CUDA device that is InvalidArgument
// (bad input: this machine cannot run the plan, so a retry here would not
// help) saying why, never a silent fall back to the CPU. resources.device
// cpu (or --device cpu) trains any plan on the CPU. Asking for CUDA that is
// not there is an error naming what is missing. `cuda_built`: whether this
// tailor-runner has its CUDA path (TAILOR_CUDA); without it there are no
// devices, and errors say so. `cuda_visible`: CUDA_VISIBLE_DEVICES as this
// process sees it (nullptr: unset), named in the error when it hides the
// devices.
Result<DeviceChoice> choose_device(const std::string& flag, dsl::TrainDevice spec_device, bool plan_for_gpus,
                                   int cuda_devices, bool cuda_built = true, const char* cuda_visible = nullptr);

}  // namespace tailor::runner
