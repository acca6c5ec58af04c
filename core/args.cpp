#include "core/args.h"

#include "core/text.h"

namespace tailor {

Result<Args> Args::parse(const std::vector<std::string>& argv, const std::vector<FlagSpec>& flags) {
  Args out;
  std::vector<std::string> names;
  for (const FlagSpec& f : flags) names.push_back("--" + f.name);
  bool flags_done = false;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (flags_done || a == "-" || a.empty() || a[0] != '-') {
      out.positional_.push_back(a);
      continue;
    }
    if (a == "--") {
      flags_done = true;
      continue;
    }
    std::string name, value;
    bool has_value = false;
    const FlagSpec* spec = nullptr;
    if (starts_with(a, "--")) {
      name = a.substr(2);
      if (auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name.resize(eq);
        has_value = true;
      }
      for (const FlagSpec& f : flags) {
        if (f.name == name) spec = &f;
      }
    } else if (a.size() == 2) {
      for (const FlagSpec& f : flags) {
        if (f.short_name == a[1]) spec = &f;
      }
      if (spec) name = spec->name;
    }
    if (spec == nullptr) {
      std::string msg = "unknown option " + a;
      std::string hint = closest_match(starts_with(a, "--") ? "--" + name : a, names);
      if (!hint.empty()) msg += "; did you mean " + hint + "?";
      return Status::invalid_argument(msg);
    }
    if (spec->takes_value && !has_value) {
      if (i + 1 >= argv.size()) return Status::invalid_argument("option --" + name + " needs a value");
      value = argv[++i];
    } else if (!spec->takes_value && has_value) {
      return Status::invalid_argument("option --" + name + " takes no value");
    }
    auto& slot = out.values_[name];
    if (!spec->repeatable && !slot.empty()) {
      return Status::invalid_argument("option --" + name + " given more than once");
    }
    slot.push_back(value);
  }
  return out;
}

std::string Args::get(const std::string& flag, const std::string& fallback) const {
  auto it = values_.find(flag);
  return it == values_.end() || it->second.empty() ? fallback : it->second.back();
}

const std::vector<std::string>& Args::all(const std::string& flag) const {
  static const std::vector<std::string> kEmpty;
  auto it = values_.find(flag);
  return it == values_.end() ? kEmpty : it->second;
}

}  // namespace tailor
