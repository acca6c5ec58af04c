// One concrete point of the strategy space (every knob decided) and the
// per-component memory figures the planner reports for it. These are the
// planner's vocabulary; the plan document (plan_document.h) serialises them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/units.h"
#include "dsl/job_spec.h"

namespace tailor::strategies {

using dsl::Adapter;
using dsl::Offload;
using dsl::Optimizer;
using dsl::Precision;
using dsl::Quantization;
using dsl::Reference;

// How attention is computed, which decides whether the s^2 score matrices
// are stored for backward.
enum class Attention {
  kStandard,         // materialised softmax(QK^T): Korthikanti's 5as/h term (2as/h without dropout)
  kMemoryEfficient,  // fused scaled_dot_product_attention (flash / memory-efficient kernels): no s^2
                     // buffers, GQA without K/V expansion
};

const char* to_string(Attention a);  // "materialised" | "fused"
std::optional<Attention> attention_from_name(std::string_view name);

// How the loss reads the output projection, which decides whether the
// micro-batch's logits (b * s * V) exist.
enum class CrossEntropy {
  kLogits,       // the logits materialised, then the loss a slice at a time: they and their gradient stay
  kFusedLinear,  // the projection and the loss a slice of trained rows at a time: no logits tensor
                 // (runner/torch/linear_cross_entropy.h); one more head matmul when the head trains
};

const char* to_string(CrossEntropy c);  // "logits" | "fused-linear"
std::optional<CrossEntropy> cross_entropy_from_name(std::string_view name);

struct Strategy {
  Precision precision = Precision::kFp32;
  std::int64_t checkpoint_every = 0;  // 0 = off, 1 = every layer, N = every N-th layer
  std::int64_t micro_batch_size = 1;  // sequences per forward pass per GPU
  std::int64_t grad_accumulation = 1; // micro-batches per optimizer step per GPU
  Adapter adapter = Adapter::kNone;
  std::int64_t lora_rank = 0;         // 0 unless an adapter is used
  Quantization quantization = Quantization::kNone;  // QLoRA's base: anything but kNone with Adapter::kQlora
  Optimizer optimizer = Optimizer::kAdamw;
  std::int64_t zero_stage = 0;
  Offload offload = Offload::kNone;
  std::int64_t num_gpus = 1;          // data-parallel ranks (1 on CPU)
  // Fused on GPUs. On the CPU a searched choice in half precision: there
  // the materialised form is faster (docs/benchmarks.md) but keeps s^2 scores.
  Attention attention = Attention::kMemoryEfficient;
  // The logits unless they do not fit: the fused head is slower when the
  // head trains, and its slices cost GPU efficiency (cost_model.cpp).
  CrossEntropy cross_entropy = CrossEntropy::kLogits;
  // Each checkpointed layer's saved input in (pinned) host memory between
  // its forward and its backward, brought back a layer ahead
  // (runner/torch/activation_offload.h): the device keeps two of them
  // instead of one per checkpointed layer. Needs checkpointing. Searched
  // where nothing fits without it, or pinned (strategy.activation_offload).
  bool activation_offload = false;
  // Preference training (dpo, orpo, simpo, reward, kto): each sequence of
  // the batch is a pair, two rows forward and backward. Not searched: it
  // follows the spec (candidate.cpp).
  bool pairs = false;
  // dpo and kto only: where the reference log-probabilities come from, and
  // its forward over both rows. Not searched: it follows the adapter
  // (reference_for).
  Reference reference = Reference::kNone;
  // kto with loss_type kto: each micro-batch's KL rows (each prompt with
  // another row's completion) forwarded without gradients through the
  // trained model and the reference. Not searched: it follows the spec.
  bool kl_rows = false;
  // kto on unpaired examples (data.label_field): each sequence of the batch
  // is one labelled completion, one row (pairs stays on: the preference
  // loss and its reference). Not searched: it follows the spec.
  bool unpaired = false;
  // dpo with WPO's weights (training.use_weighting): one more pass of the
  // head over each row, without gradients. Not searched: it follows the
  // spec.
  bool head_pass = false;

  // Rows forward and backward per sequence of the micro-batch.
  std::int64_t rows_per_sequence() const { return pairs && !unpaired ? 2 : 1; }

  bool operator==(const Strategy&) const = default;
  // "bf16, checkpointing every layer, micro-batch 2 x 16, lora r16, adamw, ZeRO-3";
  // materialised attention, the fused-linear loss, activation offloading and a QLoRA base other
  // than NF4 with double quantisation ("qlora r16 over nf4") are named, the
  // usual forms are not.
  std::string describe() const;
};

// A base that is not pinned: QLoRA's NF4 with double quantisation, else none.
inline Quantization default_quantization(Adapter a) {
  return a == Adapter::kQlora ? Quantization::kNf4Double : Quantization::kNone;
}

// Bytes on one device, by component. Each is the steady-state or peak size
// of that kind of buffer; see memory_model.h for the formulas.
struct MemoryBreakdown {
  Bytes weights;           // model parameters as stored on the device (frozen + trainable)
  Bytes gradients;         // gradients of trainable parameters
  Bytes optimizer_states;  // AdamW moments, 8-bit states + scales, or SGD momentum
  Bytes master_weights;    // fp32 copy of trainable weights under mixed precision
  Bytes adapter;           // LoRA A/B weights
  Bytes activations;       // saved for backward at their peak; with checkpointing, the recomputed
                           // layer counts only beyond the logits buffers freed before it
  Bytes logits;            // logits and loss buffers at the forward/backward boundary
  Bytes overhead;          // runtime context, workspaces, gather/dequantise buffers
  // Bytes counted above that are never live at the same time, subtracted
  // from the total: with one micro-batch per step, gradients appear as
  // backward frees the activations, so the peak holds the larger of the two
  // rather than their sum. Zero in measured breakdowns.
  Bytes overlap;

  Bytes total() const;
};

// The components of a breakdown (all but `overlap`), in the order plans,
// metrics, the store and the UI show them: the one list of their names.
struct MemoryComponent {
  const char* key;    // JSON key in plans, metrics.jsonl and the oom event; the store's column is key + "_bytes"
  const char* label;  // in words, for explanations and tables
  Bytes MemoryBreakdown::*member;
};
inline constexpr MemoryComponent kMemoryComponents[] = {
    {"weights", "weights", &MemoryBreakdown::weights},
    {"gradients", "gradients", &MemoryBreakdown::gradients},
    {"optimizer_states", "optimizer states", &MemoryBreakdown::optimizer_states},
    {"master_weights", "fp32 master weights", &MemoryBreakdown::master_weights},
    {"adapter", "adapters", &MemoryBreakdown::adapter},
    {"activations", "activations", &MemoryBreakdown::activations},
    {"logits", "logits", &MemoryBreakdown::logits},
    {"overhead", "overhead", &MemoryBreakdown::overhead},
};

inline Bytes MemoryBreakdown::total() const {
  Bytes sum;
  for (const MemoryComponent& c : kMemoryComponents) sum += this->*c.member;
  return sum - overlap;
}

}  // namespace tailor::strategies
