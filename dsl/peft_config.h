// A PEFT LoRA adapter folder's adapter_config.json, read and checked
// without torch: the runner attaches adapters from it (runner/torch/lora.h)
// and the spec loader starts a job's adapters from one (model.adapter).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace tailor::dsl {

struct PeftConfig {
  std::int64_t rank = 0;             // r
  double alpha = 0;                  // lora_alpha
  std::vector<std::string> targets;  // target_modules, sorted; empty: "all-linear" or none given
  std::string base_model;            // base_model_name_or_path ("" when absent)
  // task_type SEQ_CLS: a sequence classifier's adapter (a reward model),
  // whose score is saved whole (modules_to_save).
  bool sequence_classifier = false;
  // A causal language model's modules trained whole beside the adapters
  // (the embedding and the head by name), sorted; the spec loader and the
  // runner check them against the family.
  std::vector<std::string> modules_to_save;
};

// dir/adapter_config.json. InvalidArgument naming the file and key for what
// Tailor's adapters do not compute: peft_type other than LORA, use_dora,
// use_rslora, bias other than "none", a sequence classifier's
// modules_to_save other than its score, rank_pattern or alpha_pattern, a regular
// expression in target_modules; a missing or non-positive r, a missing
// lora_alpha. NotFound when the file is missing.
Result<PeftConfig> read_peft_config_file(const std::string& dir);

}  // namespace tailor::dsl
