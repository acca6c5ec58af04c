#include "strategies/hardware.h"

#include <cctype>
#include <cstdio>
#include <sstream>

#include "core/text.h"

namespace tailor::strategies {

std::string Hardware::describe() const {
  std::string out;
  if (gpus.empty()) {
    out = cpu.name.empty() ? "CPU" : cpu.name;
  } else {
    if (nodes > 1) out = std::to_string(nodes) + " nodes x ";
    out += std::to_string(gpus_per_node()) + "x " + gpus[0].name + " (" + gpus[0].memory.to_string() + ")";
  }
  return out + ", host " + host_memory.to_string() + (nodes > 1 ? " per node" : "") +
         (host_memory_assumed ? " (this machine's; --gpus ...,host=SIZE or resources.host_memory says theirs)" : "");
}

Device cpu_device(Bytes host_memory, bool native_bf16) {
  Device d;
  d.name = native_bf16 ? "CPU" : "CPU (bf16 through fp32)";
  d.cpu = true;
  d.memory = host_memory;
  d.free_memory = host_memory;
  d.bf16 = true;  // through oneDNN; fp16 has no fast CPU path
  d.peak_tflops_fp32 = 0.14;
  d.peak_tflops_bf16 = native_bf16 ? 0.40 : 0.14 * kBf16ThroughFp32Speed;
  d.peak_tflops_fp16 = 0;
  d.memory_bandwidth_gbps = 20;
  return d;
}

Device device_from_catalog(const dsl::GpuModel& g) {
  Device d;
  d.name = g.name;
  d.catalog_key = g.key;
  d.memory = g.memory;
  d.free_memory = g.memory;
  d.bf16 = g.bf16;
  d.peak_tflops_bf16 = g.peak_tflops_bf16;
  d.peak_tflops_fp16 = g.peak_tflops_fp16;
  d.peak_tflops_fp32 = g.peak_tflops_fp32;
  d.memory_bandwidth_gbps = g.memory_bandwidth_gbps;
  d.interconnect_gbps = g.interconnect_gbps;
  d.host_link_gbps = g.host_link_gbps;
  return d;
}

Device hypothetical_gpu(Bytes memory) {
  // Compute figures of a mid-range Ampere card (A10-class): only the
  // memory is known, and memory is what decides whether a plan fits.
  Device d;
  d.name = "hypothetical GPU";
  d.memory = memory;
  d.free_memory = memory;
  d.bf16 = true;
  d.peak_tflops_bf16 = 125;
  d.peak_tflops_fp16 = 125;
  d.peak_tflops_fp32 = 31.2;
  d.memory_bandwidth_gbps = 600;
  d.interconnect_gbps = 32;
  d.host_link_gbps = 32;
  return d;
}

Result<std::vector<Device>> parse_gpus_flag(const std::string& text_in, const dsl::Catalog& catalog) {
  const std::string text(trim(text_in));
  if (text == "0" || to_lower(text) == "cpu") return std::vector<Device>{};
  std::int64_t count = 1;
  std::string what = text;
  // "2xA6000": a count, an 'x', then a catalog GPU or a memory size.
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits > 0 && digits < text.size() && (text[digits] == 'x' || text[digits] == 'X')) {
    count = std::atoll(text.substr(0, digits).c_str());
    what = text.substr(digits + 1);
  }
  if (count < 1 || count > 1024) return Status::invalid_argument("--gpus: bad GPU count in \"" + text + "\"");
  Device d;
  if (const dsl::GpuModel* g = catalog.find_gpu(what)) {
    d = device_from_catalog(*g);
  } else if (auto bytes = parse_bytes(what); bytes.is_ok() && bytes->count() > 0 &&
                                              !std::isdigit(static_cast<unsigned char>(what.back()))) {
    d = hypothetical_gpu(*bytes);
  } else if (const auto several = catalog.gpus_matching(what); several.size() > 1) {
    std::vector<std::string> keys;
    for (const dsl::GpuModel* m : several) keys.push_back(m->key);
    return Status::invalid_argument("--gpus: \"" + what + "\" names several GPUs: say which, " + join(keys, " or "));
  } else {
    std::string msg = "--gpus: unknown GPU \"" + what + "\"; expected COUNTxMODEL (e.g. 2xA6000) or COUNTxSIZE "
                      "(e.g. 1x24GiB); tailor catalog gpus lists them";
    const std::string hint = closest_match(what, catalog.gpu_keys());
    if (!hint.empty()) msg += "; did you mean '" + hint + "'?";
    return Status::invalid_argument(msg);
  }
  return std::vector<Device>(static_cast<std::size_t>(count), d);
}

Result<Hardware> resolve_hardware(const dsl::JobSpec& spec, const std::optional<std::string>& gpus_flag,
                                  const std::vector<Device>& detected, std::optional<Bytes> detected_host_memory,
                                  const dsl::Catalog& catalog) {
  const dsl::ResourcesSpec& r = spec.resources;
  Hardware hw;
  // --gpus GPUS[,host=SIZE]: the declared machine's RAM, which offload uses.
  std::optional<Bytes> flag_host;
  std::optional<int> flag_nodes;
  std::string gpus_text = gpus_flag.value_or("");
  if (const std::size_t comma = gpus_text.find(','); gpus_flag && comma != std::string::npos) {
    for (const std::string& option : split(gpus_text.substr(comma + 1), ',')) {
      const std::string o(trim(option));
      if (o.rfind("nodes=", 0) == 0) {
        const std::string n = o.substr(6);
        if (n.empty() || n.size() > 4 || n.find_first_not_of("0123456789") != std::string::npos || std::stoi(n) < 1) {
          return Status::invalid_argument("--gpus: \"" + o + "\" is not nodes=N with N from 1 to 9999");
        }
        flag_nodes = std::stoi(n);
        continue;
      }
      auto bytes = o.rfind("host=", 0) == 0 ? parse_bytes(o.substr(5)) : Result<Bytes>(Status::invalid_argument(""));
      if (!bytes.is_ok() || bytes->count() <= 0) {
        return Status::invalid_argument("--gpus: \"" + o + "\" is neither host=SIZE nor nodes=N (e.g. "
                                        "8xH100,host=1TiB,nodes=2)");
      }
      flag_host = *bytes;
    }
    gpus_text = gpus_text.substr(0, comma);
  }
  hw.nodes = static_cast<int>(flag_nodes.value_or(gpus_flag ? 1 : r.nodes));
  hw.host_memory = flag_host.value_or(r.host_memory.value_or(detected_host_memory.value_or(Bytes::gib(16))));
  const bool declared = gpus_flag || !r.gpu_model.empty() || r.gpu_memory.has_value();
  hw.host_memory_assumed = declared && !flag_host && !r.host_memory && !(r.gpu_count && *r.gpu_count == 0);
  if (gpus_flag) {
    TAILOR_ASSIGN_OR_RETURN(hw.gpus, parse_gpus_flag(gpus_text, catalog));
    hw.source = "--gpus " + *gpus_flag;
    if (hw.gpus.empty()) hw.host_memory_assumed = false;  // "cpu": this machine
  } else if (r.gpu_count && *r.gpu_count == 0) {
    hw.source = "spec: resources.gpus 0";
  } else if (!r.gpu_model.empty() || r.gpu_memory) {
    const std::int64_t n = r.gpu_count.value_or(1);
    Device d;
    if (!r.gpu_model.empty()) {
      const dsl::GpuModel* g = catalog.find_gpu(r.gpu_model);
      if (g == nullptr) return Status::invalid_argument("unknown GPU model \"" + r.gpu_model + "\"");
      d = device_from_catalog(*g);
    } else {
      d = hypothetical_gpu(*r.gpu_memory);
    }
    if (r.gpu_memory) {
      d.memory = *r.gpu_memory;
      d.free_memory = *r.gpu_memory;
    }
    hw.gpus.assign(static_cast<std::size_t>(n), d);
    hw.source = "spec: resources";
  } else {
    hw.source = detected.empty() ? "detected: no GPU" : "detected";
    if (!r.gpu_ids.empty()) {
      for (std::int64_t id : r.gpu_ids) {
        if (id >= static_cast<std::int64_t>(detected.size())) {
          return Status::invalid_argument("resources.gpus lists GPU " + std::to_string(id) + ", but " +
                                          std::to_string(detected.size()) + " GPU(s) were detected");
        }
        hw.gpus.push_back(detected[static_cast<std::size_t>(id)]);
      }
    } else if (r.gpu_count) {
      if (*r.gpu_count > static_cast<std::int64_t>(detected.size())) {
        return Status::invalid_argument("resources.gpus asks for " + std::to_string(*r.gpu_count) + " GPU(s), but " +
                                        std::to_string(detected.size()) +
                                        " were detected; declare hardware with --gpus or resources.gpu_model");
      }
      hw.gpus.assign(detected.begin(), detected.begin() + *r.gpu_count);
    } else {
      hw.gpus = detected;
    }
  }
  if (hw.nodes > 1) {
    if (hw.gpus.empty()) return Status::invalid_argument("several nodes need GPUs: CPU training runs on one machine");
    if (!gpus_flag && (r.gpu_model.empty() && !r.gpu_memory)) {
      return Status::invalid_argument("resources.nodes " + std::to_string(hw.nodes) +
                                      " needs the nodes' GPUs declared (resources.gpu_model or gpu_memory): this "
                                      "machine's stand for one node only");
    }
    // Every node has the same GPUs.
    const std::vector<Device> one = hw.gpus;
    for (int n = 1; n < hw.nodes; ++n) hw.gpus.insert(hw.gpus.end(), one.begin(), one.end());
  }
  hw.cpu = cpu_device(hw.host_memory);
  return hw;
}

Device rank_device(const dsl::JobSpec& spec, const Hardware& hw) {
  if (!hw.cpu_only()) return hw.gpus.front();
  Device d = hw.cpu;
  const std::int64_t ranks = std::max<std::int64_t>(1, spec.resources.ranks.value_or(1));
  if (ranks == 1) return d;
  const double share = 1.0 / static_cast<double>(ranks);
  d.memory = Bytes(d.memory.count() / ranks);
  d.free_memory = Bytes(d.free_memory.count() / ranks);
  d.peak_tflops_bf16 *= share;
  d.peak_tflops_fp16 *= share;
  d.peak_tflops_fp32 *= share;
  d.memory_bandwidth_gbps *= share;
  d.interconnect_gbps = kCpuLoopbackGBps;
  return d;
}

}  // namespace tailor::strategies
