// Which device tailor-runner trains on: the plan's kind of hardware, what
// this LibTorch build can reach, and the --device flag. Torch-free, so the
// rules are tested with the fast unit tests.
#pragma once

#include <string>

#include "core/status.h"

namespace tailor::runner {

struct DeviceChoice {
  bool cuda = false;
  int index = 0;       // the CUDA device's index
  std::string reason;  // one line for the start event and the log

  std::string name() const { return cuda ? "cuda:" + std::to_string(index) : "cpu"; }
};

// `flag`: "auto" (the default), "cpu", "cuda" or "cuda:N". Under "auto" a
// plan for GPUs trains on CUDA device 0 when LibTorch sees one, and on the
// CPU otherwise (the same code paths; a CPU-only LibTorch trains GPU plans
// there); a CPU plan always trains on the CPU. Asking for CUDA that is not
// there is an error naming what is missing. `cuda_built`: whether this
// tailor-runner has its CUDA path (TAILOR_CUDA); without it there are no
// devices, and errors say why.
Result<DeviceChoice> choose_device(const std::string& flag, bool plan_for_gpus, int cuda_devices,
                                   bool cuda_built = true);

}  // namespace tailor::runner
