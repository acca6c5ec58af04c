#include "cli/spec_options.h"

#include "platform/hardware_detect.h"

namespace tailor::cli {

std::vector<FlagSpec> with_spec_flags(std::vector<FlagSpec> flags) {
  flags.push_back({"set", true, true});
  flags.push_back({"catalog", true});
  flags.push_back({"no-check-files", false});
  return flags;
}

Result<SpecOptions> spec_options(const Args& args) {
  SpecOptions o;
  o.load.overrides = args.all("set");
  o.load.check_files = !args.has("no-check-files");
  if (args.has("catalog")) {
    auto loaded = dsl::Catalog::load_dir(args.get("catalog"));
    if (!loaded.is_ok()) return loaded.status().prefixed("--catalog");
    o.own_catalog = std::make_unique<dsl::Catalog>(std::move(loaded).value());
    o.load.catalog = o.own_catalog.get();
  }
  return o;
}

Result<strategies::Hardware> hardware_for(const dsl::JobSpec& spec, const Args& args, const dsl::Catalog& catalog) {
  std::optional<std::string> gpus_flag;
  if (args.has("gpus")) gpus_flag = args.get("gpus");
  const dsl::ResourcesSpec& r = spec.resources;
  const bool declared = gpus_flag || !r.gpu_model.empty() || r.gpu_memory || (r.gpu_count && *r.gpu_count == 0);
  const auto detected = declared ? std::vector<strategies::Device>{} : platform::detect_gpus(catalog);
  auto hw = strategies::resolve_hardware(spec, gpus_flag, detected, platform::detect_host_memory(), catalog);
  // CPU training runs on this machine's CPU, whatever was declared.
  if (hw.is_ok()) {
    hw->cpu = strategies::cpu_device(hw->host_memory, platform::detect_native_bf16());
    hw->cpu.model = platform::detect_cpu_model();
  }
  return hw;
}

}  // namespace tailor::cli
