// The hardware a plan is made for: detected (platform/hardware_detect.h),
// declared on the command line (--gpus 2xA6000, --gpus
// 1x24GiB), or from the spec's resources. With no GPU, the plan is for CPU
// training with host RAM as the budget.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/units.h"
#include "dsl/catalog.h"
#include "dsl/job_spec.h"

namespace tailor::strategies {

// Facts about one accelerator (or the CPU) that planning needs.
struct Device {
  std::string name;                 // "NVIDIA RTX A6000", "CPU"
  // The host's processor and threads as detected ("AMD EPYC 7B13, 2
  // threads"; platform::detect_cpu_model): the calibration store's machine
  // for CPU training. Empty when not detected.
  std::string model;
  std::string catalog_key;          // GPU catalog key when known, else empty
  bool cpu = false;                 // the host itself (CPU training)
  Bytes memory;                     // total memory
  Bytes free_memory;                // free when detected; = memory otherwise
  bool bf16 = false;
  double peak_tflops_bf16 = 0;      // dense; 0 when unsupported
  double peak_tflops_fp16 = 0;
  double peak_tflops_fp32 = 0;
  double memory_bandwidth_gbps = 0; // GB/s
  double interconnect_gbps = 0;     // GPU-to-GPU, GB/s per direction
  double host_link_gbps = 0;        // device-to-host, GB/s per direction
};

struct Hardware {
  std::vector<Device> gpus;  // every GPU of every node; empty: CPU training
  Device cpu;                // the host as a compute device
  Bytes host_memory;         // RAM available to the job on each node
  int nodes = 1;             // machines, each with gpus.size() / nodes GPUs
  // Declared GPUs (--gpus, resources) with this machine's RAM standing in
  // for their host's, because nothing said it: describe() says so.
  bool host_memory_assumed = false;
  std::string source;        // "detected (NVML)", "--gpus 2xA6000", "spec resources", ...

  bool cpu_only() const { return gpus.empty(); }
  int gpu_count() const { return static_cast<int>(gpus.size()); }
  int gpus_per_node() const { return gpu_count() / std::max(1, nodes); }
  // "2x NVIDIA RTX A6000 (48.0 GiB), host 256 GiB" / "CPU, host 23.4 GiB" /
  // "2 nodes x 8x NVIDIA H100 (80.0 GiB), host 1.00 TiB per node"
  std::string describe() const;
};

// What tailor-runner's ranks move between them per second (bus bandwidth,
// GB/s): its TCP ring over loopback, 1.0-1.6 GB/s for 1-64 MiB between 2
// and 4 ranks on the 2-core machine (bench/comm_bench.cpp, docs/benchmarks.md).
inline constexpr double kCpuLoopbackGBps = 1.0;

// The device one rank trains on: the first GPU, or on the CPU its share of
// the machine when resources.ranks processes share it (memory, compute and
// bandwidth divided between them, loopback in between).
Device rank_device(const dsl::JobSpec& spec, const Hardware& hw);

// The host as a compute device: this project's 2-core reference machine
// figures, kept below the peaks `tailor-runner --probe` measures on 512²
// matmuls (docs/libtorch.md: ~165 GFLOP/s fp32 with MKL, ~430 bf16 through
// oneDNN) because a whole step runs below them. Measured runs calibrate them.
// `native_bf16`: the CPU multiplies bf16 in hardware (AVX512_BF16, AMX,
// Arm's BF16; platform::detect_native_bf16()). Without it LibTorch's own
// bf16 GEMM is 30-40x slower than its fp32 one, so the runner multiplies
// bf16 through fp32 blocks (runner/torch/half_matmul.h); a whole bf16 step
// there measured kBf16ThroughFp32Speed of an fp32 step's tokens/s (the
// demo's model, an AVX2 AMD EPYC, 2 threads, 2026-12-01: 3,072 against
// 4,028), which is what bf16 is costed at.
inline constexpr double kBf16ThroughFp32Speed = 0.76;
Device cpu_device(Bytes host_memory, bool native_bf16 = true);

// Parses "2xA6000", "A6000", "1x24GiB", "4xH100-80", "0" / "cpu" (the GPU
// part of --gpus; resolve_hardware() takes ",host=SIZE" and ",nodes=N"
// after it: the GPUs and RAM of each node).
Result<std::vector<Device>> parse_gpus_flag(const std::string& text, const dsl::Catalog& catalog);

// A GPU of a catalog model, or a hypothetical one with only its memory known
// (compute figures of a mid-range card, flagged in `name`).
Device device_from_catalog(const dsl::GpuModel& model);
Device hypothetical_gpu(Bytes memory);

// The hardware for `spec`: an explicit --gpus flag wins, then the spec's
// resources (gpu_model / gpu_memory / gpus count), then `detected`. The
// spec's gpu count selects that many devices; gpus: 0 means CPU.
Result<Hardware> resolve_hardware(const dsl::JobSpec& spec, const std::optional<std::string>& gpus_flag,
                                  const std::vector<Device>& detected, std::optional<Bytes> detected_host_memory,
                                  const dsl::Catalog& catalog);

}  // namespace tailor::strategies
