#include "platform/hardware_detect.h"

#include <dlfcn.h>
#include <sched.h>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

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

std::optional<Bytes> parse_cgroup_memory_limit(const std::string& text) {
  std::string t = text;
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
  if (t.empty() || t == "max" || t.find_first_not_of("0123456789") != std::string::npos || t.size() > 19) {
    return std::nullopt;
  }
  const unsigned long long v = std::strtoull(t.c_str(), nullptr, 10);
  // v1 writes "no limit" as LONG_MAX rounded down to a page.
  if (v == 0 || v >= (1ULL << 62)) return std::nullopt;
  return Bytes(static_cast<std::int64_t>(v));
}

namespace {

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The smallest memory limit on the way from this process' control group up
// to the root of the hierarchy it sees (a limit set on a parent binds too).
// /proc/self/cgroup names the group: "0::/PATH" (v2), "N:memory:/PATH" or
// "N:...,memory,...:/PATH" (v1). Inside a container's cgroup namespace PATH
// is "/" and the group's files are at the mount's top; without one (v1,
// older runtimes) PATH is the host's and may not exist under the mount, so
// the mount's top is read as well.
std::optional<Bytes> cgroup_memory_limit(const std::string& root) {
  std::ifstream in(root + "/proc/self/cgroup");
  std::optional<Bytes> best;
  const auto consider = [&](const std::string& file) {
    const std::string line = first_line(file);
    if (line.empty()) return;
    if (auto limit = parse_cgroup_memory_limit(line); limit && (!best || *limit < *best)) best = limit;
  };
  for (std::string line; std::getline(in, line);) {
    const auto a = line.find(':');
    const auto b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    std::string mount;
    std::string file;
    if (controllers.empty()) {
      mount = root + "/sys/fs/cgroup";
      file = "memory.max";
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      mount = root + "/sys/fs/cgroup/memory";
      file = "memory.limit_in_bytes";
    } else {
      continue;
    }
    while (!path.empty() && path.back() == '/') path.pop_back();
    for (;;) {
      consider(mount + path + "/" + file);
      if (path.empty()) break;
      path = path.substr(0, path.rfind('/'));
    }
  }
  return best;
}

}  // namespace

std::optional<Bytes> detect_host_memory(const std::string& root) {
  std::optional<Bytes> total;
  std::ifstream in(root + "/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    if (starts_with(line, "MemTotal:")) {
      const long long kib = std::atoll(line.c_str() + 9);
      if (kib > 0) total = Bytes(kib * 1024);
      break;
    }
  }
  const std::optional<Bytes> limit = cgroup_memory_limit(root);
  if (limit && (!total || *limit < *total)) return limit;
  return total;
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

std::string detect_cpu_model(const std::string& root) {
  std::ifstream in(root + "/proc/cpuinfo");
  std::string model, implementer, part;
  for (std::string line; std::getline(in, line);) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    if (key == "model name" && model.empty()) model = value;
    if (key == "CPU implementer" && implementer.empty()) implementer = value;
    if (key == "CPU part" && part.empty()) part = value;
  }
  if (model.empty() && !implementer.empty()) model = "Arm implementer " + implementer + " part " + part;
  if (model.empty()) return "";
  cpu_set_t set;
  CPU_ZERO(&set);
  const int threads = sched_getaffinity(0, sizeof set, &set) == 0
                          ? CPU_COUNT(&set)
                          : static_cast<int>(std::thread::hardware_concurrency());
  return threads > 0 ? model + ", " + std::to_string(threads) + (threads == 1 ? " thread" : " threads") : model;
}

std::vector<strategies::Device> detect_gpus(const dsl::Catalog& catalog) {
  std::vector<strategies::Device> gpus = detect_with_nvml(catalog);
  if (gpus.empty()) gpus = detect_with_nvidia_smi(catalog);
  return gpus;
}

}  // namespace tailor::platform
