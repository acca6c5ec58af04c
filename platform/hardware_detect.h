// What this machine has, read from the system: GPUs through NVML
// (libnvidia-ml.so.1 via dlopen, so building needs no driver) falling back
// to `nvidia-smi --query-gpu`, and host RAM from /proc/meminfo. The
// planner itself (strategies/) stays pure: callers pass these figures in.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/units.h"
#include "dsl/catalog.h"
#include "strategies/hardware.h"

namespace tailor::platform {

// The memory this process may use: host RAM (MemTotal), or its control
// group's limit where that is smaller (a container started with --memory, a
// Kubernetes pod's limit, a systemd MemoryMax=), so that jobs are planned for
// what the kernel will allow before it kills them. nullopt when unreadable.
// `root` prefixes /proc and /sys (tests lay out a tree of their own).
std::optional<Bytes> detect_host_memory(const std::string& root = "");

// A control group's memory limit as its file holds it: cgroup v2's
// memory.max ("max" or bytes) or v1's memory.limit_in_bytes (bytes, a
// number near 2^63 for none). nullopt for no limit or unreadable text.
std::optional<Bytes> parse_cgroup_memory_limit(const std::string& text);

// Whether the CPU multiplies bf16 in hardware: /proc/cpuinfo's flags name
// avx512_bf16 or amx_bf16 (x86) or its Features name bf16 (Arm). True when
// unreadable, the figures tailor assumed before it asked.
bool detect_native_bf16();

// The processor and the threads this process may run on: "AMD EPYC 7B13, 2
// threads" (/proc/cpuinfo's model name, else Arm's CPU implementer and
// part); empty when unreadable. `root` prefixes /proc.
std::string detect_cpu_model(const std::string& root = "");

// The GPUs, an empty list when there are none. Names are matched against
// the catalog for compute figures. Never throws.
std::vector<strategies::Device> detect_gpus(const dsl::Catalog& catalog);

}  // namespace tailor::platform
