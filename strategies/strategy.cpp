#include "strategies/strategy.h"

#include <utility>

namespace tailor::strategies {

std::string Strategy::describe() const {
  std::string out = dsl::to_string(precision);
  if (checkpoint_every == 1) {
    out += ", checkpointing";
  } else if (checkpoint_every > 1) {
    out += ", checkpointing every " + std::to_string(checkpoint_every) + " layers";
  }
  out += ", micro-batch " + std::to_string(micro_batch_size);
  if (grad_accumulation > 1) out += " x " + std::to_string(grad_accumulation) + " accumulation";
  if (adapter != Adapter::kNone) out += std::string(", ") + dsl::to_string(adapter) + " r" + std::to_string(lora_rank);
  // QLoRA's usual base is not named; another one is.
  if (quantization != default_quantization(adapter)) out += std::string(" over ") + dsl::to_string(quantization);
  out += std::string(", ") + dsl::to_string(optimizer);
  if (zero_stage > 0) out += ", ZeRO-" + std::to_string(zero_stage);
  if (offload != Offload::kNone) out += std::string(", offload ") + dsl::to_string(offload);
  if (num_gpus > 1) out += ", " + std::to_string(num_gpus) + " ranks";
  if (attention == Attention::kStandard) out += ", materialised attention";
  if (cross_entropy == CrossEntropy::kFusedLinear) out += ", fused linear cross-entropy";
  if (activation_offload) out += ", activations offloaded";
  if (reference == Reference::kAdapterOff) out += ", reference: adapters off";
  if (reference == Reference::kSeparate) out += ", reference: a frozen copy";
  if (reference == Reference::kPrecomputed) out += ", reference: precomputed";
  return out;
}

namespace {

constexpr std::pair<Attention, const char*> kAttentions[] = {{Attention::kStandard, "materialised"},
                                                             {Attention::kMemoryEfficient, "fused"}};
constexpr std::pair<CrossEntropy, const char*> kCrossEntropies[] = {{CrossEntropy::kLogits, "logits"},
                                                                    {CrossEntropy::kFusedLinear, "fused-linear"}};

template <class E, std::size_t N>
const char* name_in(const std::pair<E, const char*> (&table)[N], E v) {
  for (const auto& [e, n] : table) {
    if (e == v) return n;
  }
  return "?";
}

template <class E, std::size_t N>
std::optional<E> value_in(const std::pair<E, const char*> (&table)[N], std::string_view name) {
  for (const auto& [e, n] : table) {
    if (name == n) return e;
  }
  return std::nullopt;
}

}  // namespace

const char* to_string(Attention a) { return name_in(kAttentions, a); }
std::optional<Attention> attention_from_name(std::string_view name) { return value_in(kAttentions, name); }
const char* to_string(CrossEntropy c) { return name_in(kCrossEntropies, c); }
std::optional<CrossEntropy> cross_entropy_from_name(std::string_view name) {
  return value_in(kCrossEntropies, name);
}

}  // namespace tailor::strategies
