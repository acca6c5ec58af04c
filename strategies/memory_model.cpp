// Memory formulas. Sources:
//  - mixed-precision AdamW = 16 bytes/param (2 weights + 2 gradients + 4 fp32
//    master + 8 fp32 moments) and the ZeRO stage formulas: Rajbhandari et
//    al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
//    Models" (SC 2020), section 3 and figure 1.
//  - activations per layer: Korthikanti et al., "Reducing Activation
//    Recomputation in Large Transformer Models" (2022), section 4.1, adapted
//    tensor by tensor for SwiGLU MLPs, RMSNorm and grouped-query attention.
//  - NF4 and double quantisation: Dettmers et al., "QLoRA" (2023), section 3.
//  - 8-bit block-wise optimizer states: Dettmers et al., "8-bit Optimizers
//    via Block-wise Quantization" (2021): one byte per state, an fp32 absmax
//    per block of 2048.
//  - LoRA parameters r * (in + out) per adapted matrix: Hu et al. (2021).
#include "strategies/memory_model.h"

#include "dsl/model_family.h"

#include <algorithm>
#include <cmath>

namespace tailor::strategies {
namespace {

using dsl::ModelArch;
using dsl::ModelFamily;

bool is_half(Precision p) { return p != Precision::kFp32; }

using dsl::LinearLayer;
using dsl::Projection;

bool targeted(std::string_view target, const std::vector<std::string>& targets) {
  return targets.empty() || std::find(targets.begin(), targets.end(), target) != targets.end();
}

// 8-bit optimizers keep ordinary states for tensors below this many
// elements (bitsandbytes' min_8bit_size; tailor-runner's
// kAdamw8bitMinElements in runner/torch/adamw_8bit.h). Without it a small
// model's LoRA states were estimated at 2 bytes per parameter where the
// runner measures 8 (A is r x hidden: 16 x 128 = 2048 elements stays fp32).
constexpr std::int64_t kAdamw8bitMinElements = 4096;

// Optimizer state bytes of one tensor of `numel` elements.
double tensor_state_bytes(std::int64_t numel, Optimizer o, Precision p) {
  if (o == Optimizer::kAdamw8bit && numel < kAdamw8bitMinElements) o = Optimizer::kAdamw;
  return static_cast<double>(numel) * optimizer_bytes_per_param(o, p);
}

}  // namespace

ParameterCounts count_parameters(const ModelArch& a) {
  ParameterCounts c;
  c.total = a.parameter_count();
  std::int64_t linear = 0;
  for (const LinearLayer& l : dsl::block_linears(a)) {
    linear += l.in * l.rows;
    c.largest_linear = std::max(c.largest_linear, l.in * l.rows);
  }
  c.block_linear = a.layers * linear;
  if (a.moe()) {
    const std::int64_t expert_mlp = 3 * a.hidden * a.intermediate, router = a.experts * a.hidden;
    c.expert = a.layers * (a.experts * expert_mlp + router);
    c.active_expert = a.layers * (a.experts_per_token * expert_mlp + router);
    // The runner quantises an expert stack when each expert's weight is
    // whole 64-value blocks (runner/torch/lora.cpp): gate/up (2I x C) and
    // down (C x I).
    const std::int64_t up = 2 * a.intermediate * a.hidden, down = a.hidden * a.intermediate;
    if (up % 64 == 0) c.expert_quantizable += a.layers * a.experts * up;
    if (down % 64 == 0) c.expert_quantizable += a.layers * a.experts * down;
    c.largest_expert = c.expert_quantizable > 0 ? up : 0;
  }
  c.other = c.total - c.block_linear - c.expert;
  const std::int64_t embeddings =
      a.vocab * a.hidden * (a.tie_embeddings ? 1 : 2) + (dsl::block_traits(a).rope ? 0 : a.max_seq_len * a.hidden);
  c.per_layer = a.layers > 0 ? (c.total - embeddings) / a.layers : 0;
  return c;
}

std::int64_t lora_parameter_count(const ModelArch& a, std::int64_t rank, const std::vector<std::string>& targets) {
  std::int64_t per_layer = 0;
  for (const LinearLayer& l : dsl::block_linears(a)) {
    if (targeted(l.target, targets)) per_layer += rank * (l.in + l.rows);
  }
  return a.layers * per_layer;
}

MemoryConstants MemoryConstants::defaults() {
  MemoryConstants k;
  // Measured on an H100 80GB (driver 580, CUDA 13.0, LibTorch 2.11,
  // docs/gpu-measurements.md): tailor-runner's process holds 852 MiB of device
  // memory outside the caching allocator once CUDA is up (the context and
  // the loaded libraries' modules), and the allocator's peak exceeds the
  // tensors by a constant 125-142 MB whatever the model (cuBLAS workspaces).
  k.gpu_context_overhead = Bytes::mib(852);
  k.gpu_allocator_workspace = Bytes::mib(128);
  k.cpu_runtime_overhead = Bytes(0);
  // Composed ops (a cast to fp32, log_softmax, nll_loss), at the start of
  // backward: the fp32 log-probabilities log_softmax saved (4 B), the loss's
  // gradient w.r.t. them (4 B) and log_softmax's gradient w.r.t. the logits
  // it is writing (4 B) are alive together: 12 B per b*s*V element, whether
  // the logits were computed in half precision or fp32 (the model's own
  // logits are gone with its output by then). Counting only the first two
  // (10 B) put the estimates of transformers runs up to 17% under their
  // published peaks (tests/strategies/data/peak_corpus.yaml).
  // transformers 4.46-4.48 hold more in forward (RuntimeQuirks::
  // shifted_logits_copy).
  k.logits_bytes_per_element_half = 12.0;
  k.logits_bytes_per_element_fp32 = 12.0;
  // tailor-runner's cross-entropy reads the logits as they are and writes
  // their gradient in the same dtype: 2 + 2 B, or 4 + 4 B in fp32.
  k.logits_bytes_per_element_lean_half = 4.0;
  k.logits_bytes_per_element_lean_fp32 = 8.0;
  return k;
}

MemoryConstants calibrate(const MemoryConstants& base, const MemoryBreakdown& est, const MemoryBreakdown& measured) {
  MemoryConstants k = base;
  auto ratio = [](Bytes m, Bytes e) { return m.count() > 0 && e.count() > 0 ? static_cast<double>(m.count()) / static_cast<double>(e.count()) : 1.0; };
  k.activation_factor *= ratio(measured.activations, est.activations);
  k.logits_factor *= ratio(measured.logits, est.logits);
  const Bytes est_static = est.weights + est.gradients + est.optimizer_states + est.master_weights + est.adapter;
  const Bytes measured_static =
      measured.weights + measured.gradients + measured.optimizer_states + measured.master_weights + measured.adapter;
  k.static_factor *= ratio(measured_static, est_static);
  return k;
}

double weight_bytes_per_param(Precision p) { return is_half(p) ? 2.0 : 4.0; }
double gradient_bytes_per_param(Precision p) { return is_half(p) ? 2.0 : 4.0; }
double master_bytes_per_param(Precision p) { return (p == Precision::kBf16 || p == Precision::kFp16) ? 4.0 : 0.0; }

double optimizer_bytes_per_param(Optimizer o, Precision p, std::int64_t block_size) {
  const double state = p == Precision::kPureBf16 ? 2.0 : 4.0;  // pure bf16 keeps states in bf16
  switch (o) {
    case Optimizer::kAdamw: return 2 * state;                                    // m and v
    case Optimizer::kAdamw8bit: return 2 * (1.0 + 4.0 / static_cast<double>(block_size));  // 2 states, 1 B + absmax
    case Optimizer::kSgd: return state;                                          // momentum
    case Optimizer::kLion: return state;                                         // one momentum
  }
  return 0;
}

double quantized_bytes_per_param(Quantization q, std::int64_t row_length) {
  switch (q) {
    case Quantization::kNone: return 0;  // not quantised: the caller uses the compute dtype
    case Quantization::kInt8: return 1.0 + 4.0 / static_cast<double>(row_length);  // fp32 scale per row
    case Quantization::kNf4: return 0.5 + 4.0 / 64.0;  // 4 bits + fp32 absmax per 64
    case Quantization::kNf4Double:
      // 4 bits + an 8-bit absmax per 64 + an fp32 second-level scale per 256 absmax values.
      return 0.5 + 1.0 / 64.0 + 4.0 / (64.0 * 256.0);
  }
  return 0;
}

double korthikanti_layer_bytes(std::int64_t s, std::int64_t b, std::int64_t h, std::int64_t a) {
  const double sbh = static_cast<double>(s) * static_cast<double>(b) * static_cast<double>(h);
  return sbh * (34.0 + 5.0 * static_cast<double>(a) * static_cast<double>(s) / static_cast<double>(h));
}

double zero_model_state_bytes(double params, std::int64_t stage, std::int64_t gpus) {
  const double n = static_cast<double>(gpus);
  const double weights = 2 * params / (stage >= 3 ? n : 1);
  const double grads = 2 * params / (stage >= 2 ? n : 1);
  const double states = 12 * params / (stage >= 1 ? n : 1);  // fp32 master + two fp32 moments
  return weights + grads + states;
}

namespace {

// What every stage of the estimate reads: the job, the strategy and the
// counts derived from them once.
struct Setting {
  const MemoryInput& in;
  const MemoryConstants& k;
  const ModelArch& a;
  const Strategy& st;
  ParameterCounts pc;
  std::int64_t head_params = 0;  // the lm_head's
  bool head_own = false;         // the head is a parameter of its own (untied)
  double n = 1;                  // data-parallel ranks
  bool adapter = false;
  double e = 2;                  // activation bytes per element
  // PEFT's k-bit preparation (RuntimeQuirks::fp32_non_quantized). TRL skips
  // it for sharded QLoRA (ZeRO-3/FSDP load the 4-bit weights on the CPU or
  // meta device first).
  bool upcast = false;
  double residual_bytes = 2;
  // The measured terms this estimate added (measured_corrections.h).
  mutable std::vector<CorrectionTerm> corrections;

  // strategy.lora.modules_to_save beside adapters: the parameters trained
  // whole, the embedding's and an untied head's.
  std::int64_t whole_embedding = 0, whole_head = 0;
  std::int64_t whole_params() const { return whole_embedding + whole_head; }
  // FSDP1's gathered root unit, counted in the overhead (overhead_bytes).
  mutable double root_unit = 0;
  // ZeRO-3: the bytes of one gathered unit (overhead_bytes counts
  // RuntimeQuirks::gathered_units of them).
  mutable double gathered_unit = 0;
  // Records a measured term's bytes when it adds any, and returns them.
  double correct(Correction c, double bytes) const {
    if (bytes > 0) corrections.push_back({c, Bytes(static_cast<std::int64_t>(bytes))});
    return bytes;
  }

  Setting(const MemoryInput& input, const MemoryConstants& constants)
      : in(input), k(constants), a(*input.arch), st(input.strategy), pc(count_parameters(a)) {
    head_params = a.vocab * a.hidden;
    // RuntimeQuirks::unties_embeddings: the head is a parameter of its own.
    if (a.tie_embeddings && in.quirks.unties_embeddings) {
      pc.total += head_params;
      pc.other += head_params;
    }
    head_own = !a.tie_embeddings || in.quirks.unties_embeddings;
    if (in.score_head) {  // a reward model: the vocabulary head gives way to a (1, C) score
      if (head_own) {
        pc.total -= head_params;
        pc.other -= head_params;
      }
      head_params = a.hidden;
      head_own = true;
      pc.total += head_params;
      pc.other += head_params;
    }
    n = static_cast<double>(std::max<std::int64_t>(1, st.num_gpus));
    adapter = st.adapter != Adapter::kNone;
    e = is_half(st.precision) ? 2.0 : 4.0;
    upcast = in.quirks.fp32_non_quantized && st.quantization != Quantization::kNone && st.zero_stage < 3;
    residual_bytes = upcast ? 4.0 : e;
    if (adapter && !in.score_head) {
      whole_embedding = in.whole_modules.embedding ? a.vocab * a.hidden : 0;
      whole_head = in.whole_modules.head && head_own ? head_params : 0;
    }
  }
};

// The model's state on one device before anything is shared: weights,
// gradients, fp32 master weights, optimizer states, adapters (bytes).
struct ModelState {
  double weights = 0, grads = 0, master = 0, states = 0, adapter = 0;
};

// Full fine-tuning: every parameter trained (ZeRO paper, section 3: 16
// bytes a parameter under mixed-precision AdamW).
ModelState full_model_state(const Setting& g) {
  const Strategy& st = g.st;
  const ParameterCounts& pc = g.pc;
  ModelState m;
  m.weights = static_cast<double>(pc.total) * weight_bytes_per_param(st.precision);
  m.grads = static_cast<double>(pc.total) * gradient_bytes_per_param(st.precision);
  m.master = static_cast<double>(pc.total) * master_bytes_per_param(st.precision);
  m.states = static_cast<double>(pc.total) * optimizer_bytes_per_param(st.optimizer, st.precision);
  if (st.optimizer == Optimizer::kAdamw8bit && g.a.hidden < kAdamw8bitMinElements) {
    // Norm weights and biases (pc.other less the embeddings and head) are
    // 1-D tensors of about `hidden` elements: below the 8-bit threshold
    // here, so they keep 32-bit states.
    const std::int64_t embeddings = g.a.vocab * g.a.hidden + (g.head_own ? g.head_params : 0) +
                                    (dsl::block_traits(g.a).rope ? 0 : g.a.max_seq_len * g.a.hidden);
    const double small = static_cast<double>(std::max<std::int64_t>(0, pc.other - embeddings));
    m.states += small * (optimizer_bytes_per_param(Optimizer::kAdamw, st.precision) -
                         optimizer_bytes_per_param(st.optimizer, st.precision));
  }
  return m;
}

// Adapters: a frozen base (block linears and experts quantised under QLoRA,
// Dettmers et al. 2023) and trained LoRA pairs (Hu et al. 2021).
// `lora`: the parameters trained in the adapters' dtype, the adapters and a
// reward model's score head (trained whole beside them: runner/torch/lora.h);
// modules_to_save's are Setting::whole_params().
ModelState adapter_model_state(const Setting& g, std::int64_t lora) {
  const Strategy& st = g.st;
  const ParameterCounts& pc = g.pc;
  const MemoryInput& in = g.in;
  ModelState m;
  const std::int64_t trained_head = in.score_head ? g.head_params : 0;
  // Frozen base: block linears possibly quantised, the rest in the compute dtype.
  const double linear_bytes = st.quantization == Quantization::kNone
                                  ? weight_bytes_per_param(st.precision)
                                  : quantized_bytes_per_param(st.quantization, g.a.hidden);
  // Under QLoRA the experts are NF4 too (the routers stay in the compute
  // dtype), as bitsandbytes quantises them.
  const std::int64_t expert_quantized = st.quantization == Quantization::kNone ? 0 : pc.expert_quantizable;
  // RuntimeQuirks::quantizes_head.
  const std::int64_t head_quantized =
      st.quantization != Quantization::kNone && in.quirks.quantizes_head && g.head_own ? g.head_params : 0;
  m.weights = static_cast<double>(pc.block_linear + expert_quantized + head_quantized) * linear_bytes +
              static_cast<double>(pc.other - head_quantized - trained_head + pc.expert - expert_quantized) *
                  (g.upcast ? 4.0 : weight_bytes_per_param(st.precision));
  // Adapters are trained in fp32 under fp32 and mixed precision (no master
  // copy needed), in bf16 under pure bf16.
  const double adapter_dtype = st.precision == Precision::kPureBf16 ? 2.0 : 4.0;
  m.adapter = static_cast<double>(lora) * adapter_dtype;
  m.grads = static_cast<double>(lora) * adapter_dtype;
  // A (r, in) and B (out, r) of each adapted linear, tensor by tensor: the
  // 8-bit threshold decides small models' adapters.
  for (const LinearLayer& l : dsl::block_linears(g.a)) {
    if (!targeted(l.target, in.lora_targets)) continue;
    m.states += static_cast<double>(g.a.layers) * (tensor_state_bytes(st.lora_rank * l.in, st.optimizer, st.precision) +
                                                   tensor_state_bytes(l.rows * st.lora_rank, st.optimizer, st.precision));
  }
  if (trained_head > 0) m.states += tensor_state_bytes(trained_head, st.optimizer, st.precision);
  // modules_to_save: trained whole in the weights' dtype, as a full
  // fine-tune trains them (runner/torch/lora.h); PEFT keeps the frozen
  // originals beside its trained copies (RuntimeQuirks::whole_module_copies).
  if (g.whole_params() > 0) {
    const double whole = static_cast<double>(g.whole_params());
    m.grads += whole * gradient_bytes_per_param(st.precision);
    m.master += whole * master_bytes_per_param(st.precision);
    for (const std::int64_t n : {g.whole_embedding, g.whole_head}) {
      if (n > 0) m.states += tensor_state_bytes(n, st.optimizer, st.precision);
    }
    if (in.quirks.whole_module_copies) m.weights += whole * (g.upcast ? 4.0 : weight_bytes_per_param(st.precision));
  }
  return m;
}

// ZeRO partitions across the N data-parallel ranks (ZeRO paper, section
// 5): stage 1 the states and master weights, 2 the gradients, 3 the
// weights.
void shard_for_zero(const Setting& g, std::int64_t trainable, ModelState& m) {
  const Strategy& st = g.st;
  if (st.zero_stage >= 1) {
    m.states /= g.n;
    m.master /= g.n;
  }
  if (st.zero_stage >= 2) m.grads /= g.n;
  if (g.in.quirks.unsharded_accumulated_gradients && st.zero_stage >= 3 && st.grad_accumulation > 1 && g.n > 1) {
    // RuntimeQuirks::unsharded_accumulated_gradients: the blocks' parameters
    // (and the adapters in them) under LoRA; every parameter otherwise.
    const double in_trainable_units = g.adapter ? static_cast<double>(g.pc.per_layer * g.a.layers + trainable)
                                                : static_cast<double>(g.pc.total);
    m.grads = in_trainable_units * gradient_bytes_per_param(st.precision);
  }
  if (st.zero_stage >= 3) {
    m.weights /= g.n;
    m.adapter /= g.n;
  }
}

// Offload moves the optimizer (states + fp32 master) to host RAM, where the
// CPU optimizer also keeps an fp32 gradient copy (ZeRO-Offload, Ren et al.
// 2021); parameter offload (ZeRO-Infinity, Rajbhandari et al. 2021) moves
// the weights too. Returns the host bytes of all ranks.
double offload(const Setting& g, std::int64_t trainable, ModelState& m) {
  const Strategy& st = g.st;
  const MemoryInput& in = g.in;
  double host = 0;
  if (st.offload == Offload::kOptimizerAndParams && !in.quirks.offload_streams_gradients) {
    // tailor-runner: each rank's ZeRO-3 parts (frozen, adapters) and their
    // gradients are host tensors, updated in place by the optimizer beside
    // them; the device keeps only the gathered units (overhead) and the
    // gradients backward is producing.
    host += (m.states + m.master + m.weights + m.adapter + m.grads) * g.n;
    m.states = m.master = m.weights = m.adapter = m.grads = 0;
  } else if (st.offload != Offload::kNone && !in.quirks.offload_streams_gradients) {
    // tailor-runner: the host copy of each trainable tensor and of its
    // gradient, in their dtypes, beside the states and master weights.
    // (modules_to_save's embedding and head in the weights' dtype.)
    const double dense = weight_bytes_per_param(st.precision) + gradient_bytes_per_param(st.precision);
    const double copies = g.adapter ? static_cast<double>(trainable - g.whole_params()) * 2.0 *
                                              (st.precision == Precision::kPureBf16 ? 2.0 : 4.0) +
                                          static_cast<double>(g.whole_params()) * dense
                                    : static_cast<double>(trainable) * dense;
    host += (m.states + m.master) * g.n + copies;
    m.states = 0;
    m.master = 0;
  } else if (st.offload != Offload::kNone) {
    host += (m.states + m.master) * g.n + static_cast<double>(trainable) * 4.0;
    m.states = 0;
    m.master = 0;
    // Gradients stream to the host as backward produces them: the device
    // holds about two layers' worth (the one being computed and the bucket in
    // flight), not the whole set.
    const double layer_grads =
        static_cast<double>(g.adapter ? trainable / std::max<std::int64_t>(1, g.a.layers) : g.pc.per_layer) *
        (g.adapter && st.precision != Precision::kPureBf16 ? 4.0 : gradient_bytes_per_param(st.precision));
    m.grads = std::min(m.grads, 2.0 * layer_grads);
  }
  if (st.offload == Offload::kOptimizerAndParams) {
    host += m.weights * g.n;
    m.weights = 0;
  }
  return host;
}

// One layer's activations from the tagged terms (layer_activation_terms):
// what it keeps for backward trained in full, what it holds while it is
// recomputed under checkpointing, and the gradients alive beside them.
struct LayerActivations {
  double full = 0;        // kept for backward, trained without recomputation
  double recomputed = 0;  // while a checkpointed layer back-propagates
  double largest_term = 0;
  double input = 0;       // a layer's input (the residual stream), what checkpointing keeps
  double backward_transient = 0;
  std::int64_t checkpointed = 0;  // layers recomputed
};

LayerActivations layer_activations(const Setting& g) {
  const MemoryInput& in = g.in;
  const Strategy& st = g.st;
  const ModelArch& a = g.a;
  LayerActivations out;
  const std::vector<ActivationTerm> terms = layer_activation_terms(
      a, in.batch, st.attention, in.dropout, g.e,
      {.fused = in.fused_kernels, .kv_repeated = in.on_gpu && st.precision == Precision::kFp32, .quirks = in.quirks});
  for (const ActivationTerm& term : terms) {
    out.full += term.bytes;
    out.largest_term = std::max(out.largest_term, term.bytes);
  }
  const double s = static_cast<double>(in.batch.seq_len), b = static_cast<double>(in.batch.micro_batch);
  // The layer recomputed under checkpointing: while it back-propagates, the
  // gradients flowing through its frozen linears are as large as the inputs
  // a trainable layer would have kept, so it counts them as a full layer does
  // (measured: without this, LoRA/QLoRA runs with checkpointing peaked 8-14%
  // above the estimate).
  out.recomputed = out.full;
  if (g.adapter) {
    // A frozen linear's input is kept for backward only when something else
    // needs it: LibTorch saves a matmul operand only for the gradient that
    // uses it, and NF4 layers keep no input at all. Measured with
    // tailor-runner (tests/runner/torch/adapter_memory_test.cpp): without this the
    // estimate of LoRA runs without checkpointing was 10-20% high. An adapter
    // reads that same input only without dropout.
    const bool quantized = st.quantization != Quantization::kNone;
    // PEFT's fp32 adapters under a half-precision base read their own
    // copies (RuntimeQuirks::adapter_input_copies).
    const bool input_copies = in.quirks.adapter_input_copies && g.e < 4.0;
    auto input_kept = [&](const std::vector<std::string>& linears) {
      if (quantized && in.quirks.quantized_linear_keeps_input) return true;
      if (in.lora_dropout > 0 || input_copies) return false;
      for (const std::string& name : linears) {
        if (name != kNormWeight && targeted(name, in.lora_targets)) return true;
      }
      return false;
    };
    for (const ActivationTerm& term : terms) {
      if (!term.weight_grad_of.empty() && !input_kept(term.weight_grad_of)) out.full -= term.bytes;
    }
    // LoRA: with dropout, each adapted linear keeps its own dropped-out input
    // copy and mask, and PEFT's fp32 adapters their own copy without; every
    // adapter keeps its A output (s*b*r). litgpt's
    // fused q/k/v linear has one adapter: one dropout, and the adapter's
    // output padded to the linear's width by index_copy, which keeps it
    // when only some of q, k and v are adapted.
    const bool fused_qkv = in.quirks.fused_qkv_views;
    bool qkv_dropout_counted = false;
    double qkv_adapted = 0, qkv_all = 0;
    for (const LinearLayer& l : dsl::block_linears(a)) {
      const bool qkv = fused_qkv && l.projection == Projection::kQkv;
      if (qkv) qkv_all += static_cast<double>(l.rows);
      if (!targeted(l.target, in.lora_targets)) continue;
      if (qkv) qkv_adapted += static_cast<double>(l.rows);
      double kept = g.e * s * b * static_cast<double>(st.lora_rank);
      if (in.lora_dropout > 0 && !(qkv && qkv_dropout_counted)) {
        kept += (g.e + 1.0) * s * b * static_cast<double>(l.in);
      } else if (input_copies) {
        kept += g.e * s * b * static_cast<double>(l.in);
      }
      qkv_dropout_counted = qkv_dropout_counted || qkv;
      out.full += kept;
      out.recomputed += kept;
    }
    // A family whose q, k and v are one linear (GPT-NeoX) names it whole as
    // a target; litgpt adapts its q and v parts by default (lora_key false),
    // as the corpus' runs did, and pads those.
    const double kv_width = static_cast<double>(a.kv_heads * a.head_dim());
    if (qkv_adapted == qkv_all && qkv_all > 0 && dsl::family_info(a.family).block == dsl::BlockKind::kGptNeox) {
      qkv_adapted = qkv_all - kv_width;
    }
    if (qkv_adapted > 0 && qkv_adapted < qkv_all) {
      out.full += g.e * s * b * qkv_adapted;
      out.recomputed += g.e * s * b * qkv_adapted;
    }
  }
  out.input = g.residual_bytes * s * b * static_cast<double>(a.hidden);
  // The gradients alive beside a layer's saved activations while it
  // back-propagates: its largest tensor's, its input's and its residual's.
  // Under adapters, tailor-runner's fused SwiGLU (the CPU kernels) holds
  // more at the MLP: the gradient entering it (s·b·I), the gate/up gradient
  // it writes (2·s·b·I) and the down projection's input, which the adapter
  // reads after the frozen base has passed the gradient on (s·b·I; a full
  // fine-tune frees it with its weight gradient), beside the residual's.
  // Measured: without it, LoRA and QLoRA runs without recomputation peaked
  // 0.45-0.6 MB (2-6%) above the estimate on the 3M-parameter Llama,
  // whatever the stage.
  out.backward_transient = out.largest_term + 2 * out.input;
  if (g.adapter && in.fused_kernels && dsl::family_info(a.family).block == dsl::BlockKind::kLlama &&
      !dsl::family_info(a.family).gemma && !a.moe()) {
    out.backward_transient =
        std::max(out.backward_transient, 3 * g.e * s * b * static_cast<double>(a.intermediate) + out.input);
  }
  if (st.checkpoint_every > 0) out.checkpointed = (a.layers + st.checkpoint_every - 1) / st.checkpoint_every;
  return out;
}

// Activation offloading's host memory, all ranks': each checkpointed
// layer's input from its forward to its backward. On a GPU the buffers are
// pinned, and LibTorch's pinned-memory cache hands out blocks of a power of
// two bytes (CachingHostAllocator), so each counts rounded up.
double offloaded_activation_bytes(const Setting& g, const LayerActivations& l) {
  if (!g.st.activation_offload || l.checkpointed == 0) return 0;
  double each = l.input;
  if (g.in.on_gpu) each = std::exp2(std::ceil(std::log2(std::max(1.0, each))));
  return static_cast<double>(l.checkpointed) * each * g.n;
}

// The fused head and loss (runner/torch/linear_cross_entropy.h): no
// logits, but the trained rows' hidden state and their gradient, and in
// backward the gradient of the whole hidden input beside them (3 rows of C
// values a token, an upper bound: trained rows are at most all), plus one
// slice's temporaries: its logits and their gradient in the compute dtype
// (the fused CPU kernel), or its logits and an fp32 softmax (ATen, a GPU),
// with an fp32 tanh beside them under Gemma 2's soft cap. A head that
// trains gets its weight gradient built slice by slice in backward, while
// the activations are still whole. With one micro-batch the step's overlap
// already places the head's gradient there (peak_over_the_step); with
// accumulation, beside the earlier micro-batches' gradients, it adds
// head-sized buffers, as measured: one on the CPU (fp32 and bf16, a 3-layer
// Llama and GPT-2 with a 32k vocabulary,
// tests/runner/torch/fused_head_training_test.cpp), about 2.4 on an H200
// (a 1.24B Llama with a tied head at 4096 tokens peaked 6.1% above the
// estimate without them, docs/gpu-measurements.md; counted as 3).
double fused_linear_bytes(const Setting& g) {
  const double rows = static_cast<double>(g.in.batch.micro_batch) * static_cast<double>(g.in.batch.seq_len);
  const double v = static_cast<double>(g.a.vocab);
  const double slice_rows = std::max(1.0, std::floor(static_cast<double>(kCrossEntropySliceElements) / v));
  const double slice = std::min(rows, slice_rows) * v;
  const bool capped = g.a.final_logit_softcap > 0;
  const double per_logit = capped ? 8.0 + g.e : g.in.fused_kernels ? 2.0 * g.e : 4.0 + g.e;
  const double head_buffers = g.adapter || g.st.grad_accumulation <= 1 ? 0.0 : g.in.on_gpu ? 3.0 : 1.0;
  const double head_gradient = head_buffers * static_cast<double>(g.head_params) * g.e;
  const double k = g.k.logits_factor;
  return (3.0 * rows * static_cast<double>(g.a.hidden) * g.e + slice * per_logit) * k +
         g.correct(Correction::kFusedHeadAccumulation, head_gradient * k);
}

// Bytes per logit that a loss copying the shifted logits holds at the end
// of forward (RuntimeQuirks::shifted_logits_copy): the model's logits when
// half (.float() of fp32 logits is the same tensor), their fp32 copy, the
// shifted contiguous copy, and the log-probabilities composed ops write (a
// fused kernel writes none). 0 without the quirk.
double shifted_copy_bytes_per_logit(const Setting& g, bool half_logits) {
  if (!g.in.quirks.shifted_logits_copy) return 0;
  return (half_logits ? 2.0 : 0.0) + 8.0 + (g.in.quirks.lean_cross_entropy ? 0.0 : 4.0);
}

// The model's output logits that the training loop keeps through backward
// (RuntimeQuirks::held_output_bytes_per_logit): no buffer of the loss, so
// nothing that backward frees for the recomputed layer.
double held_output_bytes(const Setting& g) {
  const bool per_row = g.st.pairs && g.in.quirks.lean_cross_entropy;
  if (g.in.score_head || per_row || g.st.cross_entropy == CrossEntropy::kFusedLinear) return 0;
  return static_cast<double>(g.in.batch.micro_batch) * static_cast<double>(g.in.batch.seq_len) *
         static_cast<double>(g.a.vocab) * g.in.quirks.held_output_bytes_per_logit * g.k.logits_factor;
}

// The logits and the loss's buffers at the forward/backward boundary.
double logits_bytes(const Setting& g) {
  const MemoryInput& in = g.in;
  const MemoryConstants& k = g.k;
  if (in.score_head) return 4.0 * static_cast<double>(in.batch.micro_batch);  // one fp32 score a row
  if (g.st.cross_entropy == CrossEntropy::kFusedLinear) return fused_linear_bytes(g);
  const double logit_elems = static_cast<double>(in.batch.micro_batch) * static_cast<double>(in.batch.seq_len) *
                             static_cast<double>(g.a.vocab);
  const bool half_logits = is_half(g.st.precision) && !g.upcast;
  const double per_elem = in.quirks.lean_cross_entropy
                              ? (half_logits ? k.logits_bytes_per_element_lean_half
                                             : k.logits_bytes_per_element_lean_fp32)
                              : (half_logits ? k.logits_bytes_per_element_half
                                             : k.logits_bytes_per_element_fp32);
  // A held output adds to the start of backward; the shifted copy's
  // forward figure already counts the model's logits.
  double logits = logit_elems * std::max(per_elem + in.quirks.held_output_bytes_per_logit,
                                         shifted_copy_bytes_per_logit(g, half_logits));
  // Pairs score each row's log-probability with its own loss (runner/torch/
  // preference_loss.h): backward makes one row's logit gradient at a time,
  // so the peak holds every row's logits and one row's gradient; ORPO's
  // prompt pass keeps the chosen rows' logits once more.
  const double row_elems = static_cast<double>(in.batch.seq_len) * static_cast<double>(g.a.vocab);
  const bool per_row = g.st.pairs && in.quirks.lean_cross_entropy;
  if (per_row) logits = ((in.prompt_nll ? 1.5 : 1.0) * logit_elems + row_elems) * per_elem / 2.0;
  // WPO's pass of the head (Strategy::head_pass), forward only, after every
  // row's logits exist: a slice of a row's logits at a time, cast to fp32
  // and exponentiated in place (runner/torch/preference_loss.cpp,
  // wpo_weights): the compute dtype's slice and its fp32 copy. Measured on
  // the CPU (fp32, no copy): one fp32 row of 64 x 260 beside the loss's.
  if (per_row && g.st.head_pass) {
    const double slice = std::min(row_elems, static_cast<double>(kCrossEntropySliceElements));
    const double pass = (half_logits ? 6.0 : 4.0) * slice;
    logits = std::max(logits, (in.prompt_nll ? 1.5 : 1.0) * logit_elems * per_elem / 2.0 + pass);
  }
  // A head that trains is used once per row, so its weight gradient is made
  // a row at a time and summed by autograd: on a GPU a full fine-tune of a
  // 1.24B Llama (tied 128k head, 2 x 1024-token pairs, 2 micro-batches)
  // peaked 650 MiB, 1.3 head-sized buffers, above the estimate without
  // this, for DPO and SimPO alike (docs/gpu-measurements.md, 2026-11-28);
  // counted as 1.5, with one micro-batch too (not measured there). The CPU
  // kernels measured none (the same runs with a 32k head, within 0.2%).
  const double pair_head = per_row && !g.adapter && in.on_gpu ? 1.5 * static_cast<double>(g.head_params) * g.e : 0.0;
  // Off the fused CPU kernel, one slice's fp32 (log-)softmax.
  // Soft-capped logits (Gemma 2) always take that path, with the slice's
  // capped logits as a second fp32 temporary.
  const bool capped = g.a.final_logit_softcap > 0;
  if (in.quirks.lean_cross_entropy && (!in.fused_kernels || capped)) {
    logits += (capped ? 8.0 : 4.0) *
              std::min(per_row ? row_elems : logit_elems, static_cast<double>(kCrossEntropySliceElements));
  }
  return logits * k.logits_factor + g.correct(Correction::kPairHeadGradient, pair_head * k.logits_factor);
}

// Fused attention saves its additive mask (packed documents) for
// backward: one (b, 1, s, s) tensor that every layer shares, alive until
// the first layer's backward. Pairs' rows are one completion each, masked
// by causality alone: no mask.
double shared_mask_bytes(const Setting& g) {
  if (g.st.attention != Attention::kMemoryEfficient || g.st.pairs) return 0;
  const double s = static_cast<double>(g.in.batch.seq_len), b = static_cast<double>(g.in.batch.micro_batch);
  return g.e * b * s * s;
}

// Activations at their peak (Korthikanti et al. 2022 for the per-layer
// terms): a full layer each, or only its input when checkpointed; during
// backward one checkpointed layer at a time is recomputed in full.
double activation_bytes(const Setting& g, const LayerActivations& l, double logits) {
  const MemoryConstants& k = g.k;
  logits -= held_output_bytes(g);
  // Offloaded (runner/torch/activation_offload.h), the checkpointed inputs
  // are in host memory but two: the one a layer recomputes from and the
  // next, brought back while it does.
  const double kept_inputs = g.st.activation_offload ? std::min<double>(static_cast<double>(l.checkpointed), 2.0)
                                                     : static_cast<double>(l.checkpointed);
  double acts = kept_inputs * l.input + static_cast<double>(g.a.layers - l.checkpointed) * l.full;
  acts += 2 * l.input;  // final norm input and lm_head input
  acts += shared_mask_bytes(g);
  acts *= k.activation_factor;
  // The recomputed layer lives in backward, after the loss has freed its
  // logits buffers (a held output stays): only what exceeds them adds to
  // the peak. While it
  // back-propagates, a gradient as large as its largest tensor (the score
  // matrices under standard attention) is alive too.
  if (l.checkpointed > 0) {
    acts += g.correct(Correction::kRecomputedLayer,
                      std::max(0.0, (l.recomputed + l.largest_term) * k.activation_factor - logits));
  }
  // Without recomputation the last layer's backward starts with every
  // activation alive and, once the logits are gone, the gradients of its
  // largest tensor and of its input and residual beside them (as in the
  // overlap's last layer; with one micro-batch the overlap accounts for it).
  // Measured with tailor-runner: ZeRO-3 ranks, whose static bytes are
  // small, peaked 4-8% above the estimate without this.
  // A reward model's score head leaves no logits before the layers'
  // backward either, so the same holds with one micro-batch (measured on the
  // CPU: a reward run peaked 11% above the estimate without this).
  if (l.checkpointed == 0 && (g.st.grad_accumulation > 1 || g.in.score_head)) {
    acts +=
        g.correct(Correction::kLastLayerBackward, std::max(0.0, l.backward_transient * k.activation_factor - logits));
  }
  return acts;
}

// The runtime's own bytes, dequantised weights and, under ZeRO-3 or
// parameter offload, the gathered units and whole-gradient transients.
double overhead_bytes(const Setting& g) {
  const MemoryInput& in = g.in;
  const Strategy& st = g.st;
  const ParameterCounts& pc = g.pc;
  const MemoryConstants& k = g.k;
  double overhead = static_cast<double>(
      (in.on_gpu ? k.gpu_context_overhead + k.gpu_allocator_workspace : k.cpu_runtime_overhead).count());
  const double wbytes = weight_bytes_per_param(st.precision);
  if (st.quantization == Quantization::kNf4 || st.quantization == Quantization::kNf4Double ||
      st.quantization == Quantization::kInt8) {
    // One dequantised weight at a time: a linear's, one expert's, or the
    // head's where it is quantised; RuntimeQuirks::dequantized_copies of it.
    std::int64_t largest = std::max(pc.largest_linear, pc.largest_expert);
    if (g.adapter && in.quirks.quantizes_head && g.head_own) largest = std::max(largest, g.head_params);
    overhead += static_cast<double>(largest) * wbytes * static_cast<double>(in.quirks.dequantized_copies);
  }
  if (st.zero_stage < 3 && st.offload != Offload::kOptimizerAndParams) return overhead;
  // Gathered layers (RuntimeQuirks::gathered_units), as stored:
  // sharded QLoRA gathers the NF4 bytes (torchao's NF4Tensor under FSDP2,
  // bitsandbytes' quant_storage under FSDP1), not dequantised weights.
  double layer = static_cast<double>(pc.per_layer) * wbytes;
  if (g.adapter && st.quantization != Quantization::kNone && g.a.layers > 0) {
    const double quantized = static_cast<double>(pc.block_linear + pc.expert_quantizable) / static_cast<double>(g.a.layers);
    layer -= quantized * (wbytes - quantized_bytes_per_param(st.quantization, g.a.hidden));
  }
  // The final norm and head, gathered from the end of forward through
  // their backward (tailor-runner: a unit of their own).
  if (in.quirks.head_unit_gathered) layer = std::max(layer, static_cast<double>(g.head_params + g.a.hidden) * wbytes);
  g.gathered_unit = layer;
  overhead += in.quirks.gathered_units * layer;
  if (in.quirks.root_unit_gathered) {
    // RuntimeQuirks::root_unit_gathered: the embedding, the final norm and
    // an untied head (in NF4 where the stack quantises it).
    const bool nf4_head = g.adapter && in.quirks.quantizes_head && st.quantization != Quantization::kNone;
    const double head_bytes = nf4_head ? quantized_bytes_per_param(st.quantization, g.a.hidden) : wbytes;
    const double head = g.head_own ? static_cast<double>(g.head_params) * head_bytes : 0.0;
    g.root_unit = static_cast<double>(g.a.vocab * g.a.hidden + g.a.hidden) * wbytes + head;
    overhead += g.root_unit;
  }
  if (in.quirks.whole_gradient_transient) {
    // RuntimeQuirks::whole_gradient_transient: the largest trainable tensor.
    double largest = 0, grad_bytes = gradient_bytes_per_param(st.precision);
    if (g.adapter) {
      for (const LinearLayer& l : dsl::block_linears(g.a)) {
        if (targeted(l.target, in.lora_targets)) {
          largest = std::max(largest, static_cast<double>(st.lora_rank * std::max(l.in, l.rows)));
        }
      }
      grad_bytes = st.precision == Precision::kPureBf16 ? 2.0 : 4.0;
      // A module trained whole: its gradient in the weights' dtype.
      if (static_cast<double>(std::max(g.whole_embedding, g.whole_head)) * gradient_bytes_per_param(st.precision) >
          largest * grad_bytes) {
        largest = static_cast<double>(std::max(g.whole_embedding, g.whole_head));
        grad_bytes = gradient_bytes_per_param(st.precision);
      }
    } else {
      // The embedding is the head unless a reward model's score replaced it.
      largest = static_cast<double>(
          std::max({pc.largest_linear, pc.largest_expert, g.head_params, g.a.vocab * g.a.hidden}));
    }
    overhead += largest * (grad_bytes + 4.0);
  }
  return overhead;
}

// The peak's shape over a step, once every component is counted: what is
// never live together (overlap), stage 0's gradient buckets at the end of
// backward, and the optimizer step's temporaries.
void peak_over_the_step(const Setting& g, const LayerActivations& l, std::int64_t trainable, MemoryBreakdown& m) {
  const MemoryInput& in = g.in;
  const Strategy& st = g.st;
  const MemoryConstants& k = g.k;
  const double at_end = ((l.checkpointed > 0 ? l.recomputed : l.full) + l.backward_transient) * k.activation_factor;
  // RuntimeQuirks::held_checkpoints: the end of backward holds every
  // checkpointed input and its gradient beside the first layer's
  // recomputation; where that outgrows the activations and logits alive at
  // the loss, the activations' peak is there.
  // The first layer is the last unit backward gathers: none is prefetched
  // beside it, one gathered unit fewer than overhead_bytes counts.
  double held_end = -1;
  if (in.quirks.held_checkpoints && st.zero_stage >= 3 && g.adapter && l.checkpointed > 0) {
    held_end = 2.0 * static_cast<double>(l.checkpointed) * l.input * k.activation_factor + at_end -
               std::max(0.0, in.quirks.gathered_units - 1) * g.gathered_unit;
    const double live = static_cast<double>((m.activations + m.logits).count());
    if (held_end > live) m.activations += Bytes(static_cast<std::int64_t>(held_end - live));
  }
  // One micro-batch per step: the step's gradients come to life during
  // backward, layer by layer, as the activations of the layers above are
  // freed. At the start of backward only the head's gradient (the lm_head or
  // tied embedding, produced first) exists beside the activations and
  // logits; at its end nearly all gradients exist beside the first layer's
  // activations (recomputed in full under checkpointing) and its gradient
  // flow. So the peak holds the larger of those two moments, not the sum of
  // activations and gradients. With accumulation, the gradients of earlier
  // micro-batches are alive through the whole forward.
  if (st.grad_accumulation <= 1) {
    const double grads = static_cast<double>(m.gradients.count());
    const double a_l = static_cast<double>((m.activations + m.logits).count());
    // (A reward model's score is the head; its embedding's gradient comes last.)
    const double head_size = static_cast<double>(in.score_head ? g.head_params : g.a.vocab * g.a.hidden);
    // Beside adapters only a head trained whole (modules_to_save: an untied
    // head, or the tied embedding that is the head) has one.
    const bool head_trained =
        !g.adapter || (g.a.tie_embeddings || !g.head_own ? in.whole_modules.embedding : in.whole_modules.head);
    double head = head_trained ? head_size * gradient_bytes_per_param(st.precision) * k.static_factor : 0.0;
    if (st.zero_stage >= 2) head /= g.n;
    // Offloaded activations: the end of backward is no longer bounded by
    // the activations at the loss, which have lost the layers' inputs: the
    // first layers back-propagate with the input brought back for the next
    // and the attention mask beside them. Measured on the CPU
    // (activation_offload_test): without this a full fine-tune of a 12-layer
    // Llama peaked 16% above the estimate.
    const double end = g.st.activation_offload ? at_end + (l.input + shared_mask_bytes(g)) * k.activation_factor
                       : held_end >= 0         ? held_end
                                               : std::min(at_end, a_l);
    const double peak_part = std::max(a_l + std::min(head, grads), grads + end);
    m.overlap = Bytes(static_cast<std::int64_t>(std::max(0.0, a_l + grads - peak_part)));
  } else if (in.score_head && !g.adapter) {
    // A reward model with accumulation: the embedding's gradient of a later
    // micro-batch is made whole at the end of backward, beside the earlier
    // ones' and the first layer's activations, before autograd adds it in.
    // No logits hide it. Measured: on the CPU (bf16, a 32k vocabulary, 2 x 2
    // pairs) one embedding-sized gradient, the peak 6% above the estimate
    // without it; on an H200 (a 1.24B Llama, 128k vocabulary, bf16, 2 x 2
    // pairs of 1024 tokens) 1.03 GB more, two more such buffers, as the
    // fused head's trained gradient measured three there (fused_linear_bytes;
    // docs/gpu-measurements.md, 2026-11-28). (A language model's head makes
    // the same tensor; its logits have been larger in every run measured.)
    const double buffers = in.on_gpu ? 3.0 : 1.0;
    const double embedding =
        buffers * static_cast<double>(g.a.vocab * g.a.hidden) * gradient_bytes_per_param(st.precision);
    const double live = static_cast<double>((m.activations + m.logits).count());
    m.overhead += Bytes(static_cast<std::int64_t>(
        g.correct(Correction::kScoreHeadAccumulation, std::max(0.0, embedding + at_end - live))));
  }
  // Stage 0 across ranks: the buckets live as backward ends, when the
  // activations are down to the first layer's (recomputed in full under
  // checkpointing): they add what exceeds the activations freed by then.
  // Measured with tailor-runner: 2 ranks with every layer recomputed peaked
  // 11% above the estimate without this.
  if (st.zero_stage == 0 && g.n > 1 && in.quirks.gradient_buckets > 0) {
    const double fp32_gradients = static_cast<double>(trainable) * 4.0;
    const double buckets =
        std::min(in.quirks.gradient_buckets * static_cast<double>(in.quirks.gradient_bucket_bytes.count()), fp32_gradients);
    const double freed = std::max(0.0, static_cast<double>((m.activations + m.logits - m.overlap).count()) - at_end);
    m.overhead +=
        Bytes(static_cast<std::int64_t>(g.correct(Correction::kGradientBuckets, std::max(0.0, buckets - freed))));
  }
  // The optimizer step: activations and logits are gone, weights,
  // gradients and states alive, plus the step's temporaries (each one
  // moment's size: AdamW keeps two). When that exceeds the backward peak,
  // the excess is the step's workspace, counted in overhead.
  if (in.quirks.optimizer_step_temporaries > 0) {
    const Bytes step = m.weights + m.gradients + m.master_weights + m.optimizer_states + m.adapter + m.overhead +
                       Bytes(static_cast<std::int64_t>(in.quirks.optimizer_step_temporaries *
                                                       static_cast<double>(m.optimizer_states.count()) / 2.0));
    if (step > m.total()) {
      const Bytes extra = step - m.total();
      g.correct(Correction::kOptimizerStep, static_cast<double>(extra.count()));
      m.overhead += extra;
    }
  }
}

}  // namespace

MemoryEstimate estimate_memory(const MemoryInput& input, const MemoryConstants& k) {
  // Pairs: the chosen and rejected completions of each pair in one forward
  // and backward, so activations and logits are those of 2b rows (kto's
  // unpaired examples: b rows). DPO's reference forward runs first,
  // without gradients, and frees what it made before the trained forward
  // starts: it adds nothing to the peak.
  MemoryInput in = input;
  in.batch.micro_batch *= in.strategy.rows_per_sequence();
  const Setting g(in, k);
  MemoryEstimate out;
  ModelState state;
  if (g.adapter) {
    out.trainable_parameters = lora_parameter_count(g.a, g.st.lora_rank, in.lora_targets) +
                               (in.score_head ? g.head_params : 0) + g.whole_params();
    out.frozen_parameters = g.pc.total;
    state = adapter_model_state(g, out.trainable_parameters - g.whole_params());
  } else {
    out.trainable_parameters = g.pc.total;
    state = full_model_state(g);
  }
  shard_for_zero(g, out.trainable_parameters, state);
  out.host = Bytes(static_cast<std::int64_t>(offload(g, out.trainable_parameters, state)));
  MemoryBreakdown& m = out.per_device;
  const double sf = k.static_factor;
  m.weights = Bytes(static_cast<std::int64_t>(state.weights * sf));
  m.gradients = Bytes(static_cast<std::int64_t>(state.grads * sf));
  m.master_weights = Bytes(static_cast<std::int64_t>(state.master * sf));
  m.optimizer_states = Bytes(static_cast<std::int64_t>(state.states * sf));
  m.adapter = Bytes(static_cast<std::int64_t>(state.adapter * sf));
  // The separate reference: every weight once more, frozen, in the compute
  // dtype, a part on each rank under ZeRO-3 (in host memory under parameter
  // offload) as the trained weights are; beside adapters, the starting
  // adapters frozen in the adapters' dtype, whole on every rank.
  if (g.st.reference == Reference::kSeparate) {
    const bool sharded = !g.adapter && g.st.zero_stage >= 3;
    double bytes = g.adapter ? static_cast<double>(lora_parameter_count(g.a, g.st.lora_rank, g.in.lora_targets)) *
                                   (g.st.precision == Precision::kPureBf16 ? 2.0 : 4.0)
                             : static_cast<double>(g.pc.total) * weight_bytes_per_param(g.st.precision);
    if (sharded) bytes /= g.n;
    out.reference = Bytes(static_cast<std::int64_t>(bytes * sf));
    if (sharded && g.st.offload == Offload::kOptimizerAndParams) {
      out.host += out.reference;
    } else {
      m.weights += out.reference;
    }
  }
  const LayerActivations layer = layer_activations(g);
  out.host += Bytes(static_cast<std::int64_t>(offloaded_activation_bytes(g, layer)));
  const double logits = logits_bytes(g);
  m.logits = Bytes(static_cast<std::int64_t>(logits));
  m.activations = Bytes(static_cast<std::int64_t>(activation_bytes(g, layer, logits)));
  m.overhead = Bytes(static_cast<std::int64_t>(overhead_bytes(g)));
  peak_over_the_step(g, layer, out.trainable_parameters, m);
  out.corrections = std::move(g.corrections);
  out.root_unit = Bytes(static_cast<std::int64_t>(g.root_unit));
  return out;
}

}  // namespace tailor::strategies
