// What this machine has, read from the system: GPUs through NVML
// (libnvidia-ml.so.1 via dlopen, so building needs no driver) falling back
// to `nvidia-smi --query-gpu`, and host RAM from /proc/meminfo. The
// planner itself (strategies/) stays pure: callers pass these figures in.
#pragma once

#include <optional>
#include <vector>

#include "core/units.h"
#include "dsl/catalog.h"
#include "strategies/hardware.h"

namespace tailor::platform {

// Host RAM (MemTotal); nullopt when unreadable.
std::optional<Bytes> detect_host_memory();

// Whether the CPU multiplies bf16 in hardware: /proc/cpuinfo's flags name
// avx512_bf16 or amx_bf16 (x86) or its Features name bf16 (Arm). True when
// unreadable, the figures tailor assumed before it asked.
bool detect_native_bf16();

// The GPUs, an empty list when there are none. Names are matched against
// the catalog for compute figures. Never throws.
std::vector<strategies::Device> detect_gpus(const dsl::Catalog& catalog);

}  // namespace tailor::platform
