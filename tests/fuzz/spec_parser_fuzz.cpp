// libFuzzer target: any byte string through the whole spec front end
// (UTF-8 check, YAML events, tree limits, extends, overrides, vars, field
// tables, cross-field rules, resolved-spec writers). It must never crash,
// leak, hang or throw.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "dsl/spec_fields.h"
#include "dsl/spec_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  tailor::dsl::LoadOptions opts;
  opts.check_files = false;  // no file system access beyond a missing base folder
  opts.overrides = {"training.seed=1"};
  const auto loaded = tailor::dsl::load_job_spec_text(text, "<fuzz>", "/nonexistent-tailor-fuzz", opts);
  if (loaded.ok()) {
    const auto tree = tailor::dsl::write_job_spec(*loaded.spec);
    (void)tailor::dsl::emit_yaml(tree);
    (void)tailor::dsl::emit_json(tree);
  }
  (void)loaded.diagnostics.to_string();
  return 0;
}
