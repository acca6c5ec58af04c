// A small command-line parser: positional arguments, --flag, --key VALUE,
// --key=VALUE, repeatable keys (--set a=1 --set b=2), and "--" to end flags.
// Unknown flags are errors with a suggestion.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace tailor {

struct FlagSpec {
  std::string name;          // without dashes: "output"
  bool takes_value = false;
  bool repeatable = false;
  char short_name = 0;       // 'o' for -o, or 0
};

class Args {
 public:
  static Result<Args> parse(const std::vector<std::string>& argv, const std::vector<FlagSpec>& flags);

  bool has(const std::string& flag) const { return values_.count(flag) > 0; }
  // The last value given for `flag`, or `fallback`.
  std::string get(const std::string& flag, const std::string& fallback = {}) const;
  const std::vector<std::string>& all(const std::string& flag) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positional_;
};

}  // namespace tailor
