// `tailor schema`: the JSON Schema of a job spec.
#include <ostream>

#include "core/args.h"
#include "cli/commands.h"
#include "dsl/catalog.h"
#include "dsl/spec_fields.h"

namespace tailor::cli {

constexpr const char* kSchemaHelp = R"(usage: tailor schema

Prints the JSON Schema (draft 2020-12) of a TrainingJob spec, with the
built-in catalog's model presets and GPU names as examples. Point your
editor's YAML language server at it for completion and inline docs, e.g.
  tailor schema > tailor.schema.json
and add '# yaml-language-server: $schema=tailor.schema.json' to a spec.
)";

int run_schema(const Argv& argv, Streams io) {
  auto command = parse_command(argv, {}, "schema", kSchemaHelp, io);
  if (!command.args) return command.exit_code;
  if (!command.args->positional().empty()) {
    io.err << "tailor schema: takes no arguments\n" << kSchemaHelp;
    return kExitUsage;
  }
  io.out << dsl::job_spec_json_schema(&dsl::Catalog::builtin());
  return kExitOk;
}

}  // namespace tailor::cli
