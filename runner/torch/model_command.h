// What `tailor-runner generate`, `serve` and `export` share at their start:
// the flags parsed (--help added), one MODEL folder, and how their usage
// errors and failures read. Torch-free header.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/args.h"

namespace tailor::runner {

// Their exit codes: 0 done, 1 bad input, 2 a bad command line (usage()),
// 5 the work failed.
constexpr int kModelCommandOk = 0, kModelCommandInvalid = 1, kModelCommandFailed = 5;

struct ModelCommand {
  const char* name;  // "generate"
  const char* help;  // its usage text
  std::ostream& out;
  std::ostream& err;

  // "tailor-runner NAME: WHY" and the usage; exit code 2.
  int usage(const std::string& why) const {
    err << "tailor-runner " << name << ": " << why << "\n" << help;
    return 2;
  }
  // "tailor-runner NAME: WHY"; `code`.
  int fail(int code, const std::string& why) const {
    err << "tailor-runner " << name << ": " << why << "\n";
    return code;
  }

  // The parsed flags with one positional MODEL, or nullopt with `exit_code`
  // set: 0 after printing --help, 2 for a bad command line.
  std::optional<Args> parse(const std::vector<std::string>& argv, std::vector<FlagSpec> flags, int& exit_code) const {
    flags.push_back({"help", false, false, 'h'});
    auto parsed = Args::parse(argv, flags);
    if (!parsed.is_ok()) {
      exit_code = usage(parsed.status().message());
      return std::nullopt;
    }
    if (parsed->has("help")) {
      out << help;
      exit_code = 0;
      return std::nullopt;
    }
    if (parsed->positional().size() != 1) {
      exit_code = usage("expected one MODEL folder");
      return std::nullopt;
    }
    return std::move(*parsed);
  }
};

}  // namespace tailor::runner
