#include "cli/spec_options.h"

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

}  // namespace tailor::cli
