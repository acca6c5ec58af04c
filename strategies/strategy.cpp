#include "strategies/strategy.h"

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
  out += std::string(", ") + dsl::to_string(optimizer);
  if (zero_stage > 0) out += ", ZeRO-" + std::to_string(zero_stage);
  if (offload != Offload::kNone) out += std::string(", offload ") + dsl::to_string(offload);
  if (num_gpus > 1) out += ", " + std::to_string(num_gpus) + " GPUs";
  if (attention == Attention::kStandard) out += ", materialised attention";
  return out;
}

const char* to_string(Attention a) { return a == Attention::kStandard ? "materialised" : "fused"; }

}  // namespace tailor::strategies
