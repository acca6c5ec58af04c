// Model presets and GPU models: data from configs/catalog/*.yaml, loaded
// through the same diagnostics as job specs. The files are embedded into
// the binary at build time so Tailor works from any folder; a catalog
// folder (TAILOR_CATALOG_DIR or --catalog) replaces them.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/units.h"
#include "dsl/diagnostics.h"
#include "dsl/job_spec.h"

namespace tailor::dsl {

struct ModelPreset {
  std::string name;         // catalog key, e.g. "llama-2-7b"
  std::string description;
  std::string source;       // where the figures come from
  std::int64_t params = 0;  // published parameter count; equals arch.parameter_count()
  // Hugging Face repository names (lower case, without the organisation)
  // whose config.json is exactly this architecture: instruct and chat
  // variants of a base share it; a fine-tune that resized anything does not.
  std::vector<std::string> hub_repos;
  ModelArch arch;
};

struct GpuModel {
  std::string key;                    // catalog key, e.g. "A6000"
  std::string name;                   // marketing name
  std::vector<std::string> match;     // substrings of NVML/nvidia-smi names identifying it
  Bytes memory;                       // memory per GPU
  bool bf16 = false;                  // native bf16
  double peak_tflops_bf16 = 0;        // dense tensor-core TFLOP/s (0: unsupported)
  double peak_tflops_fp16 = 0;
  double peak_tflops_fp32 = 0;        // non-tensor fp32
  double memory_bandwidth_gbps = 0;   // GB/s
  std::string interconnect;           // pcie3 | pcie4 | pcie5 | nvlink2 | nvlink3 | nvlink4
  double interconnect_gbps = 0;       // GPU-to-GPU, GB/s per direction
  double host_link_gbps = 0;          // GPU-to-host, GB/s per direction
  std::string source;
};

class Catalog {
 public:
  // The catalog built into the binary (or TAILOR_CATALOG_DIR when set and
  // valid). Loaded once; thread-safe.
  static const Catalog& builtin();

  // Loads models.yaml and gpus.yaml from `dir`.
  static Result<Catalog> load_dir(const std::string& dir);
  // Parses the two documents; problems go to `diags`.
  static std::optional<Catalog> parse(std::string_view models_yaml, std::string_view models_name,
                                      std::string_view gpus_yaml, std::string_view gpus_name, Diagnostics& diags);

  const std::vector<ModelPreset>& models() const { return models_; }
  const std::vector<GpuModel>& gpus() const { return gpus_; }

  const ModelPreset* find_model(std::string_view name) const;
  // The preset a Hugging Face repository name (any case, no organisation)
  // is listed under; nullptr when none.
  const ModelPreset* find_by_hub_repo(std::string_view repo) const;
  // By what a user types (--gpus, resources.gpu_model): the catalog key in
  // any case ("h100-80"), with or without separators and a memory unit
  // ("A100-80GB", "rtx4090", "NVIDIA H100"), a part of one key that names no
  // other ("H100", "4090"), or an NVML name (match_gpu_name). nullptr when
  // nothing or several match; gpus_matching() says which.
  const GpuModel* find_gpu(std::string_view key) const;
  std::vector<const GpuModel*> gpus_matching(std::string_view key) const;
  // By a device name as NVML reports it ("NVIDIA RTX A6000"): the entry with
  // the longest `match` substring that ends at a token boundary.
  const GpuModel* match_gpu_name(std::string_view device_name) const;

  std::vector<std::string> model_names() const;
  std::vector<std::string> gpu_keys() const;

 private:
  std::vector<ModelPreset> models_;
  std::vector<GpuModel> gpus_;
};

}  // namespace tailor::dsl
