#include "platform/hardware_detect.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "core/text.h"

namespace tailor::platform {
namespace {

// The slice of NVML's C API used here (nvml.h, stable since CUDA 5); the
// library is loaded at run time so building needs no CUDA.
using NvmlReturn = int;
using NvmlDevice = void*;
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

std::vector<strategies::Device> detect_with_nvml(const dsl::Catalog& catalog) {
  std::vector<strategies::Device> out;
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return out;
  auto sym = [&](const char* name) { return dlsym(lib, name); };
  auto init = reinterpret_cast<NvmlReturn (*)()>(sym("nvmlInit_v2"));
  auto shutdown = reinterpret_cast<NvmlReturn (*)()>(sym("nvmlShutdown"));
  auto count_fn = reinterpret_cast<NvmlReturn (*)(unsigned*)>(sym("nvmlDeviceGetCount_v2"));
  auto handle_fn = reinterpret_cast<NvmlReturn (*)(unsigned, NvmlDevice*)>(sym("nvmlDeviceGetHandleByIndex_v2"));
  auto name_fn = reinterpret_cast<NvmlReturn (*)(NvmlDevice, char*, unsigned)>(sym("nvmlDeviceGetName"));
  auto mem_fn = reinterpret_cast<NvmlReturn (*)(NvmlDevice, NvmlMemory*)>(sym("nvmlDeviceGetMemoryInfo"));
  if (init && shutdown && count_fn && handle_fn && name_fn && mem_fn && init() == 0) {
    unsigned count = 0;
    if (count_fn(&count) == 0) {
      for (unsigned i = 0; i < count; ++i) {
        NvmlDevice dev = nullptr;
        char name[96] = {};
        NvmlMemory mem{};
        if (handle_fn(i, &dev) != 0 || name_fn(dev, name, sizeof name) != 0 || mem_fn(dev, &mem) != 0) continue;
        const dsl::GpuModel* model = catalog.match_gpu_name(name);
        strategies::Device d = model ? strategies::device_from_catalog(*model) : strategies::hypothetical_gpu(Bytes(0));
        d.name = name;
        d.memory = Bytes(static_cast<std::int64_t>(mem.total));
        d.free_memory = Bytes(static_cast<std::int64_t>(mem.free));
        out.push_back(d);
      }
    }
    shutdown();
  }
  dlclose(lib);
  return out;
}

std::vector<strategies::Device> detect_with_nvidia_smi(const dsl::Catalog& catalog) {
  std::vector<strategies::Device> out;
  FILE* p = popen("nvidia-smi --query-gpu=name,memory.total,memory.free --format=csv,noheader,nounits 2>/dev/null",
                  "r");
  if (p == nullptr) return out;
  std::string text;
  char buf[512];
  while (fgets(buf, sizeof buf, p) != nullptr) text += buf;
  pclose(p);
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const auto parts = split(line, ',');
    if (parts.size() != 3) continue;
    const std::string name(trim(parts[0]));
    const double total_mib = std::atof(parts[1].c_str()), free_mib = std::atof(parts[2].c_str());
    if (total_mib <= 0) continue;
    const dsl::GpuModel* model = catalog.match_gpu_name(name);
    strategies::Device d = model ? strategies::device_from_catalog(*model) : strategies::hypothetical_gpu(Bytes(0));
    d.name = name;
    d.memory = Bytes::mib(total_mib);
    d.free_memory = Bytes::mib(free_mib);
    out.push_back(d);
  }
  return out;
}

}  // namespace

std::optional<Bytes> detect_host_memory() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    if (starts_with(line, "MemTotal:")) {
      const long long kib = std::atoll(line.c_str() + 9);
      if (kib > 0) return Bytes(kib * 1024);
    }
  }
  return std::nullopt;
}

bool detect_native_bf16() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (!starts_with(line, "flags") && !starts_with(line, "Features")) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    for (std::string w; words >> w;) {
      if (w == "avx512_bf16" || w == "amx_bf16" || w == "bf16") return true;
    }
    return false;  // every core reports the same features
  }
  return true;  // unreadable: as assumed before it asked
}

std::vector<strategies::Device> detect_gpus(const dsl::Catalog& catalog) {
  std::vector<strategies::Device> gpus = detect_with_nvml(catalog);
  if (gpus.empty()) gpus = detect_with_nvidia_smi(catalog);
  return gpus;
}

}  // namespace tailor::platform
