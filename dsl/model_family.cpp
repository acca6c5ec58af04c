#include "dsl/model_family.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/text.h"
#include "dsl/rope.h"

namespace tailor::dsl {
namespace {

// Config keys and defaults as transformers' LlamaConfig, MistralConfig,
// Qwen2Config, Qwen3Config, MixtralConfig, Phi3Config, Gemma2Config,
// Gemma3TextConfig, GPT2Config and GPTNeoXConfig define them.
// The Llama-like families' keys and tensor names, shared.
constexpr HfConfigKeys kLlamaKeys{.layers = "num_hidden_layers",
                                  .hidden = "hidden_size",
                                  .intermediate = "intermediate_size",
                                  .heads = "num_attention_heads",
                                  .kv_heads = "num_key_value_heads",
                                  .positions = "max_position_embeddings",
                                  .norm_eps = "rms_norm_eps",
                                  .rope_theta = "rope_theta"};
constexpr HfTensorNames kLlamaTensors{.body = "model.",
                                      .embed = "embed_tokens",
                                      .positions = nullptr,
                                      .layers = "layers.",
                                      .norm1 = "input_layernorm",
                                      .norm2 = "post_attention_layernorm",
                                      .final_norm = "norm"};

constexpr HfTensorNames with_qk_norm(HfTensorNames t) {
  t.q_norm = "self_attn.q_norm";
  t.k_norm = "self_attn.k_norm";
  return t;
}

constexpr HfConfigKeys with_experts(HfConfigKeys k, const char* experts, const char* per_token) {
  k.experts = experts;
  k.experts_per_token = per_token;
  return k;
}

constexpr HfTensorNames with_moe(HfTensorNames t, const char* moe) {
  t.moe = moe;
  return t;
}

// Gemma's four norms a block: the one before the MLP is norm2.
constexpr HfTensorNames gemma_tensors(HfTensorNames t) {
  t.norm2 = "pre_feedforward_layernorm";
  t.post_attn_norm = "post_attention_layernorm";
  t.post_mlp_norm = "post_feedforward_layernorm";
  return t;
}

constexpr std::array<ModelFamilyInfo, 10> kFamilies = {{
    {.id = ModelFamily::kLlama,
     .name = "llama",
     .hf_architecture = "LlamaForCausalLM",
     .block = BlockKind::kLlama,
     .keys = kLlamaKeys,
     .config_extra = R"({"hidden_act": "silu", "attention_bias": false})",
     .tensors = kLlamaTensors},
    {.id = ModelFamily::kGpt2,
     .name = "gpt2",
     .hf_architecture = "GPT2LMHeadModel",
     .block = BlockKind::kGpt2,
     .qkv_bias = true,
     .keys = {.layers = "n_layer",
              .hidden = "n_embd",
              .intermediate = "n_inner",
              .heads = "n_head",
              .kv_heads = nullptr,
              .positions = "n_positions",
              .norm_eps = "layer_norm_epsilon",
              .rope_theta = nullptr},
     .default_positions = 1024,
     .default_norm_eps = 1e-5,
     .default_tie_embeddings = true,
     .default_intermediate_per_hidden = 4,
     // The model's GELU is the tanh approximation (transformers' "gelu_new").
     .config_extra = R"({"activation_function": "gelu_new"})",
     .tensors = {.body = "transformer.",
                 .embed = "wte",
                 .positions = "wpe",
                 .layers = "h.",
                 .norm1 = "ln_1",
                 .norm2 = "ln_2",
                 .final_norm = "ln_f"}},
    {.id = ModelFamily::kMistral,
     .name = "mistral",
     .hf_architecture = "MistralForCausalLM",
     .block = BlockKind::kLlama,
     .keys = kLlamaKeys,
     // The model attends over the whole context: say so, or transformers
     // would apply its default 4096-token sliding window.
     .config_extra = R"({"hidden_act": "silu", "sliding_window": null, "attention_bias": false})",
     .tensors = kLlamaTensors},
    {.id = ModelFamily::kQwen2,
     .name = "qwen2",
     .hf_architecture = "Qwen2ForCausalLM",
     .block = BlockKind::kLlama,
     .qkv_bias = true,
     .keys = kLlamaKeys,
     .config_extra = R"({"hidden_act": "silu", "use_sliding_window": false})",
     .tensors = kLlamaTensors},
    // Qwen3: Qwen2 without the q/k/v biases, with an RMSNorm over every q
    // and k head before RoPE, and heads 128 wide whatever the hidden size.
    {.id = ModelFamily::kQwen3,
     .name = "qwen3",
     .hf_architecture = "Qwen3ForCausalLM",
     .block = BlockKind::kLlama,
     .qk_norm = true,
     .default_head_dim = 128,
     .keys = kLlamaKeys,
     .config_extra = R"({"hidden_act": "silu", "use_sliding_window": false, "attention_bias": false})",
     .tensors = with_qk_norm(kLlamaTensors)},
    // Mixtral: Mistral's attention; each block's MLP is num_local_experts
    // SwiGLU experts and a router sending each token to the top
    // num_experts_per_tok of them, weighted by their renormalised softmax.
    {.id = ModelFamily::kMixtral,
     .name = "mixtral",
     .hf_architecture = "MixtralForCausalLM",
     .block = BlockKind::kLlama,
     .keys = with_experts(kLlamaKeys, "num_local_experts", "num_experts_per_tok"),
     .default_positions = 131072,
     .default_norm_eps = 1e-5,
     .config_extra =
         R"({"hidden_act": "silu", "sliding_window": null, "output_router_logits": false, "router_jitter_noise": 0.0})",
     .default_experts = 8,
     .default_experts_per_token = 2,
     .tensors = with_moe(kLlamaTensors, "block_sparse_moe.")},
    // Phi-3: Llama's block with q/k/v and gate/up each one linear in the
    // checkpoint (qkv_proj, gate_up_proj), as Tailor computes them; Phi-3
    // mini 4k windows attention to 2047 tokens.
    {.id = ModelFamily::kPhi3,
     .name = "phi3",
     .hf_architecture = "Phi3ForCausalLM",
     .block = BlockKind::kLlama,
     .hf_fused_linears = true,
     .keys = kLlamaKeys,
     .default_positions = 4096,
     .default_norm_eps = 1e-5,
     .config_extra = R"({"hidden_act": "silu", "sliding_window": null})",
     .tensors = kLlamaTensors},
    // Gemma 2: Llama's attention with heads 256 wide, scores scaled by
    // query_pre_attn_scalar and soft-capped, a window on every other layer;
    // GeGLU; four norms a block; tied, soft-capped logits.
    {.id = ModelFamily::kGemma2,
     .name = "gemma2",
     .hf_architecture = "Gemma2ForCausalLM",
     .block = BlockKind::kLlama,
     .default_head_dim = 256,
     .keys = kLlamaKeys,
     .default_positions = 8192,
     .default_tie_embeddings = true,
     .config_extra = R"({"hidden_activation": "gelu_pytorch_tanh", "sliding_window": null, "attention_bias": false})",
     .tensors = gemma_tensors(kLlamaTensors),
     .gemma = true,
     .window_every = 2},
    // Gemma 3 (text; 270M and 1B are text-only checkpoints): Gemma 2's block
    // with q/k norms instead of soft-capping, five windowed layers to one
    // global, and the windowed layers on their own RoPE base.
    {.id = ModelFamily::kGemma3,
     .name = "gemma3_text",
     .hf_architecture = "Gemma3ForCausalLM",
     .block = BlockKind::kLlama,
     .qk_norm = true,
     .default_head_dim = 256,
     .keys = kLlamaKeys,
     .default_positions = 131072,
     .default_tie_embeddings = true,
     .config_extra = R"({"hidden_activation": "gelu_pytorch_tanh", "sliding_window": null, "attention_bias": false,
         "use_bidirectional_attention": false})",
     .tensors = with_qk_norm(gemma_tensors(kLlamaTensors)),
     .gemma = true,
     .window_every = 6,
     .local_rope = true},
    // GPT-NeoX (Black et al. 2022) and Pythia (Biderman et al. 2023): the
    // attention and the MLP read the same input and add to the residual
    // together; RoPE rotates the first quarter of each head; exact GELU.
    {.id = ModelFamily::kGptNeox,
     .name = "gpt_neox",
     .hf_architecture = "GPTNeoXForCausalLM",
     .block = BlockKind::kGptNeox,
     .qkv_bias = true,
     .keys = {.layers = "num_hidden_layers",
              .hidden = "hidden_size",
              .intermediate = "intermediate_size",
              .heads = "num_attention_heads",
              .kv_heads = nullptr,
              .positions = "max_position_embeddings",
              .norm_eps = "layer_norm_eps",
              .rope_theta = "rotary_emb_base",
              .partial_rotary = "rotary_pct"},
     .default_norm_eps = 1e-5,
     .default_partial_rotary = 0.25,
     .config_extra = R"({"hidden_act": "gelu", "use_parallel_residual": true, "attention_bias": true})",
     .tensors = {.body = "gpt_neox.",
                 .embed = "embed_in",
                 .positions = nullptr,
                 .layers = "layers.",
                 .norm1 = "input_layernorm",
                 .norm2 = "post_attention_layernorm",
                 .final_norm = "final_layer_norm",
                 .head = "embed_out"}},
}};

// clang-format off
constexpr BlockTraits kLlamaTraits{.layer_norm = false, .rope = true, .conv1d = false, .free_head_dim = true, .qkv_head_by_head = false};
constexpr BlockTraits kGpt2Traits{.layer_norm = true, .rope = false, .conv1d = true, .free_head_dim = false, .qkv_head_by_head = false};
constexpr BlockTraits kGptNeoxTraits{.layer_norm = true, .rope = true, .conv1d = false, .free_head_dim = false, .qkv_head_by_head = true};
// clang-format on

// Gemma2Config's and Gemma3TextConfig's defaults for keys a config.json
// leaves out (null says "none" and is not the same as absent).
struct GemmaDefaults {
  ModelFamily id;
  double attn_softcap, final_softcap;
  double global_theta, local_theta;  // local 0: no local base
};
constexpr GemmaDefaults kGemmaDefaults[] = {{ModelFamily::kGemma2, 50.0, 30.0, 10000.0, 0},
                                            {ModelFamily::kGemma3, 0, 0, 1e6, 10000.0}};
constexpr std::int64_t kGemmaQueryScalar = 256, kGemmaWindow = 4096;

// Gemma's soft-capping, score scale, local RoPE base and per-layer
// attention kinds, with its config class's defaults. A layer_types that
// windows no layer sets sliding_window to -1 for the caller; false when
// something is refused.
template <typename Refuse>
bool read_gemma(const nlohmann::json& j, const ModelFamilyInfo& f, ModelArch& arch, Refuse&& refuse) {
  bool ok = true;
  GemmaDefaults defaults = kGemmaDefaults[0];
  for (const GemmaDefaults& g : kGemmaDefaults) {
    if (g.id == f.id) defaults = g;
  }
  auto positive_or_null = [&](const char* key, double fallback, double& out) {
    auto it = j.find(key);
    if (it == j.end()) {
      out = fallback;
    } else if (it->is_null()) {
      out = 0;
    } else if (it->is_number() && it->get<double>() > 0) {
      out = it->get<double>();
    } else {
      refuse(key, *it, "expected a positive number or null");
      ok = false;
    }
  };
  positive_or_null("attn_logit_softcapping", defaults.attn_softcap, arch.attn_logit_softcap);
  positive_or_null("final_logit_softcapping", defaults.final_softcap, arch.final_logit_softcap);
  if (!j.contains("rope_theta") && !j.contains("rope_parameters")) arch.rope_theta = defaults.global_theta;
  if (f.local_rope) {
    if (arch.rope_local_theta == 0) arch.rope_local_theta = defaults.local_theta;
    if (auto it = j.find("rope_local_base_freq"); it != j.end()) {
      if (it->is_number() && it->get<double>() > 0) {
        arch.rope_local_theta = it->get<double>();
      } else {
        refuse("rope_local_base_freq", *it, "expected a positive number");
        ok = false;
      }
    }
  }
  arch.query_pre_attn_scalar = kGemmaQueryScalar;
  if (auto it = j.find("query_pre_attn_scalar"); it != j.end()) {
    if (it->is_number_integer() && it->get<std::int64_t>() > 0) {
      arch.query_pre_attn_scalar = it->get<std::int64_t>();
    } else {
      refuse("query_pre_attn_scalar", *it, "expected a positive integer");
      ok = false;
    }
  }
  if (auto it = j.find("use_bidirectional_attention"); it != j.end() && !it->is_null() && *it != false) {
    refuse("use_bidirectional_attention", *it, "Tailor trains causal language models");
    ok = false;
  }
  const std::int64_t every = f.window_every;
  // Hub configs say sliding_window_pattern, transformers 5 writes it with
  // a leading underscore.
  for (const char* key : {"sliding_window_pattern", "_sliding_window_pattern"}) {
    if (auto it = j.find(key); it != j.end() && !it->is_null() && *it != every) {
      refuse(key, *it, std::string(f.name) + "'s global layers are every " + std::to_string(every) + "th");
      ok = false;
    }
  }
  if (auto it = j.find("layer_types"); it != j.end() && !it->is_null()) {
    // Full where (i + 1) is a multiple of the family's period, as the
    // configs' default; or full everywhere.
    bool patterned = it->is_array() && static_cast<std::int64_t>(it->size()) == arch.layers;
    bool all_full = patterned;
    for (std::size_t i = 0; it->is_array() && i < it->size(); ++i) {
      const bool sliding = (*it)[i] == "sliding_attention";
      if (!sliding && (*it)[i] != "full_attention") all_full = patterned = false;
      patterned = patterned && sliding == ((static_cast<std::int64_t>(i) + 1) % every != 0);
      all_full = all_full && !sliding;
    }
    if (all_full) {
      arch.sliding_window = -1;
    } else if (!patterned) {
      refuse("layer_types", *it,
             "Tailor windows every layer of " + std::string(f.name) + " but every " + std::to_string(every) +
                 "th (its config's default), or none; one entry per layer");
      ok = false;
    }
  }
  return ok;
}

// A config.json being read against its family: the refusals it collects.
struct ConfigCheck {
  const nlohmann::json& j;
  const ModelFamilyInfo& f;
  ModelArch& arch;
  const std::string& where;
  std::vector<std::string>& errors;

  void refuse(const std::string& key, const nlohmann::json& value, const std::string& why) const {
    errors.push_back(where + ": " + key + " " + value.dump() + " is not supported: " + why);
  }
  // The key's value; null where it is missing or null.
  const nlohmann::json* value_of(const char* key) const {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }
};

// RoPE's base and scaling (not GPT-2's, which has none): transformers 5
// writes rope_parameters {rope_theta, rope_type}, 4.x a top-level
// rope_theta and an optional rope_scaling.
void read_rope(const ConfigCheck& c) {
  const ModelFamilyInfo& f = c.f;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    const nlohmann::json* rope = c.value_of(key);
    if (rope == nullptr) continue;
    if (!rope->is_object()) {
      c.refuse(key, *rope, "expected an object");
      continue;
    }
    std::string at = key;
    // Gemma 3 in transformers 5: one object per attention kind, the windowed
    // layers' never scaled.
    if (f.local_rope && (rope->contains("full_attention") || rope->contains("sliding_attention"))) {
      if (auto local = rope->find("sliding_attention"); local != rope->end() && local->is_object()) {
        const std::string local_type = local->value("rope_type", std::string("default"));
        if (local_type != "default") {
          c.refuse(at + ".sliding_attention.rope_type", local_type, "Gemma 3's windowed layers rotate unscaled");
        }
        auto theta = local->find("rope_theta");
        if (theta != local->end() && theta->is_number()) c.arch.rope_local_theta = theta->get<double>();
      }
      auto global = rope->find("full_attention");
      if (global == rope->end() || !global->is_object()) continue;
      rope = &*global;
      at += ".full_attention";
    }
    const std::string type = rope->value("rope_type", rope->value("type", std::string("default")));
    auto theta = rope->find("rope_theta");
    if (theta != rope->end() && theta->is_number() && c.value_of("rope_theta") == nullptr)
      c.arch.rope_theta = theta->get<double>();
    if (type == "default") continue;
    RopeScaling r;
    if (!rope_scaling_type_from(type, r.type) || r.type == RopeScalingType::kNone) {
      c.refuse(at + ".rope_type", type, "Tailor scales RoPE as llama3 or linear, or not at all");
      continue;
    }
    auto number = [&](const char* name, double fallback) {
      auto it = rope->find(name);
      return it != rope->end() && it->is_number() ? it->get<double>() : fallback;
    };
    r.factor = number("factor", 1.0);
    if (r.type == RopeScalingType::kLlama3) {
      r.low_freq_factor = number("low_freq_factor", r.low_freq_factor);
      r.high_freq_factor = number("high_freq_factor", r.high_freq_factor);
      // In the scaling's object (Llama 3.1's config.json), else top-level.
      const nlohmann::json* top = c.value_of("original_max_position_embeddings");
      r.original_max_seq_len = static_cast<std::int64_t>(
          number("original_max_position_embeddings", top != nullptr && top->is_number() ? top->get<double>() : 0));
    }
    if (const std::string problem = rope_scaling_problem(r); !problem.empty()) {
      c.refuse(at, *rope, problem);
    } else {
      c.arch.rope_scaling = r;
    }
  }
}

// The fraction of a head RoPE rotates, as transformers 5 reads it:
// rope_parameters' partial_rotary_factor, else the family's top-level key
// (GPT-NeoX's rotary_pct, or partial_rotary_factor), else its default. Only
// GPT-NeoX's rotates part of a head here; the rotated dimensions must pair.
void read_partial_rotary(const ConfigCheck& c) {
  const ModelFamilyInfo& f = c.f;
  const char* key = "partial_rotary_factor";
  const nlohmann::json* value = nullptr;
  if (const nlohmann::json* rope = c.value_of("rope_parameters"); rope != nullptr && rope->is_object()) {
    if (auto it = rope->find(key); it != rope->end() && !it->is_null()) value = &*it;
  }
  for (const char* top : {f.keys.partial_rotary, key}) {
    if (value == nullptr && top != nullptr && c.value_of(top) != nullptr) {
      value = c.value_of(top);
      key = top;
    }
  }
  c.arch.partial_rotary_factor = 0;  // the family's default
  if (value == nullptr) return;
  const double fraction = value->is_number() ? value->get<double>() : 0;
  if (f.keys.partial_rotary == nullptr && fraction != 1.0) {
    c.refuse(key, *value, "Tailor rotates every dimension of a " + std::string(f.name) + " head");
  } else if (!(fraction > 0 && fraction <= 1)) {
    c.refuse(key, *value, "expected a number in (0, 1]");
  } else {
    c.arch.partial_rotary_factor = fraction;
  }
}

// The sliding window, where the family has one.
void read_window(const ConfigCheck& c) {
  const ModelFamilyInfo& f = c.f;
  const nlohmann::json& j = c.j;
  nlohmann::json gemma_window = kGemmaWindow;
  // A sliding window narrower than the context changes attention. Qwen
  // windows the layers from max_window_layers up (Qwen2Config): Tailor
  // windows every layer or none.
  // Gemma's windowed layers are a kind of layer even where the window
  // spans the context (Gemma 3 rotates them by their own RoPE base): a
  // window is kept whatever its width, and a null one spans the context.
  const nlohmann::json* window = c.value_of("sliding_window");
  nlohmann::json whole_context = c.arch.max_seq_len;
  if (f.gemma && !j.contains("sliding_window")) window = &gemma_window;
  if (f.gemma && window == nullptr) window = &whole_context;
  if (f.gemma && c.arch.sliding_window < 0) window = nullptr;  // layer_types: no layer windowed
  c.arch.sliding_window = 0;
  const nlohmann::json* use_window = c.value_of("use_sliding_window");
  const bool windowed = use_window != nullptr ? use_window->is_boolean() && use_window->get<bool>() : window != nullptr;
  const bool covers_context =
      !f.gemma && window != nullptr && window->is_number_integer() && window->get<std::int64_t>() >= c.arch.max_seq_len;
  if (windowed && window != nullptr && !covers_context) {
    const nlohmann::json* from_layer = c.value_of("max_window_layers");
    if (!has_sliding_window(f)) {
      c.refuse("sliding_window", *window, std::string(f.name) + " attends over the whole context");
    } else if (!(window->is_number_integer() && window->get<std::int64_t>() > 0)) {
      c.refuse("sliding_window", *window, "expected a positive integer or null");
    } else if (use_window != nullptr && !(from_layer != nullptr && from_layer->is_number_integer() &&
                                          from_layer->get<std::int64_t>() == 0)) {
      c.refuse("max_window_layers", from_layer ? *from_layer : nlohmann::json(28),
               "Tailor windows every layer (max_window_layers 0) or none (use_sliding_window false)");
    } else {
      c.arch.sliding_window = window->get<std::int64_t>();
    }
  }
}

// What changes training but not the computation's shape: dropout, biases,
// the activation, the router's training-only terms, GPT-2's attention
// variants.
void check_training_keys(const ConfigCheck& c) {
  const ModelFamilyInfo& f = c.f;
  const bool gpt2 = f.block == BlockKind::kGpt2, neox = f.block == BlockKind::kGptNeox;
  // Dropout in training: Tailor's llama-family and GPT-NeoX blocks have none.
  for (const char* key : {"attention_dropout", "hidden_dropout", "resid_pdrop", "embd_pdrop"}) {
    const nlohmann::json* p = c.value_of(key);
    if (p != nullptr && !gpt2 && !(p->is_number() && p->get<double>() == 0))
      c.refuse(key, *p, "Tailor trains this family without dropout");
  }
  // GPT-NeoX's linears all have biases (attention_bias false drops the
  // attention's); the llama kind's have none but the family's q/k/v ones.
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    const nlohmann::json* b = c.value_of(key);
    const bool biased = neox && std::string_view(key) == "attention_bias";
    if (b != nullptr && !gpt2 && !(b->is_boolean() && b->get<bool>() == biased))
      c.refuse(key, *b, biased ? "the family's linears have biases" : "the family's linears have no bias");
  }
  if (const nlohmann::json* p = c.value_of("use_parallel_residual");
      neox && p != nullptr && !(p->is_boolean() && p->get<bool>())) {
    c.refuse("use_parallel_residual", *p, "Tailor's gpt_neox block is the parallel one (as every Pythia)");
  }
  // Gemma's configs say hidden_activation (and older ones hidden_act too).
  const std::string act = gpt2 ? "gelu_new" : neox ? "gelu" : f.gemma ? "gelu_pytorch_tanh" : "silu";
  for (const char* act_key : {gpt2 ? "activation_function" : "hidden_act", f.gemma ? "hidden_activation" : ""}) {
    if (const nlohmann::json* a = c.value_of(act_key); a != nullptr && *a != act) {
      c.refuse(act_key, *a, "the family's activation here is " + act);
    }
  }
  if (f.keys.experts != nullptr) {
    // Training-only changes to the router: the load-balancing loss added to
    // the loss, and multiplicative noise on the router's input.
    if (const nlohmann::json* r = c.value_of("output_router_logits");
        r != nullptr && !(r->is_boolean() && !r->get<bool>())) {
      c.refuse("output_router_logits", *r, "Tailor trains without the router's load-balancing loss");
    }
    if (const nlohmann::json* r = c.value_of("router_jitter_noise");
        r != nullptr && !(r->is_number() && r->get<double>() == 0)) {
      c.refuse("router_jitter_noise", *r, "Tailor's router sees its input without noise");
    }
    if (c.arch.experts < 1 || c.arch.experts_per_token < 1 || c.arch.experts_per_token > c.arch.experts) {
      c.errors.push_back(c.where + ": " + f.keys.experts_per_token + " (" + std::to_string(c.arch.experts_per_token) +
                         ") must be between 1 and " + f.keys.experts + " (" + std::to_string(c.arch.experts) + ")");
    }
  }
  for (const char* key : {"scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"}) {
    const nlohmann::json* b = c.value_of(key);
    if (b != nullptr && gpt2 && !(b->is_boolean() && !b->get<bool>()))
      c.refuse(key, *b, "Tailor's GPT-2 attention is the original one");
  }
}

// What else a config.json says that changes the computation: read where
// the model implements it, refused by name where it does not, so that a
// model never trains silently as another one.
void check_computation(const nlohmann::json& j, const ModelFamilyInfo& f, ModelArch& arch, const std::string& where,
                       std::vector<std::string>& errors) {
  const ConfigCheck c{j, f, arch, where, errors};
  const BlockTraits& traits = block_traits(f.block);
  if (traits.rope) read_rope(c);
  if (traits.rope) read_partial_rotary(c);
  if (const nlohmann::json* hd = c.value_of("head_dim"); hd != nullptr && traits.free_head_dim) {
    if (hd->is_number_integer() && hd->get<std::int64_t>() > 0 && hd->get<std::int64_t>() % 2 == 0) {
      c.arch.head_size = hd->get<std::int64_t>();
    } else {
      c.refuse("head_dim", *hd, "expected a positive even integer (RoPE rotates pairs)");
    }
  } else if (hd != nullptr && traits.rope && !(hd->is_number_integer() && hd->get<std::int64_t>() == arch.head_dim())) {
    // GPT-NeoX's attention ignores head_dim and its RoPE reads it: refused
    // unless it says hidden / heads.
    c.refuse("head_dim", *hd, std::string(f.name) + " heads are hidden / heads wide");
  }
  if (f.gemma &&
      !read_gemma(j, f, arch, [&](const std::string& key, const nlohmann::json& value, const std::string& why) {
        c.refuse(key, value, why);
      })) {
    return;
  }
  read_window(c);
  check_training_keys(c);
}

}  // namespace

bool has_sliding_window(const ModelFamilyInfo& f) {
  // The families whose configs say sliding_window (transformers' Mistral,
  // Mixtral, Qwen2, Qwen3 and Phi-3); exported through config_extra's keys.
  return std::string_view(f.config_extra).find("sliding_window") != std::string_view::npos;
}

std::int64_t layer_window(const ModelArch& a, std::int64_t layer) {
  const std::int64_t every = family_info(a.family).window_every;
  if (every > 1 && (layer + 1) % every == 0) return 0;
  return a.sliding_window;
}

std::int64_t ModelArch::rotary_dims() const {
  const double fraction =
      partial_rotary_factor > 0 ? partial_rotary_factor : family_info(family).default_partial_rotary;
  return static_cast<std::int64_t>(static_cast<double>(head_dim()) * fraction);
}

double ModelArch::attention_scale() const {
  return 1.0 / std::sqrt(static_cast<double>(query_pre_attn_scalar > 0 ? query_pre_attn_scalar : head_dim()));
}

std::span<const ModelFamilyInfo> model_families() { return kFamilies; }

const BlockTraits& block_traits(BlockKind k) {
  switch (k) {
    case BlockKind::kGpt2: return kGpt2Traits;
    case BlockKind::kGptNeox: return kGptNeoxTraits;
    case BlockKind::kLlama: break;
  }
  return kLlamaTraits;
}

const ModelFamilyInfo& family_info(ModelFamily f) {
  for (const ModelFamilyInfo& i : kFamilies) {
    if (i.id == f) return i;
  }
  return kFamilies.front();
}

const ModelFamilyInfo* family_by_name(std::string_view name) {
  for (const ModelFamilyInfo& i : kFamilies) {
    if (name == i.name) return &i;
  }
  return nullptr;
}

std::string family_names_text() {
  std::vector<std::string> names;
  for (const ModelFamilyInfo& i : kFamilies) names.emplace_back(i.name);
  std::string out;
  for (std::size_t k = 0; k < names.size(); ++k) {
    out += (k == 0 ? "" : k + 1 == names.size() ? " or " : ", ") + names[k];
  }
  return out;
}

std::vector<LinearLayer> block_linears(const ModelArch& a) {
  const std::int64_t c = a.hidden, d = a.head_dim(), q = a.heads * d, kv = a.kv_heads * d, i = a.intermediate;
  if (family_info(a.family).block == BlockKind::kGptNeox) {
    // query_key_value's rows are q/k/v head by head (BlockTraits).
    return {{"query_key_value", "attention.query_key_value", Projection::kQkv, 0, q + 2 * kv, c},
            {"dense", "attention.dense", Projection::kO, 0, c, q},
            {"dense_h_to_4h", "mlp.dense_h_to_4h", Projection::kUp, 0, i, c},
            {"dense_4h_to_h", "mlp.dense_4h_to_h", Projection::kDown, 0, c, i}};
  }
  if (family_info(a.family).block == BlockKind::kGpt2) {
    return {{"c_attn", "attn.c_attn", Projection::kQkv, 0, q + 2 * kv, c},
            {"c_proj", "attn.c_proj", Projection::kO, 0, c, q},
            {"c_fc", "mlp.c_fc", Projection::kUp, 0, i, c},
            {"c_proj", "mlp.c_proj", Projection::kDown, 0, c, i}};
  }
  if (family_info(a.family).hf_fused_linears) {
    return {{"qkv_proj", "self_attn.qkv_proj", Projection::kQkv, 0, q + 2 * kv, c},
            {"o_proj", "self_attn.o_proj", Projection::kO, 0, c, q},
            {"gate_up_proj", "mlp.gate_up_proj", Projection::kUp, 0, 2 * i, c},
            {"down_proj", "mlp.down_proj", Projection::kDown, 0, c, i}};
  }
  std::vector<LinearLayer> out = {{"q_proj", "self_attn.q_proj", Projection::kQkv, 0, q, c},
                                   {"k_proj", "self_attn.k_proj", Projection::kQkv, q, kv, c},
                                   {"v_proj", "self_attn.v_proj", Projection::kQkv, q + kv, kv, c},
                                   {"o_proj", "self_attn.o_proj", Projection::kO, 0, c, q}};
  if (a.moe()) return out;  // the experts and the router are not linears every token goes through
  out.push_back({"gate_proj", "mlp.gate_proj", Projection::kUp, 0, i, c});
  out.push_back({"up_proj", "mlp.up_proj", Projection::kUp, i, i, c});
  out.push_back({"down_proj", "mlp.down_proj", Projection::kDown, 0, c, i});
  return out;
}

std::vector<std::string> lora_target_names(ModelFamily f) {
  // Shapes do not matter for the names: a unit architecture of the family.
  ModelArch a;
  a.family = f;
  a.hidden = a.heads = a.kv_heads = a.intermediate = 1;
  a.experts = family_info(f).default_experts;
  std::vector<std::string> out;
  for (const LinearLayer& l : block_linears(a)) {
    if (std::find(out.begin(), out.end(), l.target) == out.end()) out.emplace_back(l.target);
  }
  return out;
}

std::vector<std::string> whole_module_names(ModelFamily f) {
  const HfTensorNames& t = family_info(f).tensors;
  std::vector<std::string> out = {t.embed, "lm_head"};
  if (std::string_view(t.head) != "lm_head") out.emplace_back(t.head);
  return out;
}

bool is_head_module(ModelFamily f, const std::string& name) {
  return name == "lm_head" || name == family_info(f).tensors.head;
}

WholeModules whole_modules(const ModelArch& a, const std::vector<std::string>& names) {
  const std::string embed = family_info(a.family).tensors.embed;
  const bool embedding = std::find(names.begin(), names.end(), embed) != names.end();
  const bool head =
      std::any_of(names.begin(), names.end(), [&](const std::string& n) { return is_head_module(a.family, n); });
  WholeModules w;
  w.embedding = embedding || (a.tie_embeddings && head);
  w.head = !a.tie_embeddings && head;
  return w;
}

bool arch_from_hf_config(const std::string& text, const std::string& file, ModelArch& arch,
                         std::vector<std::string>& errors) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    errors.push_back(quote(file, kWhole) + " is not a valid JSON object");
    return false;
  }
  const std::string type = j.value("model_type", std::string());
  const ModelFamilyInfo* f = family_by_name(type);
  if (f == nullptr) {
    errors.push_back(quote(file, kWhole) + ": model_type " + quote(type) + " is not supported; expected " +
                     family_names_text());
    return false;
  }
  const std::size_t errors_before = errors.size();
  auto get_int = [&](const char* key, std::int64_t fallback) -> std::int64_t {
    if (key == nullptr) return fallback;
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    if (!it->is_number_integer()) {
      errors.push_back(quote(file, kWhole) + ": " + key + " is not an integer");
      return fallback;
    }
    return it->get<std::int64_t>();
  };
  auto get_num = [&](const char* key, double fallback) -> double {
    if (key == nullptr) return fallback;
    auto it = j.find(key);
    return (it != j.end() && it->is_number()) ? it->get<double>() : fallback;
  };
  arch.family = f->id;
  arch.layers = get_int(f->keys.layers, 0);
  arch.hidden = get_int(f->keys.hidden, 0);
  arch.intermediate = get_int(f->keys.intermediate, f->default_intermediate_per_hidden * arch.hidden);
  arch.heads = get_int(f->keys.heads, 0);
  arch.kv_heads = get_int(f->keys.kv_heads, arch.heads);
  arch.vocab = get_int("vocab_size", 0);
  arch.max_seq_len = get_int(f->keys.positions, f->default_positions);
  auto tie = j.find("tie_word_embeddings");
  arch.tie_embeddings = (tie != j.end() && tie->is_boolean()) ? tie->get<bool>() : f->default_tie_embeddings;
  arch.rope_theta = get_num(f->keys.rope_theta, 10000.0);
  arch.partial_rotary_factor = 0;
  arch.norm_eps = get_num(f->keys.norm_eps, f->default_norm_eps);
  arch.head_size = f->default_head_dim;
  arch.rope_local_theta = 0;
  arch.experts = get_int(f->keys.experts, f->default_experts);
  arch.experts_per_token = get_int(f->keys.experts_per_token, f->default_experts_per_token);
  check_computation(j, *f, arch, quote(file, kWhole), errors);
  return errors.size() == errors_before;
}

std::string hf_config_json(const ModelArch& a, std::string_view torch_dtype, const SpecialTokenIds& ids,
                           bool sequence_classifier) {
  const ModelFamilyInfo& f = family_info(a.family);
  nlohmann::ordered_json j;
  std::string architecture = f.hf_architecture;
  if (sequence_classifier) {
    // LlamaForCausalLM -> LlamaForSequenceClassification, GPT2LMHeadModel ->
    // GPT2ForSequenceClassification (AutoModelForSequenceClassification
    // picks the class by model_type; this names it for readers).
    for (const char* suffix : {"ForCausalLM", "LMHeadModel"}) {
      const std::size_t at = architecture.rfind(suffix);
      if (at != std::string::npos) architecture = architecture.substr(0, at) + "ForSequenceClassification";
    }
  }
  j["architectures"] = {architecture};
  j["model_type"] = f.name;
  j[f.keys.hidden] = a.hidden;
  j[f.keys.intermediate] = a.intermediate;
  j[f.keys.layers] = a.layers;
  j[f.keys.heads] = a.heads;
  if (f.keys.kv_heads) j[f.keys.kv_heads] = a.kv_heads;
  j["vocab_size"] = a.vocab;
  j[f.keys.positions] = a.max_seq_len;
  j[f.keys.norm_eps] = a.norm_eps;
  if (f.keys.rope_theta) j[f.keys.rope_theta] = a.rope_theta;
  if (const RopeScaling& r = a.rope_scaling; r.type != RopeScalingType::kNone) {
    // As Llama 3.1's config.json writes it; transformers 5 reads it into
    // rope_parameters with the top-level rope_theta.
    nlohmann::ordered_json scaling = {{"rope_type", to_string(r.type)}, {"factor", r.factor}};
    if (r.type == RopeScalingType::kLlama3) {
      scaling["low_freq_factor"] = r.low_freq_factor;
      scaling["high_freq_factor"] = r.high_freq_factor;
      scaling["original_max_position_embeddings"] = r.original_max_seq_len;
    }
    j["rope_scaling"] = scaling;
  }
  if (block_traits(f.block).free_head_dim) j["head_dim"] = a.head_dim();
  if (f.keys.partial_rotary) {
    j[f.keys.partial_rotary] = a.partial_rotary_factor > 0 ? a.partial_rotary_factor : f.default_partial_rotary;
  }
  if (f.keys.experts) {
    j[f.keys.experts] = a.experts;
    j[f.keys.experts_per_token] = a.experts_per_token;
  }
  const nlohmann::ordered_json extra = nlohmann::ordered_json::parse(f.config_extra);
  for (auto it = extra.begin(); it != extra.end(); ++it) j[it.key()] = it.value();
  if (f.local_rope) j["rope_local_base_freq"] = a.rope_local_theta > 0 ? a.rope_local_theta : a.rope_theta;
  if (f.gemma) {
    auto cap = [](double c) { return c > 0 ? nlohmann::ordered_json(c) : nlohmann::ordered_json(nullptr); };
    j["query_pre_attn_scalar"] = a.query_pre_attn_scalar > 0 ? a.query_pre_attn_scalar : a.head_dim();
    j["attn_logit_softcapping"] = cap(a.attn_logit_softcap);
    j["final_logit_softcapping"] = cap(a.final_logit_softcap);
    nlohmann::ordered_json types = nlohmann::ordered_json::array();
    for (std::int64_t i = 0; i < a.layers; ++i) {
      types.push_back(layer_window(a, i) > 0 ? "sliding_attention" : "full_attention");
    }
    j["layer_types"] = types;
  }
  if (a.sliding_window > 0) {
    j["sliding_window"] = a.sliding_window;
    if (j.contains("use_sliding_window")) {  // Qwen: every layer windowed
      j["use_sliding_window"] = true;
      j["max_window_layers"] = 0;
    }
  }
  // Unknown ids are written as null: the config classes' defaults (GPT-2's
  // 50256, Phi-3's 32000) can lie beyond a smaller vocabulary, and
  // transformers then warns (bos, eos) or refuses to build the model (pad).
  // Tailor's embedding has no padding row.
  j["bos_token_id"] = ids.bos >= 0 ? nlohmann::ordered_json(ids.bos) : nlohmann::ordered_json(nullptr);
  j["eos_token_id"] = ids.eos >= 0 ? nlohmann::ordered_json(ids.eos) : nlohmann::ordered_json(nullptr);
  j["pad_token_id"] = sequence_classifier && ids.pad >= 0 ? nlohmann::ordered_json(ids.pad) : nlohmann::ordered_json(nullptr);
  if (sequence_classifier) {
    j["id2label"] = {{"0", "LABEL_0"}};
    j["label2id"] = {{"LABEL_0", 0}};
  }
  j["tie_word_embeddings"] = a.tie_embeddings;
  j["torch_dtype"] = std::string(torch_dtype);
  return j.dump(2) + "\n";
}

std::string hf_generation_config_json(const SpecialTokenIds& ids) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (ids.bos >= 0) j["bos_token_id"] = ids.bos;
  if (ids.eos >= 0) j["eos_token_id"] = ids.eos;
  return j.dump(2) + "\n";
}

}  // namespace tailor::dsl
