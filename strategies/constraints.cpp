#include "strategies/constraints.h"

#include <algorithm>

#include "strategies/candidate.h"
#include "strategies/knobs.h"

namespace tailor::strategies {
namespace {

// The divisors of n in increasing order, by trial division up to sqrt(n).
std::vector<std::int64_t> divisors(std::int64_t n) {
  std::vector<std::int64_t> low, high;
  for (std::int64_t d = 1; d * d <= n; ++d) {
    if (n % d != 0) continue;
    low.push_back(d);
    if (d != n / d) high.push_back(n / d);
  }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

}  // namespace

Constraints::Constraints(const dsl::JobSpec& spec, const Hardware& hw)
    : spec_(spec), pins_(spec.strategy), training_(spec.training) {
  on_cpu_ = hw.cpu_only();
  const std::int64_t devices = on_cpu_ ? 1 : hw.gpu_count();
  ranks_fixed_ = spec.resources.ranks.has_value();
  num_gpus_ = spec.resources.ranks.value_or(devices);
  device_ = rank_device(spec, hw);
  if (!on_cpu_ && num_gpus_ > devices) {
    error_ = "resources.ranks is " + std::to_string(num_gpus_) + ", but " + hw.describe() +
             " has " + std::to_string(devices) + " GPU" + (devices == 1 ? "" : "s") + ": one rank per GPU at most";
    return;
  }
  const std::int64_t g = spec.training.global_batch_size;
  if (g % num_gpus_ != 0) {
    error_ = "global_batch_size " + std::to_string(g) + " is not divisible by the " + std::to_string(num_gpus_) +
             (on_cpu_ ? " ranks" : " GPUs") + ": each rank must process the same number of sequences";
    return;
  }
  const std::int64_t per_gpu = g / num_gpus_;
  micro_batches_ = divisors(per_gpu);
  if (spec.training.micro_batch_size && per_gpu % *spec.training.micro_batch_size != 0) {
    error_ = "micro_batch_size " + std::to_string(*spec.training.micro_batch_size) + " does not divide the " +
             std::to_string(per_gpu) + " sequences per GPU of the global batch";
  }
}

std::vector<std::int64_t> Constraints::micro_batches_for(std::int64_t ranks) const {
  if (ranks == num_gpus_) return micro_batches_;
  return divisors(training_.global_batch_size / ranks);
}

std::vector<std::int64_t> Constraints::rank_counts() const {
  if (num_gpus_ == 1 || ranks_fixed_) return {num_gpus_};
  return {num_gpus_, 1};
}

std::vector<dsl::Technique> Constraints::techniques_of(const Strategy& s) {
  dsl::KnobValues v;
  v.precision = s.precision;
  v.checkpoint_every = s.checkpoint_every;
  v.grad_accumulation = s.grad_accumulation;
  v.adapter = s.adapter;
  v.quantization = s.quantization;
  v.optimizer = s.optimizer;
  v.zero_stage = s.zero_stage;
  v.offload = s.offload;
  return dsl::techniques_used(v);
}

bool Constraints::allows(dsl::Technique t) const {
  if (dsl::contains(pins_.forbid, t)) return false;
  return t == dsl::Technique::kFp32 || dsl::allow_list_admits(pins_.allow, t);
}

bool Constraints::pinned(dsl::Knob k) const {
  bool out = false;
  for_each_knob([&](const auto& row) {
    if (row.knob == k) out = row.pinned_in(spec_).has_value();
  });
  return out;
}

std::optional<Constraints::Refusal> Constraints::refusal(const Strategy& s) const {
  const dsl::StrategySpec& p = pins_;
  const char* pin = nullptr;
  for_each_knob([&](const auto& row) {
    const auto& v = row.pinned_in(spec_);
    if (!pin && v && s.*row.value != *v) pin = row.label;
  });
  if (pin) return Refusal::pinned_knob(pin);
  // Their learning rates mean something else than AdamW's: a spec's lr
  // would be wrong for them.
  if (!p.optimizer && s.optimizer == Optimizer::kSgd) return Refusal{"SGD is used only when pinned"};
  if (!p.optimizer && s.optimizer == Optimizer::kLion) return Refusal{"Lion is used only when pinned"};
  if (s.num_gpus != num_gpus_ && (ranks_fixed_ || s.num_gpus != 1)) {
    return Refusal{ranks_fixed_ ? "resources.ranks fixes the ranks" : "ranks are every GPU or one"};
  }
  if (s.micro_batch_size * s.grad_accumulation * s.num_gpus != training_.global_batch_size) {
    return Refusal{"does not keep the global batch"};
  }
  if (s.adapter != Adapter::kNone && s.lora_rank != p.lora.r) return Refusal{"LoRA rank differs from the spec"};
  // Device support.
  if (s.precision == Precision::kFp16 && on_cpu_) {
    return Refusal{"fp16 has no CPU kernels worth training with (LibTorch runs CPU fp16 matmuls as slow emulation); pin bf16 or "
           "fp32 on the CPU, or plan for a GPU"};
  }
  if (s.precision == Precision::kFp16 && device_.peak_tflops_fp16 <= 0) return Refusal{"no fp16 on this device"};
  if ((s.precision == Precision::kBf16 || s.precision == Precision::kPureBf16) && !device_.bf16) {
    return Refusal{"no bf16 on this device"};
  }
  // On the CPU host and device memory are one: nothing to gain by
  // offloading, so only a pin asks for it (tailor-runner then keeps the
  // offloaded bytes in its host ledger, apart from the budget).
  if (on_cpu_ && s.offload != Offload::kNone && !p.offload) return Refusal{"offload needs GPUs (or a pin)"};
  if (s.zero_stage > 0 && s.num_gpus == 1 && s.offload == Offload::kNone) return Refusal{"ZeRO on one rank only with offload"};
  if (s.offload != Offload::kNone && s.zero_stage == 0) return Refusal{"offload needs ZeRO stage 1 or more"};
  if (s.offload == Offload::kOptimizerAndParams && s.zero_stage != 3) return Refusal{"parameter offload needs ZeRO-3"};
  if ((s.adapter == Adapter::kQlora) != (s.quantization != Quantization::kNone)) return Refusal{"QLoRA means a quantised base"};
  if (dsl::needs_reference(spec_.training.method)) {
    const dsl::Reference r = reference_for(spec_, s);
    if (r == dsl::Reference::kAdapterOff && s.adapter == Adapter::kNone) {
      return Refusal{"the reference adapter_off needs adapters (strategy.reference is pinned)"};
    }
    // Beside adapters the copy is model.adapter's adapters, frozen (whole on
    // every rank); without model.adapter they start at zero. A full copy is
    // sharded under ZeRO-3 as the trained weights are.
    const bool started = !spec_.model.adapter.empty();
    if (r == dsl::Reference::kSeparate && s.adapter != Adapter::kNone && !started) {
      return Refusal{
          "a separate reference beside adapters is the adapters model.adapter starts from, frozen; without "
          "model.adapter adapter_off is the same reference without the copy"};
    }
  }
  // strategy.lora.modules_to_save under ZeRO-3 or offload: tailor-runner's
  // are measured; another stack's (PEFT's copies inside FSDP's units or
  // DeepSpeed's offload) are not modelled.
  if (s.adapter != Adapter::kNone && !p.lora.modules_to_save.empty() &&
      (s.zero_stage >= 3 || s.offload != Offload::kNone) && spec_.planner.runtime != dsl::Runtime::kTailor) {
    return Refusal{"ZeRO-3 and offload with strategy.lora.modules_to_save are modelled for tailor-runner only"};
  }
  // Answers to eval_prompts are generated on rank 0 alone, from the whole
  // model; sharded parameters would need every rank's forward in lockstep.
  if (!spec_.training.eval_prompts.empty() && s.zero_stage == 3) {
    return Refusal{"training.eval_prompts under ZeRO-3 is not built (generation needs the whole model on one rank)"};
  }
  // bf16 keeps 8 bits of mantissa, so a pure-bf16 weight ignores an update
  // under about 2^-9 of itself, and 8-bit states round the moments as well:
  // on a full fine-tune's pretrained weights (small updates to large values)
  // the pair loses updates, so it is a trade the spec must accept. Adapters
  // start at zero, where bf16's relative precision costs little.
  if (s.adapter == Adapter::kNone && s.precision == Precision::kPureBf16 && s.optimizer == Optimizer::kAdamw8bit &&
      !p.allow_lossy && !(p.precision && p.optimizer)) {
    return Refusal{"a full fine-tune with pure bf16 weights and 8-bit optimizer states loses small updates "
           "(strategy.allow_lossy: true allows the trade)"};
  }
  // Techniques the spec does not allow, unless a pin asked for them.
  for (dsl::Technique t : techniques_of(s)) {
    if (!pinned(dsl::knob_of(t)) && !allows(t)) return Refusal::not_allowed(t);
  }
  return std::nullopt;
}

std::string Constraints::why_not(const Strategy& s) const {
  const auto r = refusal(s);
  if (!r) return {};
  if (r->pinned) return std::string(r->pinned) + " is pinned";
  if (r->technique) return "\"" + std::string(dsl::to_string(*r->technique)) + "\" is not allowed by the spec";
  return r->text;
}

bool Constraints::admits(const Strategy& s) const { return !refusal(s).has_value(); }

Strategy Constraints::baseline() const {
  // Each knob as pinned, else as a default Strategy has it (no technique);
  // then the whole global batch in one micro-batch unless that is pinned.
  Strategy s;
  for_each_knob([&](const auto& row) {
    if (const auto& v = row.pinned_in(spec_)) s.*row.value = *v;
  });
  s.num_gpus = num_gpus_;
  const std::int64_t per_gpu = training_.global_batch_size / num_gpus_;
  s.micro_batch_size = training_.micro_batch_size.value_or(per_gpu);
  s.grad_accumulation = per_gpu / std::max<std::int64_t>(1, s.micro_batch_size);
  // A pinned quantisation is QLoRA's; an unpinned one follows the adapter.
  if (pins_.quantization && *pins_.quantization != Quantization::kNone && !pins_.adapter) s.adapter = Adapter::kQlora;
  if (!pins_.quantization) s.quantization = default_quantization(s.adapter);
  s.lora_rank = s.adapter == Adapter::kNone ? 0 : pins_.lora.r;
  s.activation_offload = spec_.strategy.activation_offload.value_or(false) && s.checkpoint_every > 0;
  return s;
}

}  // namespace tailor::strategies
