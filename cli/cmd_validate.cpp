// `tailor validate FILE...`: loads each spec and reports every problem.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <ostream>

#include "core/args.h"
#include "cli/commands.h"
#include "cli/spec_options.h"
#include "core/units.h"
#include "dsl/spec_fields.h"
#include "dsl/spec_loader.h"

namespace tailor::cli {
namespace {

constexpr const char* kValidateHelp = R"(usage: tailor validate [OPTIONS] FILE...

Checks job specs: YAML syntax, keys, types, ranges, presets, files, and the
rules between fields, and reads the data files as the runner will (files up
to 16 MiB whole, larger ones their first 10,000 records). Every problem is
reported with file:line:col and its key path; a data file's problem with
its own file:line too. Exit 0 when all files are valid, 1 otherwise.

options:
  --set KEY=VALUE     override a key after extends (repeatable), e.g.
                      --set training.lr=1e-4 --set strategy.forbid=[lora]
  --resolved          print each resolved spec (extends, vars, overrides,
                      presets and defaults applied)
  --output FORMAT     text (default) or json
  --catalog DIR       use models.yaml and gpus.yaml from DIR
  --no-check-files    do not require data files and model folders to exist,
                      nor read the data
  -q, --quiet         print errors only
  -h, --help          show this help
)";

nlohmann::ordered_json diagnostics_json(const dsl::Diagnostics& diags) {
  auto arr = nlohmann::ordered_json::array();
  for (const dsl::Diagnostic& d : diags.items()) {
    static constexpr const char* kSeverity[] = {"error", "warning", "note"};
    arr.push_back({{"severity", kSeverity[static_cast<int>(d.severity)]},
                   {"file", d.location.file},
                   {"line", d.location.line},
                   {"column", d.location.column},
                   {"path", d.path},
                   {"message", d.message}});
  }
  return arr;
}

std::string format_epochs(double epochs) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g epoch%s", epochs, epochs == 1.0 ? "" : "s");
  return buf;
}

std::string summary(const dsl::JobSpec& spec) {
  const dsl::ModelArch& a = spec.model.arch;
  std::string model = spec.model.preset.empty() ? std::string(dsl::to_string(a.family)) : spec.model.preset;
  std::string out = spec.name + ": " + model;
  if (a.layers > 0) out += " (" + format_count(static_cast<double>(a.parameter_count())) + " params)";
  out += ", seq_len " + std::to_string(spec.data.seq_len) + ", global batch " +
         std::to_string(spec.training.global_batch_size);
  out += spec.training.max_steps ? ", " + std::to_string(*spec.training.max_steps) + " steps"
                                 : ", " + format_epochs(spec.training.epochs);
  return out;
}

// "data.train: 1,234 records, 3.10 MiB" per file read.
std::string data_summary(const dsl::LoadedSpec& loaded) {
  std::string out;
  for (const dsl::DataFileFacts& f : loaded.data) out += "; " + f.key + ": " + dsl::describe(f);
  return out;
}

nlohmann::ordered_json data_json(const dsl::LoadedSpec& loaded) {
  auto arr = nlohmann::ordered_json::array();
  for (const dsl::DataFileFacts& f : loaded.data) {
    nlohmann::ordered_json j{{"key", f.key}, {"path", f.path}, {"format", dsl::to_string(f.format)},
                             {"bytes", f.bytes}, {"checked", f.checked}, {"all_checked", f.all_checked}};
    j["records"] = f.records < 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(f.records);
    if (f.format == dsl::DataFormat::kJson) j["json_array"] = f.json_array;
    arr.push_back(std::move(j));
  }
  return arr;
}

}  // namespace

int run_validate(const Argv& argv, Streams io) {
  auto command =
      parse_command(argv, with_spec_flags({{"resolved", false}, {"output", true}, {"quiet", false, false, 'q'}}),
                    "validate", kValidateHelp, io);
  if (!command.args) return command.exit_code;
  const Args& args = *command.args;
  const std::string format = args.get("output", "text");
  if (format != "text" && format != "json") {
    io.err << "tailor validate: --output must be text or json, got '" << format << "'\n";
    return kExitUsage;
  }
  if (args.positional().empty()) {
    io.err << "tailor validate: no spec file given\n" << kValidateHelp;
    return kExitUsage;
  }
  auto options = spec_options(args);
  if (!options.is_ok()) {
    io.err << "tailor validate: " << options.status().message() << "\n";
    return kExitInvalid;
  }
  const dsl::LoadOptions& opts = options->load;

  bool all_ok = true;
  auto results = nlohmann::ordered_json::array();
  bool first = true;
  for (const std::string& file : args.positional()) {
    const dsl::LoadedSpec loaded = dsl::load_job_spec(file, opts);
    all_ok = all_ok && loaded.ok();
    if (format == "json") {
      nlohmann::ordered_json r{{"file", file}, {"valid", loaded.ok()}, {"diagnostics", diagnostics_json(loaded.diagnostics)},
                               {"data", data_json(loaded)}};
      if (loaded.ok() && args.has("resolved")) {
        r["spec"] = nlohmann::ordered_json::parse(dsl::emit_json(dsl::write_job_spec(*loaded.spec)));
      }
      results.push_back(std::move(r));
      continue;
    }
    io.err << loaded.diagnostics.to_string();
    if (!loaded.ok()) {
      io.err << loaded.diagnostics.verdict(file) << "\n";
      continue;
    }
    if (args.has("resolved")) {
      if (!first) io.out << "---\n";
      io.out << "# " << file << " (resolved)\n" << dsl::emit_yaml(dsl::write_job_spec(*loaded.spec));
    } else if (!args.has("quiet")) {
      io.out << file << ": ok: " << summary(*loaded.spec) << data_summary(loaded) << "\n";
    }
    first = false;
  }
  if (format == "json") io.out << nlohmann::ordered_json{{"valid", all_ok}, {"files", results}}.dump(2) << "\n";
  return all_ok ? kExitOk : kExitInvalid;
}

}  // namespace tailor::cli
