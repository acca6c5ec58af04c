// `tailor schema`: the JSON Schema of a job spec.
#include <ostream>

#include "core/args.h"
#include "cli/commands.h"
#include "dsl/spec_fields.h"

namespace tailor::cli {

constexpr const char* kSchemaHelp = R"(usage: tailor schema

Prints the JSON Schema (draft 2020-12) of a TrainingJob spec. Point your
editor's YAML language server at it for completion and inline docs, e.g.
  tailor schema > tailor.schema.json
and add '# yaml-language-server: $schema=tailor.schema.json' to a spec.
)";

int run_schema(const Argv& argv, Streams io) {
  auto parsed = Args::parse(argv, {{"help", false, false, 'h'}});
  if (!parsed.is_ok() || !parsed->positional().empty()) {
    io.err << "tailor schema: " << (parsed.is_ok() ? "takes no arguments" : parsed.status().message()) << "\n"
           << kSchemaHelp;
    return kExitUsage;
  }
  if (parsed->has("help")) {
    io.out << kSchemaHelp;
    return kExitOk;
  }
  io.out << dsl::job_spec_json_schema();
  return kExitOk;
}

}  // namespace tailor::cli
