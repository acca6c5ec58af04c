#include "runner/torch/model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "core/check.h"
#include "dsl/rope.h"
#include "runner/torch/activation_offload.h"
#include "runner/torch/attention.h"
#include "runner/torch/cross_entropy.h"
#include "runner/torch/fused_ops.h"
#include "runner/torch/grouped_linear.h"
#include "runner/torch/half_matmul.h"
#include "runner/torch/linear_cross_entropy.h"

namespace tailor::runner {
namespace {

using torch::Tensor;
namespace F = torch::nn::functional;

// RMSNorm (Zhang & Sennrich 2019) as one autograd node that keeps only its
// input and the fp32 inverse RMS per token for backward: composed from ATen
// ops, autograd would also keep the normalised copy x * r (one more
// activation-sized tensor per norm).
struct RmsNormFunction : torch::autograd::Function<RmsNormFunction> {
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& x, const Tensor& w, double eps) {
    Tensor r = torch::rsqrt(x.to(torch::kFloat32).pow(2).mean(-1, /*keepdim=*/true) + eps);  // (..., 1)
    ctx->save_for_backward({x, w, r});
    return x * r.to(x.scalar_type()) * w;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const Tensor x = saved[0].to(torch::kFloat32), w = saved[1].to(torch::kFloat32), r = saved[2];
    const Tensor gy = grad_out[0].to(torch::kFloat32);
    const Tensor xhat = x * r;
    // d/dx of x * r * w with r = (mean(x^2) + eps)^-1/2:
    //   r * (g - xhat * mean(g * xhat)),  g = grad * w
    const Tensor g = gy * w;
    const Tensor gx = r * (g - xhat * (g * xhat).mean(-1, /*keepdim=*/true));
    std::vector<std::int64_t> dims(static_cast<std::size_t>(gy.dim() - 1));
    for (std::size_t i = 0; i < dims.size(); ++i) dims[i] = static_cast<std::int64_t>(i);
    const Tensor gw = (gy * xhat).sum(dims);
    return {gx.to(saved[0].scalar_type()), gw.to(saved[1].scalar_type()), Tensor()};
  }
};

Tensor rms_norm(const Tensor& x, const Tensor& w, double eps) {
  return fused_supported(x, FusedKernel::kRmsNorm) ? fused_rms_norm(x, w, eps) : RmsNormFunction::apply(x, w, eps);
}

// RoPE (Su et al. 2021) in the rotate-half layout of Hugging Face Llama on
// the q and k heads of the fused qkv output (B, T, (H + 2 KV) D): the first
// r dimensions of each head (r = D but under GPT-NeoX's partial rotary);
// cos/sin are (B, T, r/2) fp32, one value per frequency.
Tensor apply_rope(const Tensor& qkv, const Tensor& cos, const Tensor& sin, std::int64_t rotated_heads, std::int64_t d,
                  std::int64_t r) {
  if (r == d && fused_supported(qkv, FusedKernel::kRope)) return fused_rope(qkv, cos, sin, rotated_heads, d);
  const Tensor c = torch::cat({cos, cos}, -1).to(qkv.scalar_type()).unsqueeze(2);  // (B, T, 1, r)
  const Tensor s = torch::cat({sin, sin}, -1).to(qkv.scalar_type()).unsqueeze(2);
  const std::int64_t b = qkv.size(0), t = qkv.size(1);
  auto parts = qkv.split({rotated_heads * d, qkv.size(-1) - rotated_heads * d}, -1);
  const Tensor heads = parts[0].view({b, t, rotated_heads, d});
  const Tensor x = r == d ? heads : heads.narrow(-1, 0, r);
  auto halves = x.chunk(2, -1);
  Tensor rotated = x * c + torch::cat({-halves[1], halves[0]}, -1) * s;
  if (r < d) rotated = torch::cat({rotated, heads.narrow(-1, r, d - r)}, -1);
  return torch::cat({rotated.reshape({b, t, rotated_heads * d}), parts[1]}, -1);
}

// Gemma's RMSNorm scales by (1 + w), w stored as in its checkpoints; the
// sum is formed in fp32 and used in the input's dtype (in bf16 within its
// rounding of transformers' all-fp32 product).
Tensor norm_of(const dsl::ModelArch& a, const Tensor& x, const Tensor& w) {
  if (!dsl::family_info(a.family).gemma) return rms_norm(x, w, a.norm_eps);
  return rms_norm(x, (w.to(torch::kFloat32) + 1.0).to(x.scalar_type()), a.norm_eps);
}

// GeGLU (Shazeer 2020) with the tanh GELU, as Gemma's MLP: fused on CUDA
// where selected, else composed ATen ops, which keep gate_up and the GELU
// output for backward.
Tensor geglu(const Tensor& gate_up) {
  if (fused_supported(gate_up, FusedKernel::kGeglu)) return fused_geglu(gate_up);
  auto parts = gate_up.chunk(2, -1);
  return torch::gelu(parts[0], "tanh") * parts[1];
}

Tensor swiglu(const Tensor& gate_up) {
  if (fused_supported(gate_up, FusedKernel::kSwiglu)) return fused_swiglu(gate_up);
  auto parts = gate_up.chunk(2, -1);
  return torch::silu(parts[0]) * parts[1];
}

// A sparse mixture-of-experts MLP (Shazeer et al. 2017; Mixtral, Jiang et
// al. 2024) on h (B, T, C): the router's softmax picks each token's top k
// experts, whose SwiGLU outputs are summed weighted by the renormalised
// probabilities (transformers' MixtralSparseMoeBlock). The token/expert
// assignments are sorted by expert so that each expert runs one matmul
// over its tokens (grouped_linear.h), and the outputs are scattered back in
// one index_add; a token's contributions are added in expert order, as
// transformers does.
Tensor mixture_of_experts(const Tensor& h, const Tensor& router, const Tensor& gate_up, const Tensor& down,
                          std::int64_t top_k, ProjectionHook* hook, std::size_t layer) {
  const std::int64_t c = h.size(-1), experts = router.size(0);
  const Tensor x = h.reshape({-1, c});  // (N, C)
  const Tensor probs = torch::softmax(linear_layer(x, router).to(torch::kFloat32), -1);  // (N, E)
  auto [top, index] = probs.topk(top_k, -1);                                             // (N, k)
  const Tensor weights = (top / top.sum(-1, /*keepdim=*/true)).to(h.scalar_type());
  // The assignments, token-major, stably sorted by expert.
  const Tensor order = index.flatten().argsort(/*stable=*/true);                         // (N k)
  const Tensor token = order.div(top_k, "floor");
  const std::vector<std::int64_t> counts = [&] {
    const Tensor n = index.flatten().bincount({}, experts).to(torch::kCPU);
    return std::vector<std::int64_t>(n.data_ptr<std::int64_t>(), n.data_ptr<std::int64_t>() + experts);
  }();
  auto apply_experts = [&](const Tensor& rows, const Tensor& w, bool up) {
    return hook ? hook->experts(layer, up, rows, w, counts) : grouped_linear(rows, w, counts);
  };
  const Tensor act = swiglu(apply_experts(x.index_select(0, token), gate_up, true));  // (N k, I)
  const Tensor y = apply_experts(act, down, false) * weights.flatten().index_select(0, order).unsqueeze(1);
  return torch::zeros_like(x).index_add(0, token, y).view(h.sizes());
}

}  // namespace

// One transformer block's parameters, registered in this order: the norms,
// the attention's (qkv: q, k and v fused), then the kind's own. Llama:
// attn_norm, qkv, o, mlp_norm, gate_up (gate and up fused), down. GPT-2 and
// GPT-NeoX: ln_1, c_attn, c_proj, ln_2, c_fc, mlp_proj, all with biases.
struct CausalLMImpl::Layer : torch::nn::Module {
  Layer(const dsl::ModelArch& a) {
    const std::int64_t c = a.hidden, d = a.head_dim(), q = a.heads * d, kv = a.kv_heads * d;
    const bool gemma = dsl::family_info(a.family).gemma;
    // Gemma's norms scale by 1 + w: an identity norm has w = 0.
    auto norm = [&](const char* name) {
      return register_parameter(name, gemma ? torch::zeros({c}) : torch::ones({c}));
    };
    norm1 = norm("norm1");
    norm2 = norm("norm2");
    if (gemma) {
      post_attn_norm = norm("post_attn_norm");
      post_mlp_norm = norm("post_mlp_norm");
    }
    qkv = register_parameter("qkv", torch::empty({q + 2 * kv, c}));
    o = register_parameter("o", torch::empty({c, q}));
    if (dsl::family_info(a.family).qk_norm) {
      q_norm = register_parameter("q_norm", torch::ones({d}));
      k_norm = register_parameter("k_norm", torch::ones({d}));
    }
    switch (dsl::family_info(a.family).block) {
      case dsl::BlockKind::kGpt2:
      case dsl::BlockKind::kGptNeox: biased_parameters(a, q + 2 * kv); break;
      case dsl::BlockKind::kLlama: llama_parameters(a, q + 2 * kv); break;
    }
  }
  // GPT-2's and GPT-NeoX's: a bias on every norm and linear, and a GELU MLP
  // (fc, down).
  void biased_parameters(const dsl::ModelArch& a, std::int64_t qkv_rows) {
    const std::int64_t c = a.hidden, i = a.intermediate;
    norm1_b = register_parameter("norm1_bias", torch::zeros({c}));
    norm2_b = register_parameter("norm2_bias", torch::zeros({c}));
    qkv_b = register_parameter("qkv_bias", torch::zeros({qkv_rows}));
    o_b = register_parameter("o_bias", torch::zeros({c}));
    up = register_parameter("fc", torch::empty({i, c}));
    up_b = register_parameter("fc_bias", torch::zeros({i}));
    down_b = register_parameter("down_bias", torch::zeros({c}));
    down = register_parameter("down", torch::empty({c, i}));
  }
  // The Llama-like block's: q/k/v biases where the family has them, and
  // SwiGLU's (GeGLU's) fused gate/up and down, or the experts and router.
  void llama_parameters(const dsl::ModelArch& a, std::int64_t qkv_rows) {
    const std::int64_t c = a.hidden, i = a.intermediate;
    if (dsl::family_info(a.family).qkv_bias) qkv_b = register_parameter("qkv_bias", torch::zeros({qkv_rows}));
    if (a.moe()) {
      router = register_parameter("router", torch::empty({a.experts, c}));
      experts_gate_up = register_parameter("experts_gate_up", torch::empty({a.experts, 2 * i, c}));
      experts_down = register_parameter("experts_down", torch::empty({a.experts, c, i}));
      return;
    }
    up = register_parameter("gate_up", torch::empty({2 * i, c}));
    down = register_parameter("down", torch::empty({c, i}));
  }
  Tensor norm1, norm1_b, norm2, norm2_b, qkv, qkv_b, o, o_b, up, up_b, down, down_b;
  Tensor q_norm, k_norm;  // qk_norm families: one head wide
  Tensor post_attn_norm, post_mlp_norm;  // Gemma 2: on the attention and MLP outputs
  // Mixture of experts (instead of gate_up and down): the router (E, C) and
  // every expert's fused gate/up (E, 2I, C) and down (E, C, I).
  Tensor router, experts_gate_up, experts_down;
};

CausalLMImpl::CausalLMImpl(const dsl::ModelArch& arch, std::int64_t checkpoint_every, ModelHead head)
    : arch_(arch), checkpoint_every_(checkpoint_every) {
  embed_ = register_module("embed", torch::nn::Embedding(arch.vocab, arch.hidden));
  if (!dsl::block_traits(arch).rope)
    pos_embed_ = register_module("pos_embed", torch::nn::Embedding(arch.max_seq_len, arch.hidden));
  for (std::int64_t i = 0; i < arch.layers; ++i) {
    layers_.push_back(register_module("layer" + std::to_string(i), std::make_shared<Layer>(arch)));
  }
  final_norm_weight_ = register_parameter(
      "final_norm", dsl::family_info(arch.family).gemma ? torch::zeros({arch.hidden}) : torch::ones({arch.hidden}));
  if (dsl::block_traits(arch).layer_norm) {
    final_norm_bias_ = register_parameter("final_norm_bias", torch::zeros({arch.hidden}));
  }
  if (head == ModelHead::kScore) {
    score_ = register_parameter("score", torch::empty({1, arch.hidden}));
  } else if (!arch.tie_embeddings) {
    lm_head_ = register_parameter("lm_head", torch::empty({arch.vocab, arch.hidden}));
  }
  reset_parameters_();
}

void CausalLMImpl::reset_parameters_() {
  torch::NoGradGuard no_grad;
  const double std = 0.02, residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(arch_.layers));
  embed_->weight.normal_(0, std);
  if (pos_embed_) pos_embed_->weight.normal_(0, 0.01);
  for (auto& m : layers_) {
    auto* l = static_cast<Layer*>(m.get());
    l->qkv.normal_(0, std);
    l->o.normal_(0, residual_std);  // residual projections, scaled as in GPT-2
    if (l->router.defined()) {
      l->router.normal_(0, std);
      l->experts_gate_up.normal_(0, std);
      l->experts_down.normal_(0, residual_std);
    } else {
      l->up.normal_(0, std);
      l->down.normal_(0, residual_std);
    }
  }
  if (lm_head_.defined()) lm_head_.normal_(0, std);
  if (score_.defined()) score_.normal_(0, std);  // transformers' initializer_range
}

Tensor CausalLMImpl::run_layer(std::size_t i, const Tensor& x, const Tensor& cos, const Tensor& sin,
                               const Tensor& mask, KvCache* cache) {
  switch (dsl::family_info(arch_.family).block) {
    case dsl::BlockKind::kGpt2: return gpt2_block(i, x, mask, cache);
    case dsl::BlockKind::kLlama: return llama_block(i, x, cos, sin, mask, cache);
    case dsl::BlockKind::kGptNeox: return gpt_neox_block(i, x, cos, sin, mask, cache);
  }
  return x;
}

// GPT-2: pre-LayerNorm attention without RoPE (positions are learned, in
// the embedding) and a GELU (tanh) MLP, biases everywhere.
Tensor CausalLMImpl::gpt2_block(std::size_t i, const Tensor& x, const Tensor& mask, KvCache* cache) {
  const auto* l = static_cast<const Layer*>(layers_[i].get());
  const Tensor h = torch::layer_norm(x, {arch_.hidden}, l->norm1, l->norm1_b, arch_.norm_eps);
  const Tensor out = x + attention(i, h, Tensor(), Tensor(), mask, cache);
  const Tensor m = torch::layer_norm(out, {arch_.hidden}, l->norm2, l->norm2_b, arch_.norm_eps);
  return out + project(i, Projection::kDown, torch::gelu(project(i, Projection::kUp, m, l->up, l->up_b), "tanh"),
                       l->down, l->down_b);
}

// GPT-NeoX: the attention and an exact-GELU MLP each on its own LayerNorm of
// the same input, added to the residual together (the parallel residual of
// GPT-J and GPT-NeoX), summed in transformers' order.
Tensor CausalLMImpl::gpt_neox_block(std::size_t i, const Tensor& x, const Tensor& cos, const Tensor& sin,
                                    const Tensor& mask, KvCache* cache) {
  const auto* l = static_cast<const Layer*>(layers_[i].get());
  const Tensor h = torch::layer_norm(x, {arch_.hidden}, l->norm1, l->norm1_b, arch_.norm_eps);
  const Tensor attn = attention(i, h, cos, sin, mask, cache);
  const Tensor m = torch::layer_norm(x, {arch_.hidden}, l->norm2, l->norm2_b, arch_.norm_eps);
  const Tensor mlp =
      project(i, Projection::kDown, torch::gelu(project(i, Projection::kUp, m, l->up, l->up_b)), l->down, l->down_b);
  return mlp + attn + x;
}

// The Llama-like block: RMSNorm, attention with RoPE, and a SwiGLU MLP
// (Gemma: GeGLU, and norms on the attention's and the MLP's outputs too;
// Mixtral: a mixture of SwiGLU experts).
Tensor CausalLMImpl::llama_block(std::size_t i, const Tensor& x, const Tensor& cos, const Tensor& sin,
                                 const Tensor& mask, KvCache* cache) {
  const auto* l = static_cast<const Layer*>(layers_[i].get());
  const Tensor y = attention(i, norm_of(arch_, x, l->norm1), cos, sin, mask, cache);
  const Tensor out = x + (l->post_attn_norm.defined() ? norm_of(arch_, y, l->post_attn_norm) : y);
  const Tensor h = norm_of(arch_, out, l->norm2);
  if (l->router.defined()) {
    return out + mixture_of_experts(h, l->router, l->experts_gate_up, l->experts_down, arch_.experts_per_token,
                                    hook_.get(), i);
  }
  const Tensor gate_up = project(i, Projection::kUp, h, l->up, Tensor());
  const bool gemma = dsl::family_info(arch_.family).gemma;
  const Tensor mlp = project(i, Projection::kDown, gemma ? geglu(gate_up) : swiglu(gate_up), l->down, Tensor());
  return out + (l->post_mlp_norm.defined() ? norm_of(arch_, mlp, l->post_mlp_norm) : mlp);
}

// Block i's attention on its normalised input h (B, T, C), through o: q/k
// norms where the family has them, RoPE where cos is defined, then scores
// over the cache's positions too when there is one.
Tensor CausalLMImpl::attention(std::size_t i, const Tensor& h, const Tensor& cos, const Tensor& sin, const Tensor& mask,
                               KvCache* cache) {
  const auto* l = static_cast<const Layer*>(layers_[i].get());
  const std::int64_t b = h.size(0), t = h.size(1), d = arch_.head_dim();
  const std::int64_t heads = arch_.heads, kv_heads = arch_.kv_heads;
  Tensor qkv = project(i, Projection::kQkv, h, l->qkv, l->qkv_b);  // (B, T, (H + 2 KV) D)
  if (dsl::block_traits(arch_).qkv_head_by_head) {
    // GPT-NeoX's rows [q0 k0 v0 q1 ...] as q | k | v, in one copy: the
    // weights keep the checkpoint's layout, so LoRA, NF4 and exports need
    // no permutation.
    qkv = qkv.view({b, t, heads, 3, d}).transpose(2, 3).reshape({b, t, 3 * heads * d});
  }
  if (l->q_norm.defined()) {
    // Qwen3, Gemma 3: each q and k head RMS-normalised over its own width
    // before RoPE.
    auto p = qkv.split({heads * d, kv_heads * d, kv_heads * d}, -1);
    qkv = torch::cat({norm_of(arch_, p[0].view({b, t, heads, d}), l->q_norm).view({b, t, heads * d}),
                      norm_of(arch_, p[1].view({b, t, kv_heads, d}), l->k_norm).view({b, t, kv_heads * d}), p[2]},
                     -1);
  }
  if (cos.defined()) qkv = apply_rope(qkv, cos, sin, heads + kv_heads, d, arch_.rotary_dims());
  auto parts = qkv.split({heads * d, kv_heads * d, kv_heads * d}, -1);
  Tensor q = parts[0].view({b, t, heads, d}).transpose(1, 2);  // (B, H, T, D)
  Tensor k = parts[1].view({b, t, kv_heads, d}).transpose(1, 2);
  Tensor v = parts[2].view({b, t, kv_heads, d}).transpose(1, 2);
  const AttentionScores scores{arch_.attention_scale(), arch_.attn_logit_softcap};
  const bool fused = fused_attention_ && scores.softcap == 0;
  Tensor y;
  if (cache != nullptr && cache->step_positions.defined()) {
    // Batched decoding: one new position per row, each at its own.
    const Tensor at = cache->step_positions.view({b, 1, 1, 1}).expand({b, kv_heads, 1, d});
    cache->k[i].scatter_(2, at, k);
    cache->v[i].scatter_(2, at, v);
    k = cache->k[i].slice(2, 0, cache->step_span);
    v = cache->v[i].slice(2, 0, cache->step_span);
    y = cached_attention(q, k, v, mask, fused, scores);
  } else if (cache != nullptr) {
    const std::int64_t past = cache->length;
    cache->k[i].slice(2, past, past + t).copy_(k);
    cache->v[i].slice(2, past, past + t).copy_(v);
    k = cache->k[i].slice(2, 0, past + t);
    v = cache->v[i].slice(2, 0, past + t);
    y = past == 0 ? causal_attention(q, k, v, mask, fused, scores) : cached_attention(q, k, v, mask, fused, scores);
  } else {
    y = causal_attention(q, k, v, mask, fused, scores);
  }
  y = y.transpose(1, 2).reshape({b, t, heads * d});
  return project(i, Projection::kO, y, l->o, l->o_b);
}

Tensor CausalLMImpl::project(std::size_t layer, Projection p, const Tensor& x, const Tensor& w, const Tensor& b) {
  return hook_ ? hook_->project(layer, p, x, w, b) : linear_layer(x, w, b);
}

Tensor& CausalLMImpl::projection_weight(std::size_t layer, Projection p) {
  auto* l = static_cast<Layer*>(layers_.at(layer).get());
  switch (p) {
    case Projection::kQkv: return l->qkv;
    case Projection::kO: return l->o;
    case Projection::kUp: return l->up;
    case Projection::kDown: return l->down;
  }
  return l->qkv;
}

Tensor& CausalLMImpl::experts_weight(std::size_t layer, bool gate_up) {
  auto* l = static_cast<Layer*>(layers_.at(layer).get());
  return gate_up ? l->experts_gate_up : l->experts_down;
}

Tensor ProjectionHook::experts(std::size_t /*layer*/, bool /*gate_up*/, const Tensor& x, const Tensor& weight,
                               const std::vector<std::int64_t>& counts) {
  return grouped_linear(x, weight, counts);
}

Tensor CausalLMImpl::projection_bias(std::size_t layer, Projection p) const {
  const auto* l = static_cast<const Layer*>(layers_.at(layer).get());
  switch (p) {
    case Projection::kQkv: return l->qkv_b;
    case Projection::kO: return l->o_b;
    case Projection::kUp: return l->up_b;
    case Projection::kDown: return l->down_b;
  }
  return Tensor();
}

namespace {

// Gradient checkpointing: forward without saving the layer's activations;
// backward recomputes the layer with grad enabled and back-propagates through
// it, which accumulates the parameters' gradients (as torch.utils.checkpoint
// does in reentrant mode; the C++ API has no equivalent). Only tensors and
// plain values are kept, so nothing leaks when backward never runs.
struct CheckpointedLayer : torch::autograd::Function<CheckpointedLayer> {
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& x, const Tensor& anchor,
                        CausalLMImpl* model, std::int64_t layer, const Tensor& cos, const Tensor& sin,
                        const Tensor& mask) {
    // `anchor` is a leaf that requires grad and is no parameter: it makes
    // autograd call backward even when x does not require grad (the first
    // layer's input). Backward gives it no gradient, so no parameter's
    // gradient arrives twice (once from the recomputation, once, empty,
    // from this edge), which would fire its post-accumulate hooks twice.
    (void)anchor;
    ctx->saved_data["model"] = reinterpret_cast<std::int64_t>(model);
    ctx->saved_data["layer"] = layer;
    if (ActivationOffloader* offloader = model->activation_offloader()) {
      // The input waits in host memory (activation_offload.h); backward
      // brings back the checkpointed layer before this one while it runs.
      ctx->save_for_backward({cos, sin, mask});
      ctx->saved_data["pass"] = model->offload_pass();
      ctx->saved_data["next"] = layer - model->checkpoint_every();
      ctx->saved_data["device"] = static_cast<std::int64_t>(x.device().index());
      offloader->offload(layer, x);
    } else {
      ctx->save_for_backward({x, cos, sin, mask});
    }
    // Adapters may draw dropout masks: the recomputation must draw the same
    // ones (torch.utils.checkpoint's preserve_rng_state).
    if (model->projection_hook()) ctx->saved_data["rng"] = at::globalContext().defaultGenerator(x.device()).get_state();
    torch::NoGradGuard no_grad;
    return model->run_layer(static_cast<std::size_t>(layer), x, cos, sin, mask);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto* model = reinterpret_cast<CausalLMImpl*>(ctx->saved_data["model"].toInt());
    const auto layer = static_cast<std::size_t>(ctx->saved_data["layer"].toInt());
    auto saved = ctx->get_saved_variables();
    Tensor input;
    if (ctx->saved_data.count("pass")) {
      const Tensor& cos = saved[0];
      const auto index = static_cast<c10::DeviceIndex>(ctx->saved_data["device"].toInt());
      const torch::Device device = index >= 0 ? torch::Device(cos.device().type(), index) : cos.device();
      input = model->activation_offloader()->restore(ctx->saved_data["pass"].toInt(), static_cast<std::int64_t>(layer),
                                                     ctx->saved_data["next"].toInt(), device);
      saved.insert(saved.begin(), input);
    }
    Tensor x = saved[0].detach().requires_grad_(true);
    input = Tensor();
    Tensor y;
    {
      torch::AutoGradMode enable(true);
      if (ctx->saved_data.count("rng")) {
        at::Generator gen = at::globalContext().defaultGenerator(x.device());
        const Tensor now = gen.get_state();
        gen.set_state(ctx->saved_data["rng"].toTensor());
        y = model->run_layer(layer, x, saved[1], saved[2], saved[3]);
        gen.set_state(now);
      } else {
        y = model->run_layer(layer, x, saved[1], saved[2], saved[3]);
      }
    }
    torch::autograd::backward({y}, {grad_out[0]});
    return {x.grad(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

}  // namespace

Tensor& CausalLMImpl::embedding_weight() { return embed_->weight; }

Tensor CausalLMImpl::embed(const Tensor& input_ids, const Tensor& positions) {
  Tensor x = embed_->forward(input_ids);
  if (pos_embed_) x = x + pos_embed_->forward(positions);
  // Gemma: embeddings times sqrt(hidden), the factor rounded to the dtype
  // first as transformers does.
  if (dsl::family_info(arch_.family).gemma) {
    // (Rounded on the host: an item() of a GPU tensor would wait for the GPU.)
    x = x * torch::scalar_tensor(std::sqrt(static_cast<double>(arch_.hidden)), torch::dtype(x.scalar_type())).item();
  }
  return x;
}

// RoPE (Su et al. 2021), rotate-half layout as in Hugging Face Llama, with
// Llama 3.1's or linear scaling where the arch has one; Gemma 3's windowed
// layers by their own base (local_cos/sin).
CausalLMImpl::RopeTables CausalLMImpl::rope_tables(const Tensor& positions) {
  RopeTables r;
  if (!dsl::block_traits(arch_).rope) return r;
  const bool local_rope = arch_.rope_local_theta > 0;
  if (!rope_inv_freq_.defined() || rope_inv_freq_.device() != positions.device()) {
    rope_inv_freq_ = torch::tensor(dsl::rope_inverse_frequencies(arch_), torch::kFloat64).to(positions.device());
    if (local_rope) {
      rope_local_inv_freq_ =
          torch::tensor(dsl::rope_inverse_frequencies(arch_, /*local=*/true), torch::kFloat64).to(positions.device());
    }
  }
  const Tensor p = positions.to(torch::kFloat64).unsqueeze(-1);
  const Tensor freqs = p * rope_inv_freq_;  // (B, T, D/2)
  r.cos = freqs.cos().to(torch::kFloat32);
  r.sin = freqs.sin().to(torch::kFloat32);
  if (local_rope) {
    const Tensor local = p * rope_local_inv_freq_;
    r.local_cos = local.cos().to(torch::kFloat32);
    r.local_sin = local.sin().to(torch::kFloat32);
  }
  return r;
}

Tensor CausalLMImpl::final_norm(const Tensor& x) const {
  return dsl::block_traits(arch_).layer_norm
             ? torch::layer_norm(x, {arch_.hidden}, final_norm_weight_, final_norm_bias_, arch_.norm_eps)
             : norm_of(arch_, x, final_norm_weight_);
}

Tensor CausalLMImpl::hidden_states(const ModelInput& in) {
  const std::int64_t t = in.input_ids.size(1);
  if (unit_hook_) unit_hook_->before_unit(0, Tensor());
  Tensor x = embed(in.input_ids, in.positions);
  const auto dtype = x.scalar_type();
  // The embeddings' backward reads the token ids, not the table.
  if (unit_hook_) unit_hook_->after_unit(0);

  const auto on = torch::TensorOptions().device(in.input_ids.device());
  // One mask for the windowed layers and one for the others (Gemma 2
  // alternates them); both the same tensor when every layer is alike.
  const bool fused = fused_attention_ && arch_.attn_logit_softcap == 0;
  const Tensor mask = attention_mask(in.segment_ids, t, fused, dtype, in.input_ids.device(), arch_.sliding_window);
  Tensor full_mask = mask;
  for (std::int64_t i = 0; i < arch_.layers; ++i) {
    if (dsl::layer_window(arch_, i) != arch_.sliding_window) {
      full_mask = attention_mask(in.segment_ids, t, fused, dtype, in.input_ids.device(), 0);
      break;
    }
  }
  const RopeTables rope = rope_tables(in.positions);
  const bool local_rope = rope.local_cos.defined();
  if (offloader_ && checkpoint_every_ > 0 && is_training() && torch::GradMode::is_enabled()) {
    offload_pass_ = offloader_->begin_forward();
  }
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const bool windowed = dsl::layer_window(arch_, static_cast<std::int64_t>(i)) > 0;
    const Tensor& layer_mask = windowed ? mask : full_mask;
    const Tensor& layer_cos = windowed && local_rope ? rope.local_cos : rope.cos;
    const Tensor& layer_sin = windowed && local_rope ? rope.local_sin : rope.sin;
    const bool checkpoint = checkpoint_every_ > 0 && is_training() && torch::GradMode::is_enabled() &&
                            static_cast<std::int64_t>(i) % checkpoint_every_ == 0;
    if (unit_hook_) unit_hook_->before_unit(i + 1, x);
    if (checkpoint) {
      // Custom autograd functions take defined tensors only: gpt2 has no
      // RoPE tables, so empty ones stand in (run_layer ignores them).
      const Tensor none = torch::empty({0}, on);
      if (!backward_anchor_.defined() || backward_anchor_.device() != x.device()) {
        backward_anchor_ = torch::zeros({}, torch::TensorOptions().device(x.device())).requires_grad_(true);
      }
      x = CheckpointedLayer::apply(x, backward_anchor_, this, static_cast<std::int64_t>(i),
                                   layer_cos.defined() ? layer_cos : none, layer_sin.defined() ? layer_sin : none,
                                   layer_mask);
    } else {
      x = run_layer(i, x, layer_cos, layer_sin, layer_mask);
    }
    if (unit_hook_) unit_hook_->after_unit(i + 1);
  }
  if (unit_hook_) unit_hook_->before_unit(layers_.size() + 1, x);
  return final_norm(x);
}

void CausalLMImpl::set_activation_offload(bool on) {
  if (!on) {
    offloader_.reset();
  } else if (!offloader_) {
    offloader_ = std::make_shared<ActivationOffloader>();
  }
}

KvCache CausalLMImpl::new_kv_cache(std::int64_t batch, std::int64_t capacity) const {
  const Tensor& any = embed_->weight;
  const auto options = any.options().requires_grad(false);
  KvCache c;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    c.k.push_back(torch::empty({batch, arch_.kv_heads, capacity, arch_.head_dim()}, options));
    c.v.push_back(torch::empty({batch, arch_.kv_heads, capacity, arch_.head_dim()}, options));
  }
  return c;
}

namespace {

// The additive mask (1, 1, T, past + T) of T new positions after `past`
// cached ones: query i (at past + i) sees keys j <= past + i, and within a
// window j > past + i - window. Undefined when it would allow every key (one
// new position whose window reaches back past the first key), so that
// attention runs without one.
Tensor cached_mask(std::int64_t past, std::int64_t t, std::int64_t window, torch::ScalarType dtype,
                   const torch::Device& device) {
  const std::int64_t n = past + t;
  if (t == 1 && (window <= 0 || n <= window)) return Tensor();
  const auto on = torch::TensorOptions().device(device).dtype(torch::kInt64);
  const Tensor query = torch::arange(past, n, on).unsqueeze(1);  // (T, 1)
  const Tensor key = torch::arange(0, n, on).unsqueeze(0);       // (1, n)
  Tensor allowed = key <= query;
  if (window > 0) allowed = allowed & (key > query - window);
  return torch::zeros({1, 1, t, n}, torch::TensorOptions().device(device).dtype(dtype))
      .masked_fill_(allowed.logical_not().view({1, 1, t, n}), -std::numeric_limits<float>::infinity());
}

}  // namespace

Tensor CausalLMImpl::cached_layers(Tensor x, const Tensor& positions,
                                   const std::function<Tensor(std::int64_t window)>& mask_for, KvCache& cache) {
  const Tensor mask = mask_for(arch_.sliding_window);
  Tensor full_mask = mask;
  for (std::int64_t i = 0; i < arch_.layers; ++i) {
    if (dsl::layer_window(arch_, i) != arch_.sliding_window) {
      full_mask = mask_for(0);
      break;
    }
  }
  const RopeTables rope = rope_tables(positions);
  const bool local_rope = rope.local_cos.defined();
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const bool windowed = dsl::layer_window(arch_, static_cast<std::int64_t>(i)) > 0;
    x = run_layer(i, x, windowed && local_rope ? rope.local_cos : rope.cos,
                  windowed && local_rope ? rope.local_sin : rope.sin, windowed ? mask : full_mask, &cache);
  }
  return x;
}

Result<Tensor> CausalLMImpl::hidden_states_cached(const Tensor& input_ids, KvCache& cache) {
  const std::int64_t b = input_ids.size(0), t = input_ids.size(1), past = cache.length;
  if (cache.k.size() != layers_.size() || cache.k.front().size(0) != b) {
    return Status::invalid_argument("KV cache: made for another model or batch size");
  }
  if (past + t > cache.capacity()) {
    return Status::invalid_argument("KV cache: " + std::to_string(past + t) + " positions do not fit its " +
                                    std::to_string(cache.capacity()));
  }
  torch::NoGradGuard no_grad;
  const auto device = input_ids.device();
  const Tensor positions =
      torch::arange(past, past + t, torch::TensorOptions().device(device).dtype(torch::kInt64)).unsqueeze(0).expand({b, t});
  Tensor x = embed(input_ids, positions);
  const auto dtype = x.scalar_type();
  const bool fused = fused_attention_ && arch_.attn_logit_softcap == 0;
  // The first positions of a sequence are a training forward's: the causal
  // path (no mask at all for the fused kernels).
  auto mask_for = [&](std::int64_t window) {
    return past == 0 ? attention_mask(Tensor(), t, fused, dtype, device, window)
                     : cached_mask(past, t, window, dtype, device);
  };
  x = cached_layers(x, positions, mask_for, cache);
  cache.length = past + t;
  return final_norm(x);
}

Result<Tensor> CausalLMImpl::decode_step(const Tensor& ids, KvCache& cache, const std::vector<std::int64_t>& lengths) {
  const std::int64_t b = ids.size(0);
  if (ids.dim() != 2 || ids.size(1) != 1 || static_cast<std::int64_t>(lengths.size()) != b) {
    return Status::invalid_argument("decode step: one new token per row, and one length per row");
  }
  const auto [shortest, longest] = std::minmax_element(lengths.begin(), lengths.end());
  cache.step_positions = Tensor();
  if (*shortest == *longest) {  // the rows in step: the plain cached forward
    cache.length = *longest;
    return hidden_states_cached(ids, cache);
  }
  if (cache.k.size() != layers_.size() || cache.k.front().size(0) != b) {
    return Status::invalid_argument("KV cache: made for another model or batch size");
  }
  const std::int64_t span = *longest + 1;
  if (*shortest < 0 || span > cache.capacity()) {
    return Status::invalid_argument("KV cache: " + std::to_string(span) + " positions do not fit its " +
                                    std::to_string(cache.capacity()));
  }
  torch::NoGradGuard no_grad;
  const auto device = ids.device();
  const Tensor positions = torch::tensor(lengths, torch::kInt64).to(device).view({b, 1});
  Tensor x = embed(ids, positions);
  const auto dtype = x.scalar_type();
  // Row r's query sees keys j <= lengths[r], and within a window
  // j > lengths[r] - window: (B, 1, 1, span) additive masks.
  const Tensor key = torch::arange(0, span, torch::TensorOptions().device(device).dtype(torch::kInt64)).view({1, span});
  auto mask_for = [&](std::int64_t window) {
    Tensor allowed = key <= positions;
    if (window > 0) allowed = allowed & (key > positions - window);
    return torch::zeros({b, 1, 1, span}, torch::TensorOptions().device(device).dtype(dtype))
        .masked_fill_(allowed.logical_not().view({b, 1, 1, span}), -std::numeric_limits<float>::infinity());
  };
  cache.step_positions = positions.view({b});
  cache.step_span = span;
  x = cached_layers(x, positions, mask_for, cache);
  cache.step_positions = Tensor();
  cache.step_span = 0;
  return final_norm(x);
}

std::vector<Tensor> CausalLMImpl::unit_parameters(std::size_t unit) const {
  if (unit == 0) {
    std::vector<Tensor> out = {embed_->weight};
    if (pos_embed_) out.push_back(pos_embed_->weight);
    return out;
  }
  if (unit <= layers_.size()) return layers_[unit - 1]->parameters();
  std::vector<Tensor> out = {final_norm_weight_};
  if (final_norm_bias_.defined()) out.push_back(final_norm_bias_);
  out.push_back(score_.defined() ? score_ : lm_head_.defined() ? lm_head_ : embed_->weight);
  return out;
}

Tensor CausalLMImpl::scores(const Tensor& hidden, const Tensor& last) {
  TAILOR_CHECK(score_.defined());
  const std::int64_t b = hidden.size(0), c = hidden.size(2);
  const Tensor at = last.to(hidden.device()).view({b, 1, 1}).expand({b, 1, c});
  // Beside adapters the score is trained in their dtype (lora.h), which
  // may be wider than the body's.
  const Tensor pooled = hidden.gather(1, at).squeeze(1).to(score_.scalar_type());
  return linear_layer(pooled, score_).squeeze(1).to(torch::kFloat32);
}

Tensor CausalLMImpl::logits(const Tensor& hidden, bool capped) {
  Tensor z = linear_layer(hidden, lm_head_.defined() ? lm_head_ : embed_->weight);
  const double cap = arch_.final_logit_softcap;
  if (!capped || cap == 0) return z;
  return torch::tanh(z / cap) * cap;
}

Tensor CausalLMImpl::loss_sum(const Tensor& hidden, const Tensor& targets) {
  const double cap = arch_.final_logit_softcap;
  const Tensor& head = lm_head_.defined() ? lm_head_ : embed_->weight;
  if (fused_linear_loss_) return linear_cross_entropy_sum(hidden, head, targets, cap);
  return cross_entropy_sum(logits(hidden, /*capped=*/false), targets, 0, cap);
}

}  // namespace tailor::runner
