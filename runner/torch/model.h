// Decoder-only transformers in LibTorch, built from a ModelArch: the Llama
// family (RMSNorm, RoPE, grouped-query attention, SwiGLU: Llama 2/3,
// Mistral, Qwen2 with q/k/v biases, Qwen3 with q/k norms, Mixtral's
// experts, Phi-3, Gemma 2 and 3 with GeGLU, four norms a block, Gemma 2's
// soft-capping and Gemma 3's local RoPE), GPT-2 (LayerNorm, learned positions, GELU MLP, biases) and
// GPT-NeoX (Pythia: GPT-2's parts with partial RoPE and a parallel residual).
//
// Layout choices for speed on CPU (docs/libtorch.md): q/k/v and gate/up are
// each one fused matmul; RMSNorm runs in the compute dtype without fp32
// round-trips. Attention is fused (scaled_dot_product_attention) or
// materialised (attention.h), masked causally and within packed documents.
// Generation runs the same blocks over a KV cache (hidden_states_cached;
// the sampling loop is generation.h).
// Not here: dropout (fine-tuning runs without).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "core/status.h"
#include "dsl/job_spec.h"
#include "dsl/model_family.h"

namespace tailor::runner {

class ActivationOffloader;

// The fused projections of a block (dsl/model_family.h). kUp is gate_up
// (Llama) or c_fc (GPT-2).
using dsl::Projection;

// Replaces torch::linear for the blocks' projections when installed
// (adapters and quantised bases, lora.h). Called from the forward pass, so
// it may throw like any tensor op.
class ProjectionHook {
 public:
  virtual ~ProjectionHook() = default;
  // x (..., in) -> (..., out). `weight` is the model's parameter (empty when
  // the hook keeps the weight in another form); `bias` may be undefined.
  virtual torch::Tensor project(std::size_t layer, Projection p, const torch::Tensor& x, const torch::Tensor& weight,
                                const torch::Tensor& bias) = 0;
  // A mixture of experts' gate/up (gate_up true) or down weights applied to
  // the rows routed to each expert (grouped_linear.h); `weight` is the
  // model's (E, out, in) parameter, empty when the hook keeps it in another
  // form (QLoRA's NF4 experts).
  virtual torch::Tensor experts(std::size_t layer, bool gate_up, const torch::Tensor& x,
                                const torch::Tensor& weight, const std::vector<std::int64_t>& counts);
};

// Called around each unit of the forward pass, so that ZeRO-3 (zero3.h) can
// gather a unit's parameters just before it computes and free them after.
// Units: 0 the embeddings, 1..L the blocks, L + 1 the final norm and head
// (unit_parameters()). Not called when backward recomputes a block.
class UnitHook {
 public:
  virtual ~UnitHook() = default;
  // `input` is the hidden state the unit reads (undefined for unit 0).
  virtual void before_unit(std::size_t unit, const torch::Tensor& input) = 0;
  // After the unit in forward; never for the head, whose weights logits()
  // and backward still read.
  virtual void after_unit(std::size_t unit) = 0;
};

struct ModelInput {
  torch::Tensor input_ids;    // (B, T) int64
  torch::Tensor positions;    // (B, T) int64: position within each document (RoPE / learned positions)
  torch::Tensor segment_ids;  // (B, T) int64: packed document index, -1 for padding; undefined = one document per row
};

// The keys and values of the positions a sequence has so far, for
// generation: each block's (B, KV, capacity, D) tensors in the parameters'
// dtype, of which positions [0, length) are filled. Allocated once for the
// whole generation, so a step writes one position and copies nothing else.
struct KvCache {
  std::vector<torch::Tensor> k, v;
  std::int64_t length = 0;
  // Set by CausalLMImpl::decode_step() for its forward alone, when its rows
  // stand at different lengths: where each row's new position goes ((B)
  // int64 on the cache's device), and how many positions the step reads.
  torch::Tensor step_positions;
  std::int64_t step_span = 0;
  std::int64_t capacity() const { return k.empty() ? 0 : k.front().size(2); }
};

// What reads the final hidden states: the vocabulary (the language model's
// head, the embedding matrix when tied), or a reward model's scalar score
// (a (1, C) parameter "score", as transformers' <X>ForSequenceClassification
// with one label; no vocabulary head then, even for an untied model).
enum class ModelHead { kVocabulary, kScore };

class CausalLMImpl : public torch::nn::Module {
 public:
  // checkpoint_every: 0 = off, 1 = every layer, N = layers 0, N, 2N, ...
  CausalLMImpl(const dsl::ModelArch& arch, std::int64_t checkpoint_every, ModelHead head = ModelHead::kVocabulary);

  // The final hidden states (B, T, C) and the logits (B, T, V) in the
  // parameters' dtype. Gemma 2's logits are soft-capped (arch's
  // final_logit_softcap) unless `capped` is false: training leaves the cap
  // to cross_entropy_sum(), which applies it a slice at a time.
  torch::Tensor hidden_states(const ModelInput& in);
  // Generation: the final hidden states (B, T, C) of `input_ids` (B, T)
  // placed after the cache's `length` positions, each attending to those and
  // to the earlier ones of its own (causally, within the layers' windows);
  // their keys and values are written into the cache, whose length grows by
  // T. No gradients, no unit hooks; every row one sequence. InvalidArgument
  // when the cache has no room for T more positions or was made for another
  // batch.
  Result<torch::Tensor> hidden_states_cached(const torch::Tensor& input_ids, KvCache& cache);
  // Batched generation: the final hidden states (B, 1, C) of one new token
  // per row (`ids` (B, 1)), row r's placed after its own `lengths[r]` cached
  // positions and attending to those and itself (within the layers'
  // windows); its keys and values are written at position lengths[r]. The
  // rows' lengths are the caller's to keep (cache.length is set to theirs
  // when all are equal, and is not read otherwise); positions beyond a
  // row's length must hold finite values (a zeroed cache), since attention
  // weighs them by zero. InvalidArgument as hidden_states_cached's.
  Result<torch::Tensor> decode_step(const torch::Tensor& ids, KvCache& cache, const std::vector<std::int64_t>& lengths);
  // An empty cache for `batch` rows of up to `capacity` positions, on the
  // parameters' device and in their dtype.
  KvCache new_kv_cache(std::int64_t batch, std::int64_t capacity) const;
  torch::Tensor logits(const torch::Tensor& hidden, bool capped = true);
  // The summed training loss of the hidden states against targets (-100
  // ignored), Gemma 2's final soft cap applied: through the materialised
  // logits (cross_entropy.h) or, when set_fused_linear_loss(true), the head
  // and the loss fused so that no logits exist (linear_cross_entropy.h).
  torch::Tensor loss_sum(const torch::Tensor& hidden, const torch::Tensor& targets);
  void set_fused_linear_loss(bool on) { fused_linear_loss_ = on; }
  // Checkpointed layers' inputs in host memory between forward and
  // backward (activation_offload.h); needs checkpointing to have an effect.
  void set_activation_offload(bool on);
  ActivationOffloader* activation_offloader() const { return offloader_.get(); }
  // The training forward pass whose inputs the offloader holds.
  std::int64_t offload_pass() const { return offload_pass_; }
  // The score head: each row's fp32 score (B,) of `hidden` (B, T, C) at
  // `last` (B,) int64, the position transformers pools (the last token that
  // is not padding).
  torch::Tensor scores(const torch::Tensor& hidden, const torch::Tensor& last);
  ModelHead head() const { return score_.defined() ? ModelHead::kScore : ModelHead::kVocabulary; }
  // The score head (1, C); undefined under ModelHead::kVocabulary.
  torch::Tensor& score_weight() { return score_; }
  const torch::Tensor& score_weight() const { return score_; }
  // The embedding matrix, and the head when it is a matrix of its own
  // (undefined when tied to the embedding or replaced by a score).
  torch::Tensor& embedding_weight();
  torch::Tensor& lm_head_weight() { return lm_head_; }

  const dsl::ModelArch& arch() const { return arch_; }
  void set_checkpoint_every(std::int64_t n) { checkpoint_every_ = n; }
  std::int64_t checkpoint_every() const { return checkpoint_every_; }
  // Fused attention, which keeps no (T x T) scores for backward, or
  // materialised softmax (attention.h); strategies::attention_for() says
  // which one the plan assumed.
  void set_fused_attention(bool on) { fused_attention_ = on; }

  // Deterministic initialisation (normal(0, 0.02), scaled residual
  // projections as in GPT-2) from the current torch seed.
  void reset_parameters_();

  // Block i on x (B, T, C); cos/sin (B, T, r/2) fp32 for RoPE (r = rotary_dims; undefined for
  // gpt2); mask from attention_mask(). Public for gradient checkpointing.
  // With `cache`, x's keys and values go into it after its `length`
  // positions and the queries attend to all of them: through `mask` (B|1,
  // 1, T, length + T) when defined, else to every key (one new position
  // with nothing outside its window).
  torch::Tensor run_layer(std::size_t i, const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                          const torch::Tensor& mask, KvCache* cache = nullptr);

  // The base weight (out, in) and bias (undefined if none) of a block's
  // projection: the registered parameters themselves (for lora.h). A
  // mixture of experts has no kUp and kDown: their weights are undefined.
  torch::Tensor& projection_weight(std::size_t layer, Projection p);
  // A mixture of experts' stacked gate/up (E, 2I, C) or down (E, C, I)
  // weights (undefined for a dense MLP).
  torch::Tensor& experts_weight(std::size_t layer, bool gate_up);
  torch::Tensor projection_bias(std::size_t layer, Projection p) const;
  // Routes the blocks' projections through `hook` (nullptr: plain linear).
  void set_projection_hook(std::shared_ptr<ProjectionHook> hook) { hook_ = std::move(hook); }
  const std::shared_ptr<ProjectionHook>& projection_hook() const { return hook_; }

  // Units of the forward pass (UnitHook): L + 2.
  std::size_t unit_count() const { return layers_.size() + 2; }
  // The model's own parameters of a unit, as registered (a tied head is the
  // embedding matrix, in units 0 and L + 1); the projection hook's tensors
  // (adapters, NF4 storage) are not among them.
  std::vector<torch::Tensor> unit_parameters(std::size_t unit) const;
  void set_unit_hook(UnitHook* hook) { unit_hook_ = hook; }

 private:
  struct Layer;

  dsl::ModelArch arch_;
  std::int64_t checkpoint_every_ = 0;
  bool fused_attention_ = true;
  bool fused_linear_loss_ = false;
  torch::nn::Embedding embed_{nullptr};
  torch::nn::Embedding pos_embed_{nullptr};  // learned positions (gpt2) only
  std::vector<std::shared_ptr<torch::nn::Module>> layers_;
  torch::Tensor final_norm_weight_, final_norm_bias_;
  // A scalar leaf that requires grad, not a parameter: an input of every
  // recomputed layer so that its backward runs (model.cpp).
  torch::Tensor backward_anchor_;
  // RoPE's inverse frequencies (fp64, dsl/rope.h), on the device last used:
  // not a buffer, so checkpoints and state dicts hold weights only.
  torch::Tensor rope_inv_freq_, rope_local_inv_freq_;  // local: Gemma 3's windowed layers
  torch::Tensor lm_head_;  // (V, C); the embedding matrix when tied
  torch::Tensor score_;    // (1, C) under ModelHead::kScore (then no lm_head_)
  std::shared_ptr<ProjectionHook> hook_;
  UnitHook* unit_hook_ = nullptr;
  std::shared_ptr<ActivationOffloader> offloader_;
  std::int64_t offload_pass_ = 0;

  torch::Tensor project(std::size_t layer, Projection p, const torch::Tensor& x, const torch::Tensor& w,
                        const torch::Tensor& b);
  // run_layer by the family's kind of block (dsl::BlockKind): a new kind is
  // a function here, its parameters in Layer, its layout in
  // hf_checkpoint.cpp and its activation terms in strategies/.
  torch::Tensor gpt2_block(std::size_t i, const torch::Tensor& x, const torch::Tensor& mask, KvCache* cache);
  torch::Tensor llama_block(std::size_t i, const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                            const torch::Tensor& mask, KvCache* cache);
  torch::Tensor gpt_neox_block(std::size_t i, const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin, const torch::Tensor& mask, KvCache* cache);
  // A block's attention, shared by the kinds (model.cpp).
  torch::Tensor attention(std::size_t i, const torch::Tensor& h, const torch::Tensor& cos, const torch::Tensor& sin,
                          const torch::Tensor& mask, KvCache* cache);
  // The input embeddings of ids at `positions` (learned positions, Gemma's
  // scale).
  torch::Tensor embed(const torch::Tensor& input_ids, const torch::Tensor& positions);
  // The layers of a cached forward (hidden_states_cached, decode_step) over
  // x at `positions`, each layer's mask from `mask_for` (its window; 0 for
  // global layers), Gemma 3's windowed layers by their own RoPE base.
  torch::Tensor cached_layers(torch::Tensor x, const torch::Tensor& positions,
                              const std::function<torch::Tensor(std::int64_t window)>& mask_for, KvCache& cache);
  // RoPE's cos/sin tables (B, T, r/2) fp32 for `positions`, global and, for
  // Gemma 3, local (undefined otherwise; all undefined for gpt2).
  struct RopeTables {
    torch::Tensor cos, sin, local_cos, local_sin;
  };
  RopeTables rope_tables(const torch::Tensor& positions);
  torch::Tensor final_norm(const torch::Tensor& x) const;
};
TORCH_MODULE(CausalLM);

}  // namespace tailor::runner
