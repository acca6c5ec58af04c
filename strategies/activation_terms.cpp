// One layer's saved activations, tensor by tensor (layer_activation_terms in
// memory_model.h), by the kind of block the family's row names
// (dsl::BlockKind): a new kind of block is a function here, beside its
// forward (runner/torch/model.cpp) and its checkpoint layout
// (runner/torch/hf_checkpoint.cpp). Source: Korthikanti et al., "Reducing
// Activation Recomputation in Large Transformer Models" (2022), section 4.1,
// adapted tensor by tensor for SwiGLU MLPs, RMSNorm and grouped-query
// attention.
#include <algorithm>
#include <string>
#include <vector>

#include "dsl/model_family.h"
#include "strategies/memory_model.h"

namespace tailor::strategies {
namespace {

using dsl::LinearLayer;
using dsl::Projection;

// The shapes every kind's terms are written in, and the rows as they are
// added. sbh = s*b*h elements; `e` bytes per element; dropout masks are 1
// byte per element.
struct LayerTerms {
  LayerTerms(const dsl::ModelArch& a, BatchShape batch, Attention attention, bool dropout, double e,
             const LayerTermOptions& o)
      : a(a),
        dropout(dropout),
        e(e),
        fused(o.fused),
        kv_repeated(o.kv_repeated || o.quirks.fused_qkv_views),
        qkv_views(o.quirks.fused_qkv_views && !o.fused && attention != Attention::kStandard && a.kv_heads == a.heads),
        norm_e(o.quirks.fp32_norm_inputs ? std::max(e, 4.0) : e),
        norm_keeps_normalized(o.quirks.norm_keeps_normalized),
        standard(attention == Attention::kStandard),
        s(static_cast<double>(batch.seq_len)),
        b(static_cast<double>(batch.micro_batch)),
        h(static_cast<double>(a.hidden)),
        i(static_cast<double>(a.intermediate)),
        heads(static_cast<double>(a.heads)),
        kv(static_cast<double>(a.kv_heads * a.head_dim())),
        q(static_cast<double>(a.heads * a.head_dim())),  // = h unless head_dim is set
        sbh(s * b * h),
        sbi(s * b * i),
        sbq(s * b * q),
        scores(heads * s * s * b),
        linears(dsl::block_linears(a)) {}

  // The kinds of block, each all of its terms in order.
  std::vector<ActivationTerm> gpt2();
  std::vector<ActivationTerm> llama();
  std::vector<ActivationTerm> gpt_neox();

  void add(const char* name, double bytes, std::vector<std::string> weight_grad_of = {}) {
    terms.push_back({name, bytes, std::move(weight_grad_of)});
  }
  // The LoRA targets whose input a term is: the family's linears of one
  // fused projection (q_proj, k_proj, v_proj; Phi-3's qkv_proj).
  std::vector<std::string> inputs_of(Projection p) const {
    std::vector<std::string> names;
    for (const LinearLayer& l : linears) {
      if (l.projection == p) names.emplace_back(l.target);
    }
    return names;
  }
  void standard_attention_scores();
  void llama_attention(bool gemma);
  void mixture_of_experts();
  void llama_mlp(bool gemma);

  const dsl::ModelArch& a;
  const bool dropout;
  const double e;
  const bool fused, kv_repeated;
  const bool qkv_views;  // V a view of the whole q/k/v output, which the attention so keeps
  const double norm_e;   // bytes per element of an RMSNorm's kept input
  const bool norm_keeps_normalized;
  const bool standard;
  const double s, b, h, i, heads, kv, q, sbh, sbi, sbq, scores;
  const std::vector<LinearLayer> linears;
  std::vector<ActivationTerm> terms;
};

// The softmax output materialised attention keeps, with dropout's mask and
// output where the model has attention dropout.
void LayerTerms::standard_attention_scores() {
  add("softmax output", e * scores);
  if (dropout) {
    add("attention dropout mask", scores);
    add("attention dropout output", e * scores);
  }
}

// GPT-2: LayerNorm, learned positions, multi-head attention, GELU MLP,
// dropout. Korthikanti section 4.1, generalised from 4h to the MLP width i.
std::vector<ActivationTerm> LayerTerms::gpt2() {
  add("ln_1 input", e * sbh);
  add("c_attn input (ln_1 output)", e * sbh, {"c_attn"});
  add("Q and K", 2 * e * sbh);
  add("V", e * sbh);
  if (standard) {
    standard_attention_scores();
  } else {
    add("softmax statistics (fp32 logsumexp)", 4 * heads * s * b);
  }
  add("attention c_proj input", e * sbh, {"c_proj"});
  if (dropout) add("attention output dropout mask", sbh);
  add("ln_2 input", e * sbh);
  add("c_fc input (ln_2 output)", e * sbh, {"c_fc"});
  add("GELU input (c_fc output)", e * sbi);
  add("GELU output (mlp c_proj input)", e * sbi, {"c_proj"});
  if (dropout) add("MLP output dropout mask", sbh);
  return std::move(terms);
}

// GPT-NeoX: both LayerNorms read the block's input, which both keep; q/k/v
// reordered from head by head and RoPE applied in one copy whose views the
// attention keeps (as the llama kind's fused RoPE); exact GELU; no dropout.
std::vector<ActivationTerm> LayerTerms::gpt_neox() {
  add("block input (both LayerNorms' input)", e * sbh);
  add("LayerNorm statistics (fp32 mean and rstd, both norms)", 2 * 8 * s * b);
  add("query_key_value input (input_layernorm output)", e * sbh, inputs_of(Projection::kQkv));
  add("q, k, v after RoPE", 3 * e * sbq);
  if (qkv_views) add("query_key_value output (kept whole by V's view)", 2 * e * sbq);
  if (standard) {
    standard_attention_scores();
  } else {
    add("softmax statistics (fp32 logsumexp)", 4 * heads * s * b);
  }
  add("dense input (attention output)", e * sbq, standard ? inputs_of(Projection::kO) : std::vector<std::string>{});
  add("dense_h_to_4h input (post_attention_layernorm output)", e * sbh, inputs_of(Projection::kUp));
  add("GELU input (dense_h_to_4h output)", e * sbi);
  add("GELU output (dense_4h_to_h input)", e * sbi, inputs_of(Projection::kDown));
  return std::move(terms);
}

// The Llama-like block: RMSNorm, RoPE, grouped-query attention, SwiGLU; no
// dropout. Gemma 2 also normalises the attention and MLP outputs (four
// norms), caps its scores (materialised attention only) and runs GeGLU in
// ATen ops; Mixtral's MLP is a mixture of experts.
std::vector<ActivationTerm> LayerTerms::llama() {
  const bool gemma = dsl::family_info(a.family).gemma;
  llama_attention(gemma);
  if (a.moe()) {
    mixture_of_experts();
  } else {
    llama_mlp(gemma);
  }
  return std::move(terms);
}

void LayerTerms::llama_attention(bool gemma) {
  add("input_layernorm input", norm_e * sbh);
  if (norm_keeps_normalized && !gemma) add("input_layernorm normalised input", e * sbh, {kNormWeight});
  add(gemma ? "RMSNorm statistics (fp32, four norms)" : "RMSNorm statistics (fp32, both norms)",
      (gemma ? 4 : 2) * 4 * s * b);
  add("q/k/v_proj input (norm output)", e * sbh, inputs_of(Projection::kQkv));
  if (dsl::family_info(a.family).qk_norm) {
    // q_norm and k_norm keep their inputs and an fp32 inverse RMS per head:
    // the fused norm keeps contiguous copies of the q and k heads, the
    // composed one views of the q/k/v_proj output, which so stays alive
    // whole; one upcasting its input (transformers') keeps fp32 copies of
    // q and k, and with training weights their normalised values too.
    if (norm_e > e) {
      add("q and k (q_norm/k_norm fp32 input)", norm_e * (sbq + s * b * kv));
    } else {
      add(fused ? "q and k (q_norm/k_norm input)" : "q/k/v_proj output (q_norm/k_norm input)",
          e * (sbq + (fused ? 1 : 2) * s * b * kv));
    }
    if (norm_keeps_normalized) add("q_norm/k_norm normalised input", e * (sbq + s * b * kv), {kNormWeight});
    add("q_norm/k_norm statistics (fp32)", 4 * s * b * static_cast<double>(a.heads + a.kv_heads));
  }
  if (fused) {
    // Fused RoPE writes one rotated copy of the qkv output; the attention
    // matmuls keep q, k and v as views of it.
    add("q, k, v after RoPE", e * (sbq + 2 * s * b * kv));
  } else {
    add("Q after RoPE", e * sbq);
  }
  if (standard) {
    // Eager attention repeats K and V to every query head before the matmuls
    // (with fused RoPE and no GQA, k and v are used as they are).
    if (!fused || a.kv_heads != a.heads) add("K and V repeated to all heads", 2 * e * sbq);
    // tanh keeps its output; the capped scores feed the softmax in place.
    if (a.attn_logit_softcap > 0) add("soft-capped scores (tanh output)", e * scores);
    standard_attention_scores();
  } else {
    if (kv_repeated && a.kv_heads != a.heads) {
      add("K and V repeated to all heads", 2 * e * sbq);
    } else if (!fused) {
      add("K and V (kv_heads)", 2 * e * s * b * kv);  // fused: views of the rotated copy
      if (qkv_views) add("q and k parts of the q/k/v output (kept whole by V's view)", e * (sbq + s * b * kv));
    }
    add("softmax statistics (fp32 logsumexp)", 4 * heads * s * b);
  }
  // Memory-efficient attention keeps its own output (the o_proj input) for
  // backward: FlashAttention's backward pass reads O (Dao et al. 2022,
  // algorithm 4).
  add("o_proj input", e * sbq, standard ? inputs_of(Projection::kO) : std::vector<std::string>{});
  if (gemma) add("post_attention_layernorm input (o_proj output)", norm_e * sbh);
  add(gemma ? "pre_feedforward_layernorm input" : "post_attention_layernorm input", norm_e * sbh);
  if (norm_keeps_normalized && !gemma) add("post_attention_layernorm normalised input", e * sbh, {kNormWeight});
}

// tailor-runner's MoE block (runner/torch/model.cpp): a token's k
// assignments gathered expert by expert, so each expert tensor holds s*b*k
// rows in all. The router and the experts are never LoRA targets: under
// adapters they are frozen and their inputs are not kept.
void LayerTerms::mixture_of_experts() {
  const double sbk = s * b * static_cast<double>(a.experts_per_token);
  add("router input (norm output)", e * sbh, {"router"});
  add("router probabilities (fp32 softmax)", 4 * s * b * static_cast<double>(a.experts));
  add("top-k weights, their sum (fp32) and indices (int64)", 4 * sbk + 4 * s * b + 8 * sbk);
  add("token order and positions of the assignments (int64)", 16 * sbk);
  add("expert inputs (tokens gathered by expert)", e * sbk * h, {"experts"});
  add("expert gate/up output (SiLU input)", 2 * e * sbk * i);
  if (!fused) add("expert SiLU output", e * sbk * i);
  add("expert down input", e * sbk * i, {"experts"});
  add("expert outputs and routing weights (before weighting)", e * sbk * (h + 1));
}

void LayerTerms::llama_mlp(bool gemma) {
  add("gate/up_proj input (norm output)", e * sbh, inputs_of(Projection::kUp));
  add(gemma ? "gate_proj output (GELU input)" : "gate_proj output (SiLU input)", e * sbi);
  // Fused SwiGLU recomputes its activation in backward; GeGLU keeps it.
  if (!fused || gemma) add(gemma ? "GELU output" : "SiLU output", e * sbi);
  add("up_proj output", e * sbi);
  add("down_proj input", e * sbi, inputs_of(Projection::kDown));
  if (gemma) add("post_feedforward_layernorm input (down_proj output)", norm_e * sbh);
}

}  // namespace

std::vector<ActivationTerm> layer_activation_terms(const dsl::ModelArch& a, BatchShape batch, Attention attention,
                                                   bool dropout, double e, const LayerTermOptions& options) {
  LayerTerms t(a, batch, attention, dropout, e, options);
  switch (dsl::family_info(a.family).block) {
    case dsl::BlockKind::kGpt2: return t.gpt2();
    case dsl::BlockKind::kLlama: return t.llama();
    case dsl::BlockKind::kGptNeox: return t.gpt_neox();
  }
  return {};
}

}  // namespace tailor::strategies
