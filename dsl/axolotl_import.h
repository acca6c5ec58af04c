// Converting an Axolotl training config into a Tailor job spec, for people
// who arrive with one. Keys that have no Tailor equivalent are reported as
// warnings with their line, never silently dropped.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "dsl/diagnostics.h"

namespace tailor::dsl {

struct AxolotlImport {
  std::string spec_yaml;  // a complete `kind: TrainingJob` document
  Diagnostics diagnostics;  // warnings for unmapped keys; errors when nothing could be produced
  bool ok() const { return !diagnostics.has_errors(); }
};

// `text` is the Axolotl YAML; `file_name` labels diagnostics; `job_name`
// becomes the spec's name.
AxolotlImport import_axolotl(std::string_view text, std::string_view file_name, std::string_view job_name);

}  // namespace tailor::dsl
