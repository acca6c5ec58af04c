// The flags every command that reads job specs shares (--set, --catalog,
// --no-check-files), turned into loader options.
#pragma once

#include <memory>
#include <vector>

#include "core/args.h"
#include "core/status.h"
#include "dsl/catalog.h"
#include "dsl/spec_loader.h"
#include "strategies/hardware.h"

namespace tailor::cli {

struct SpecOptions {
  dsl::LoadOptions load;
  std::unique_ptr<dsl::Catalog> own_catalog;  // from --catalog; load.catalog points at it

  const dsl::Catalog& catalog() const { return own_catalog ? *own_catalog : dsl::Catalog::builtin(); }
};

// Appends the shared flags to a command's own.
std::vector<FlagSpec> with_spec_flags(std::vector<FlagSpec> flags);

// Fails when --catalog names a folder that does not hold a valid catalog.
Result<SpecOptions> spec_options(const Args& args);

// The hardware to plan `spec` for: --gpus when given, else what the spec
// declares, else what is detected (GPUs are probed only when needed).
Result<strategies::Hardware> hardware_for(const dsl::JobSpec& spec, const Args& args, const dsl::Catalog& catalog);

}  // namespace tailor::cli
