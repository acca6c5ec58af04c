// Model families in one table: a family's names, how its blocks are built
// (read by the runner's model and by the memory model), its Hugging Face
// config.json keys and defaults (read here, written for exports), its
// tensor names, and its linear layers by Hugging Face name with the fused
// projection that holds each (LoRA targets, PEFT modules, memory terms).
// Adding a family is a row here plus what its block computes differently
// (dsl/README.md lists the files).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dsl/job_spec.h"

namespace tailor::dsl {

// The runner's fused weights of a block: q/k/v as one (out, in) matrix, the
// attention output, gate/up (GPT-2: c_fc; GPT-NeoX: dense_h_to_4h) and down
// (GPT-2: mlp c_proj; GPT-NeoX: dense_4h_to_h).
enum class Projection { kQkv, kO, kUp, kDown };

// A Hugging Face linear layer of a block as rows of a fused projection.
struct LinearLayer {
  const char* target;  // LoRA target name ("q_proj"; "c_proj" for both GPT-2 projections)
  const char* module;  // path within the block ("self_attn.q_proj", "mlp.c_proj")
  Projection projection;
  std::int64_t row_offset = 0, rows = 0, in = 0;  // rows [offset, offset + rows) of the (out, in) weight
};

enum class BlockKind {
  kLlama,    // RMSNorm, RoPE, grouped-query attention, SwiGLU MLP, no biases but optional q/k/v ones
  kGpt2,     // LayerNorm, learned positions, multi-head attention, GELU MLP, biases everywhere;
             // Conv1D weights stored (in, out) in checkpoints
  kGptNeox,  // LayerNorm, partial RoPE, multi-head attention and a GELU MLP side by side on the
             // same input (parallel residual), biases everywhere; q/k/v fused head by head
};

// What a kind of block has where the kinds share the code and differ in a
// part (the parts each kind computes alone are its functions: the forward,
// the checkpoint layout, the activation terms).
struct BlockTraits {
  bool layer_norm;        // LayerNorm with biases (else RMSNorm without)
  bool rope;              // RoPE on q and k (else learned positions added to the embeddings)
  bool conv1d;            // checkpoints store the linears (in, out): GPT-2's Conv1D
  bool free_head_dim;     // heads may be other than hidden / heads wide (config.json's head_dim)
  bool qkv_head_by_head;  // the fused q/k/v rows are [q0 k0 v0 q1 k1 v1 ...], one head at a time
};
const BlockTraits& block_traits(BlockKind k);

// A family's config.json keys (nullptr: the family has none).
struct HfConfigKeys {
  const char* layers;
  const char* hidden;
  const char* intermediate;
  const char* heads;
  const char* kv_heads;  // nullptr: no grouped-query attention
  const char* positions;
  const char* norm_eps;
  const char* rope_theta;
  // Mixture of experts (nullptr: a dense MLP).
  const char* experts = nullptr;
  const char* experts_per_token = nullptr;
  // The fraction of a head RoPE rotates, top-level (GPT-NeoX: "rotary_pct";
  // nullptr: every dimension, or rope_parameters' partial_rotary_factor).
  const char* partial_rotary = nullptr;
};

// A family's tensor names: the body prefix (optional when loading GPT-2)
// and the names below it.
struct HfTensorNames {
  const char* body;        // "model." / "transformer."
  const char* embed;       // "embed_tokens" / "wte"
  const char* positions;   // nullptr / "wpe"
  const char* layers;      // "layers." / "h."
  const char* norm1;       // "input_layernorm" / "ln_1"
  const char* norm2;       // "post_attention_layernorm" / "ln_2" (Gemma: the norm before the MLP)
  const char* final_norm;  // "norm" / "ln_f"
  const char* q_norm = nullptr;  // "self_attn.q_norm" (qk_norm families)
  const char* k_norm = nullptr;
  // Mixture of experts: the block's MoE module ("block_sparse_moe."), which
  // holds the router ("gate") and experts.N.{w1 (gate), w3 (up), w2 (down)}.
  const char* moe = nullptr;
  const char* post_attn_norm = nullptr;  // "post_attention_layernorm" (Gemma's)
  const char* post_mlp_norm = nullptr;   // "post_feedforward_layernorm"
  const char* head = "lm_head";          // the output matrix, outside the body ("embed_out": gpt_neox)
};

struct ModelFamilyInfo {
  ModelFamily id;
  const char* name;             // in specs, and the config.json model_type
  const char* hf_architecture;  // config.json "architectures"
  BlockKind block;
  bool qkv_bias = false;        // q/k/v projections have biases (Qwen2; GPT-2's and GPT-NeoX's every linear)
  bool qk_norm = false;         // RMSNorm over each q and k head before RoPE (Qwen3)
  bool hf_fused_linears = false;  // checkpoints hold qkv_proj and gate_up_proj whole (Phi-3)
  std::int64_t default_head_dim = 0;  // head width when config.json has no head_dim; 0: hidden / heads

  // config.json keys and the defaults transformers uses when a key is absent.
  HfConfigKeys keys;
  std::int64_t default_positions = 2048;
  double default_norm_eps = 1e-6;
  double default_partial_rotary = 1.0;  // GPT-NeoX: 0.25
  bool default_tie_embeddings = false;
  std::int64_t default_intermediate_per_hidden = 0;  // 0: intermediate is required
  const char* config_extra = "{}";  // JSON object merged into exported config.json (activation, windows)
  std::int64_t default_experts = 0;
  std::int64_t default_experts_per_token = 0;

  HfTensorNames tensors;

  // Gemma 2 and 3 (Gemma Team 2024, 2025): RMSNorm scales by (1 + weight)
  // and its weights start at 0; embeddings are multiplied by sqrt(hidden);
  // the MLP is GeGLU (tanh GELU); the attention output and the MLP output
  // are RMS-normalised before their residual adds (tensors.post_attn_norm,
  // post_mlp_norm; tensors.norm2 is then the norm before the MLP).
  bool gemma = false;
  // The sliding window skips every `window_every`-th layer (Gemma 2: 2,
  // Gemma 3: 6), whose attention is global; 1: every layer is windowed.
  std::int64_t window_every = 1;
  // Windowed layers rotate by their own RoPE base (Gemma 3's
  // rope_local_base_freq), unscaled; rope_scaling stretches the global ones.
  bool local_rope = false;
};

std::span<const ModelFamilyInfo> model_families();
// Whether the family's config.json can say sliding_window.
bool has_sliding_window(const ModelFamilyInfo& f);
// The window of block `layer` (0: it attends to everything before it):
// arch.sliding_window in every block but the family's global ones.
std::int64_t layer_window(const ModelArch& a, std::int64_t layer);
const ModelFamilyInfo& family_info(ModelFamily f);
// The traits of the architecture's kind of block.
inline const BlockTraits& block_traits(const ModelArch& a) { return block_traits(family_info(a.family).block); }
// By spec name (= model_type); nullptr when unknown.
const ModelFamilyInfo* family_by_name(std::string_view name);
// "llama, gpt2, mistral or qwen2".
std::string family_names_text();

// The block's linear layers, in Hugging Face's order, with their shapes.
std::vector<LinearLayer> block_linears(const ModelArch& a);
// The distinct LoRA target names of a family ("c_proj" once for GPT-2).
std::vector<std::string> lora_target_names(ModelFamily f);

// What strategy.lora.modules_to_save trains whole: the embedding and the
// head (PEFT's module names: HfTensorNames::embed and ::head). A tied
// model's one matrix is `embedding` alone.
struct WholeModules {
  bool embedding = false;
  bool head = false;  // an untied head
  bool any() const { return embedding || head; }
};
// The names modules_to_save accepts for the family: the embedding's, then
// the head's as transformers 5 names its module (lm_head), then the head's
// older name where it has one (gpt_neox's embed_out, the checkpoints' name).
std::vector<std::string> whole_module_names(ModelFamily f);
// Whether `name` is one of the family's names for its head.
bool is_head_module(ModelFamily f, const std::string& name);
WholeModules whole_modules(const ModelArch& a, const std::vector<std::string>& names);

// The architecture in a Hugging Face config.json's text. Problems (not a
// JSON object, an unsupported model_type, a key of the wrong type) are
// appended to `errors`, each naming `file` and the key; false when any.
bool arch_from_hf_config(const std::string& json_text, const std::string& file, ModelArch& arch,
                         std::vector<std::string>& errors);

// The special token ids an exported model declares (from its tokenizer);
// negative: not declared.
struct SpecialTokenIds {
  std::int64_t bos = -1;
  std::int64_t eos = -1;
  std::int64_t pad = -1;  // written for a sequence classifier only (where it pools)
};

// A config.json that transformers' AutoConfig reads back as `arch`, with
// bos_token_id and eos_token_id from `ids`, null where it has none (else
// transformers would assume its defaults, e.g. GPT-2's 50256, beyond a
// small vocabulary).
// `sequence_classifier`: a reward model's folder (one label, the
// family's <X>ForSequenceClassification, pad_token_id from `ids`, which
// transformers pools the score at: the last token that is not padding).
std::string hf_config_json(const ModelArch& arch, std::string_view torch_dtype, const SpecialTokenIds& ids = {},
                           bool sequence_classifier = false);

// generation_config.json for the same ids: what transformers' generate()
// stops at.
std::string hf_generation_config_json(const SpecialTokenIds& ids);

}  // namespace tailor::dsl
