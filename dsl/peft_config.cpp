#include "dsl/peft_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace tailor::dsl {

Result<PeftConfig> read_peft_config_file(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "adapter_config.json").string();
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::not_found("cannot open " + path + " (not a PEFT adapter folder)");
  const nlohmann::json cfg = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!cfg.is_object()) return Status::invalid_argument(path + ": not a JSON object");
  auto bad = [&](const std::string& key, const std::string& why) {
    return Status::invalid_argument(path + ": " + key + ": " + why);
  };
  if (cfg.contains("peft_type") && cfg["peft_type"] != "LORA") {
    return bad("peft_type", cfg["peft_type"].dump() + " is not built; Tailor applies LORA adapters");
  }
  for (const char* flag : {"use_dora", "use_rslora"}) {
    if (cfg.contains(flag) && cfg[flag].is_boolean() && cfg[flag].get<bool>()) {
      return bad(flag, "true is not built; Tailor applies plain LoRA");
    }
  }
  if (cfg.contains("bias") && cfg["bias"].is_string() && cfg["bias"] != "none") {
    return bad("bias", cfg["bias"].dump() + " is not built; Tailor's adapters train no biases (\"none\")");
  }
  PeftConfig out;
  out.sequence_classifier = cfg.value("task_type", nlohmann::json()) == "SEQ_CLS";
  if (const auto it = cfg.find("modules_to_save"); it != cfg.end() && !it->is_null()) {
    if (!it->is_array() ||
        !std::all_of(it->begin(), it->end(), [](const nlohmann::json& m) { return m.is_string(); })) {
      return bad("modules_to_save", "expected a list of module names");
    }
    // PEFT's SEQ_CLS task saves a classifier's head whole: "score" in every
    // family Tailor reads ("classifier" is other models' name for it).
    const bool score_only =
        std::all_of(it->begin(), it->end(), [](const nlohmann::json& m) { return m == "score" || m == "classifier"; });
    if (out.sequence_classifier && !score_only) {
      return bad("modules_to_save",
                 it->dump() + ": a sequence classifier's adapter trains its score whole, nothing else");
    }
    if (!out.sequence_classifier) {
      for (const auto& m : *it)
        out.modules_to_save.push_back(m.get<std::string>());
      std::sort(out.modules_to_save.begin(), out.modules_to_save.end());
      out.modules_to_save.erase(std::unique(out.modules_to_save.begin(), out.modules_to_save.end()),
                                out.modules_to_save.end());
    }
  }
  for (const char* pattern : {"rank_pattern", "alpha_pattern"}) {
    if (cfg.contains(pattern) && cfg[pattern].is_object() && !cfg[pattern].empty()) {
      return bad(pattern, "per-module ranks or alphas are not built");
    }
  }
  if (!cfg.contains("r") || !cfg["r"].is_number_integer() || cfg["r"].get<std::int64_t>() < 1) {
    return bad("r", "expected a positive integer");
  }
  out.rank = cfg["r"].get<std::int64_t>();
  if (!cfg.contains("lora_alpha") || !cfg["lora_alpha"].is_number()) return bad("lora_alpha", "expected a number");
  out.alpha = cfg["lora_alpha"].get<double>();
  const nlohmann::json targets = cfg.value("target_modules", nlohmann::json());
  if (targets.is_array()) {
    for (const auto& t : targets) {
      if (!t.is_string()) return bad("target_modules", "expected a list of module names");
      out.targets.push_back(t.get<std::string>());
    }
    std::sort(out.targets.begin(), out.targets.end());
  } else if (targets.is_string() && targets != "all-linear") {
    return bad("target_modules", "a regular expression is not built; list the module names");
  } else if (!targets.is_string() && !targets.is_null()) {
    return bad("target_modules", "expected a list of module names");
  }
  const auto base = cfg.find("base_model_name_or_path");
  out.base_model = base != cfg.end() && base->is_string() ? base->get<std::string>() : std::string();
  return out;
}

}  // namespace tailor::dsl
