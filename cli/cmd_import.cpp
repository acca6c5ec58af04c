// `tailor import axolotl FILE`: converts an Axolotl config to a job spec.
#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>

#include "core/args.h"
#include "cli/commands.h"
#include "dsl/axolotl_import.h"

namespace tailor::cli {
namespace {

constexpr const char* kImportHelp = R"(usage: tailor import axolotl FILE.yml [-o OUT.yaml] [--name NAME]

Converts an Axolotl fine-tuning config into a Tailor job spec. Keys that
have no Tailor equivalent are reported as warnings with their line; strategy
knobs the Axolotl file does not set stay 'auto' for the planner.

options:
  -o, --output-file PATH  write the spec to PATH (default: standard output);
                          refuses to overwrite an existing file unless --force
  --name NAME             job name (default: the input file name)
  --force                 overwrite the output file
  -h, --help              show this help
)";

}  // namespace

int run_import(const Argv& argv, Streams io) {
  auto command = parse_command(argv, {{"output-file", true, false, 'o'}, {"name", true}, {"force", false}}, "import",
                               kImportHelp, io);
  if (!command.args) return command.exit_code;
  const Args& args = *command.args;
  const auto& pos = args.positional();
  if (pos.size() != 2 || pos[0] != "axolotl") {
    io.err << "tailor import: expected 'axolotl FILE'\n" << kImportHelp;
    return kExitUsage;
  }
  const std::string& file = pos[1];
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    io.err << file << ": error: cannot open file\n";
    return kExitInvalid;
  }
  std::ostringstream text;
  text << in.rdbuf();
  std::string name = args.get("name");
  if (name.empty()) {
    name = std::filesystem::path(file).stem().string();
    for (char& c : name) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '-';
    }
  }
  const dsl::AxolotlImport result = dsl::import_axolotl(text.str(), file, name);
  io.err << result.diagnostics.to_string();
  if (!result.ok()) return kExitInvalid;

  if (!args.has("output-file")) {
    io.out << result.spec_yaml;
    return kExitOk;
  }
  // Write beside the target and rename, so a failure never leaves half a file.
  const std::filesystem::path out_path(args.get("output-file"));
  std::error_code ec;
  if (std::filesystem::exists(out_path, ec) && !args.has("force")) {
    io.err << out_path.string() << ": error: file exists; pass --force to overwrite\n";
    return kExitInvalid;
  }
  const std::filesystem::path tmp = out_path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << result.spec_yaml;
    out.flush();
    if (!out) {
      io.err << tmp.string() << ": error: cannot write file\n";
      std::filesystem::remove(tmp, ec);
      return kExitInvalid;
    }
  }
  std::filesystem::rename(tmp, out_path, ec);
  if (ec) {
    io.err << out_path.string() << ": error: " << ec.message() << "\n";
    std::filesystem::remove(tmp, ec);
    return kExitInvalid;
  }
  io.err << "wrote " << out_path.string() << "\n";
  return kExitOk;
}

}  // namespace tailor::cli
