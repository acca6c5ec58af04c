// The memory techniques of the OOM decision tree as one vocabulary: the
// knobs' enums and their spec names, the technique names of
// strategy.allow / strategy.forbid with the knob that pins each, and the
// techniques a set of concrete knob values uses. The spec loader, the
// planner's constraints, the plan document and the runner's capabilities
// (runner/protocol/capabilities.h) all read these tables; adding a
// technique is a row here plus its effect in the planner and the runner.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tailor::dsl {

enum class Precision { kFp32, kBf16, kFp16, kPureBf16 };
enum class Adapter { kNone, kLora, kQlora };
enum class Optimizer { kAdamw, kAdamw8bit, kSgd, kLion };
enum class Offload { kNone, kOptimizer, kOptimizerAndParams };
// How QLoRA stores the frozen base weights under its adapters (a knob of
// its own: strategy.quantization; "qlora" is the adapter over any of these
// but kNone). Bytes per parameter: strategies/memory_model.cpp.
enum class Quantization {
  kNone,       // compute dtype (or fp32)
  kInt8,       // LLM.int8-style: 1 byte/param + an fp32 scale per output row
  kNf4,        // 4-bit NormalFloat, block 64, fp32 absmax per block
  kNf4Double,  // NF4 with the absmax values quantised again (8-bit, block 256)
};
// Where preference training (training.method: dpo) gets its reference
// model's log-probabilities; not a technique of allow/forbid, a placement.
enum class Reference {
  kNone,        // sft: no reference
  kAdapterOff,  // LoRA/QLoRA: the same weights with the adapters switched off; no bytes, one more forward
  kSeparate,    // a frozen copy of the starting weights beside the trained ones
  kPrecomputed, // one forward over the data before training; log-probabilities cached on disk, no bytes
};

// A technique the planner may choose (or a spec allow or forbid).
enum class Technique {
  kFp32,
  kBf16,
  kFp16,
  kPureBf16,
  kGradientCheckpointing,
  kGradientAccumulation,
  kLora,
  kQlora,
  kAdapters,  // either adapter
  kAdamw8bit,
  kSgd,
  kLion,
  kZero1,
  kZero2,
  kZero3,
  kOffloadOptimizer,
  kOffloadParams,
};

// The spec knob that decides a technique (and pins it when set).
enum class Knob { kPrecision, kCheckpointing, kMicroBatch, kAdapter, kQuantization, kOptimizer, kZeroStage, kOffload };

struct TechniqueInfo {
  Technique id;
  const char* name;  // as written in allow/forbid
  Knob knob;
};

// The names of a knob's values as written in specs and plan documents
// ("pure-bf16", "adamw_8bit", "optimizer_and_params"): defined for
// Precision, Adapter, Quantization, Optimizer, Offload and Reference.
template <class E>
std::span<const std::pair<E, const char*>> enum_names();
template <class E>
std::optional<E> enum_from_name(std::string_view name) {
  for (const auto& [v, n] : enum_names<E>()) {
    if (name == n) return v;
  }
  return std::nullopt;
}

const char* to_string(Precision v);
const char* to_string(Adapter v);
const char* to_string(Quantization v);  // "none" | "int8" | "nf4" | "nf4-double-quant"
const char* to_string(Optimizer v);
const char* to_string(Offload v);
const char* to_string(Reference v);

// Every technique, in the order the documentation lists them.
std::span<const TechniqueInfo> techniques();
const char* to_string(Technique t);
Knob knob_of(Technique t);
std::optional<Technique> technique_from_name(std::string_view name);
std::vector<std::string> technique_names();
// The key path of a knob in a spec ("strategy.precision", "training.micro_batch_size").
const char* knob_path(Knob k);

// The concrete knob values a technique list is computed from: a planner
// strategy, or the pinned part of a spec (unset = not pinned).
struct KnobValues {
  std::optional<Precision> precision;
  std::int64_t checkpoint_every = 0;   // > 0: gradient checkpointing
  std::int64_t grad_accumulation = 1;  // > 1: gradient accumulation
  std::optional<Adapter> adapter;
  std::optional<Quantization> quantization;  // other than kNone: QLoRA, when the adapter is unset
  std::optional<Optimizer> optimizer;
  std::int64_t zero_stage = 0;
  std::optional<Offload> offload;
};

struct StrategySpec;  // job_spec.h

// The values a spec's strategy section pins (the micro-batch aside): the
// one conversion from a spec's pins, read by the spec loader's allow/forbid
// checks and the runner's capabilities. A strategy's values:
// strategies::Constraints::techniques_of().
KnobValues pinned_knob_values(const StrategySpec& s);

// The techniques those values use, in table order (an adapter also uses
// "adapters"; parameter offload also uses optimizer offload).
std::vector<Technique> techniques_used(const KnobValues& v);

bool contains(const std::vector<Technique>& list, Technique t);

// Whether a strategy.allow list admits t, as users name techniques: a list
// naming a technique admits what it includes ("lora" and "qlora" each admit
// the "adapters" they use, "offload_params" the optimizer offload it
// includes), and "adapters" admits either adapter. An empty list admits
// everything.
bool allow_list_admits(const std::vector<Technique>& allow, Technique t);

}  // namespace tailor::dsl
