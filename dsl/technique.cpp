#include "dsl/technique.h"

#include <algorithm>
#include <array>

#include "dsl/job_spec.h"

namespace tailor::dsl {
namespace {

constexpr std::array<std::pair<Precision, const char*>, 4> kPrecisions = {{
    {Precision::kFp32, "fp32"}, {Precision::kBf16, "bf16"}, {Precision::kFp16, "fp16"}, {Precision::kPureBf16, "pure-bf16"}}};
constexpr std::array<std::pair<Adapter, const char*>, 3> kAdapters = {
    {{Adapter::kNone, "none"}, {Adapter::kLora, "lora"}, {Adapter::kQlora, "qlora"}}};
constexpr std::array<std::pair<Quantization, const char*>, 4> kQuantizations = {
    {{Quantization::kNone, "none"},
     {Quantization::kInt8, "int8"},
     {Quantization::kNf4, "nf4"},
     {Quantization::kNf4Double, "nf4-double-quant"}}};
constexpr std::array<std::pair<Optimizer, const char*>, 4> kOptimizers = {
    {{Optimizer::kAdamw, "adamw"}, {Optimizer::kAdamw8bit, "adamw_8bit"}, {Optimizer::kSgd, "sgd"}, {Optimizer::kLion, "lion"}}};
constexpr std::array<std::pair<Offload, const char*>, 3> kOffloads = {
    {{Offload::kNone, "none"}, {Offload::kOptimizer, "optimizer"}, {Offload::kOptimizerAndParams, "optimizer_and_params"}}};
constexpr std::array<std::pair<Reference, const char*>, 4> kReferences = {{{Reference::kNone, "none"},
                                                                          {Reference::kAdapterOff, "adapter_off"},
                                                                          {Reference::kSeparate, "separate"},
                                                                          {Reference::kPrecomputed, "precomputed"}}};

constexpr std::array<TechniqueInfo, 17> kTechniques = {{
    {Technique::kFp32, "fp32", Knob::kPrecision},
    {Technique::kBf16, "bf16", Knob::kPrecision},
    {Technique::kFp16, "fp16", Knob::kPrecision},
    {Technique::kPureBf16, "pure-bf16", Knob::kPrecision},
    {Technique::kGradientCheckpointing, "gradient_checkpointing", Knob::kCheckpointing},
    {Technique::kGradientAccumulation, "gradient_accumulation", Knob::kMicroBatch},
    {Technique::kLora, "lora", Knob::kAdapter},
    {Technique::kQlora, "qlora", Knob::kAdapter},
    {Technique::kAdapters, "adapters", Knob::kAdapter},
    {Technique::kAdamw8bit, "adamw_8bit", Knob::kOptimizer},
    {Technique::kSgd, "sgd", Knob::kOptimizer},
    {Technique::kLion, "lion", Knob::kOptimizer},
    {Technique::kZero1, "zero1", Knob::kZeroStage},
    {Technique::kZero2, "zero2", Knob::kZeroStage},
    {Technique::kZero3, "zero3", Knob::kZeroStage},
    {Technique::kOffloadOptimizer, "offload_optimizer", Knob::kOffload},
    {Technique::kOffloadParams, "offload_params", Knob::kOffload},
}};

template <class E, std::size_t N>
const char* name_in(const std::array<std::pair<E, const char*>, N>& table, E v) {
  for (const auto& [e, n] : table) {
    if (e == v) return n;
  }
  return "?";
}

const TechniqueInfo& info(Technique t) { return kTechniques[static_cast<std::size_t>(t)]; }

}  // namespace

template <>
std::span<const std::pair<Precision, const char*>> enum_names<Precision>() { return kPrecisions; }
template <>
std::span<const std::pair<Adapter, const char*>> enum_names<Adapter>() { return kAdapters; }
template <>
std::span<const std::pair<Quantization, const char*>> enum_names<Quantization>() {
  return kQuantizations;
}
template <>
std::span<const std::pair<Optimizer, const char*>> enum_names<Optimizer>() {
  return kOptimizers;
}
template <>
std::span<const std::pair<Offload, const char*>> enum_names<Offload>() { return kOffloads; }
template <>
std::span<const std::pair<Reference, const char*>> enum_names<Reference>() { return kReferences; }

const char* to_string(Precision v) { return name_in(kPrecisions, v); }
const char* to_string(Adapter v) { return name_in(kAdapters, v); }
const char* to_string(Quantization v) { return name_in(kQuantizations, v); }
const char* to_string(Optimizer v) { return name_in(kOptimizers, v); }
const char* to_string(Offload v) { return name_in(kOffloads, v); }
const char* to_string(Reference v) { return name_in(kReferences, v); }

std::span<const TechniqueInfo> techniques() { return kTechniques; }
const char* to_string(Technique t) { return info(t).name; }
Knob knob_of(Technique t) { return info(t).knob; }

std::optional<Technique> technique_from_name(std::string_view name) {
  for (const TechniqueInfo& t : kTechniques) {
    if (name == t.name) return t.id;
  }
  return std::nullopt;
}

std::vector<std::string> technique_names() {
  std::vector<std::string> out;
  for (const TechniqueInfo& t : kTechniques) out.emplace_back(t.name);
  return out;
}

const char* knob_path(Knob k) {
  switch (k) {
    case Knob::kPrecision: return "strategy.precision";
    case Knob::kCheckpointing: return "strategy.gradient_checkpointing";
    case Knob::kMicroBatch: return "training.micro_batch_size";
    case Knob::kAdapter: return "strategy.adapter";
    case Knob::kQuantization: return "strategy.quantization";
    case Knob::kOptimizer: return "strategy.optimizer";
    case Knob::kZeroStage: return "strategy.zero_stage";
    case Knob::kOffload: return "strategy.offload";
  }
  return "strategy";
}

KnobValues pinned_knob_values(const StrategySpec& s) {
  KnobValues v;
  v.precision = s.precision;
  v.checkpoint_every = s.gradient_checkpointing.value_or(0);
  v.adapter = s.adapter;
  v.quantization = s.quantization;
  v.optimizer = s.optimizer;
  v.zero_stage = s.zero_stage.value_or(0);
  v.offload = s.offload;
  return v;
}

std::vector<Technique> techniques_used(const KnobValues& v) {
  std::vector<Technique> out;
  // A precision's technique has the precision's name.
  if (v.precision) out.push_back(*technique_from_name(to_string(*v.precision)));
  if (v.checkpoint_every > 0) out.push_back(Technique::kGradientCheckpointing);
  if (v.grad_accumulation > 1) out.push_back(Technique::kGradientAccumulation);
  // So does an adapter's, and every optimizer's but the default AdamW's.
  // A quantised base is QLoRA's, whatever the adapter value says (a pin
  // that contradicts it is the spec loader's error).
  std::optional<Adapter> adapter = v.adapter;
  if (!adapter && v.quantization && *v.quantization != Quantization::kNone) adapter = Adapter::kQlora;
  if (adapter && *adapter != Adapter::kNone) {
    out.push_back(*technique_from_name(to_string(*adapter)));
    out.push_back(Technique::kAdapters);
  }
  if (v.optimizer && *v.optimizer != Optimizer::kAdamw) out.push_back(*technique_from_name(to_string(*v.optimizer)));
  constexpr Technique kZero[] = {Technique::kZero1, Technique::kZero2, Technique::kZero3};
  if (v.zero_stage >= 1 && v.zero_stage <= 3) out.push_back(kZero[v.zero_stage - 1]);
  if (v.offload && *v.offload != Offload::kNone) out.push_back(Technique::kOffloadOptimizer);
  if (v.offload == Offload::kOptimizerAndParams) out.push_back(Technique::kOffloadParams);
  return out;
}

bool contains(const std::vector<Technique>& list, Technique t) {
  return std::find(list.begin(), list.end(), t) != list.end();
}

bool allow_list_admits(const std::vector<Technique>& allow, Technique t) {
  if (allow.empty() || contains(allow, t)) return true;
  switch (t) {
    case Technique::kAdapters: return contains(allow, Technique::kLora) || contains(allow, Technique::kQlora);
    case Technique::kLora:
    case Technique::kQlora: return contains(allow, Technique::kAdapters);
    case Technique::kOffloadOptimizer: return contains(allow, Technique::kOffloadParams);
    default: return false;
  }
}

}  // namespace tailor::dsl
