#include "runner/torch/gguf_export.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <optional>

#include "dsl/model_family.h"
#include "runner/data/gguf_vocab.h"
#include "runner/io/gguf_file.h"
#include "runner/torch/hf_checkpoint.h"

namespace tailor::runner {
namespace {

using dsl::ModelFamily;
using io::GgmlType;
using io::GgufValue;

// How a family is written for llama.cpp (its convert_hf_to_gguf.py's model
// classes): the architecture name, whether q/k rows go back to the
// interleaved RoPE layout its "llama" graph rotates (HF checkpoints keep
// them in halves), whether norm weights are stored as 1 + w (Gemma). A
// q/k/v fused head by head (GPT-NeoX, BlockTraits) is written as q | k | v.
struct GgufFamily {
  ModelFamily family;
  const char* arch;
  bool permute_qk;
  bool norm_plus_one;
};
constexpr GgufFamily kFamilies[] = {
    {ModelFamily::kLlama, "llama", true, false},   {ModelFamily::kMistral, "llama", true, false},
    {ModelFamily::kMixtral, "llama", true, false}, {ModelFamily::kQwen2, "qwen2", false, false},
    {ModelFamily::kQwen3, "qwen3", false, false},  {ModelFamily::kGemma2, "gemma2", false, true},
    {ModelFamily::kGemma3, "gemma3", false, true}, {ModelFamily::kGpt2, "gpt2", false, false},
    {ModelFamily::kPhi3, "phi3", false, false},    {ModelFamily::kGptNeox, "gptneox", false, false},
};

const GgufFamily* gguf_family(ModelFamily f) {
  for (const GgufFamily& g : kFamilies) {
    if (g.family == f) return &g;
  }
  return nullptr;
}

// general.file_type (llama.h's llama_ftype).
std::uint32_t file_type(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: return 0;
    case GgmlType::kF16: return 1;
    case GgmlType::kQ8_0: return 7;
    case GgmlType::kBF16: return 32;
  }
  return 0;
}

std::optional<GgmlType> outtype_of(const std::string& s) {
  if (s == "f32") return GgmlType::kF32;
  if (s == "f16") return GgmlType::kF16;
  if (s == "bf16") return GgmlType::kBF16;
  if (s == "q8_0") return GgmlType::kQ8_0;
  return std::nullopt;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// One tensor of the file: its name, shape and type, and how its fp32 values
// are made (at write time, one tensor at a time).
struct Planned {
  io::GgufTensorInfo info;
  std::function<torch::Tensor()> values;
};

// llama.cpp's name of a block's tensor from the Hugging Face module path
// within the block ("self_attn.q_proj"); empty when it has none.
std::map<std::string, std::string> block_names(const dsl::ModelArch& a) {
  const dsl::ModelFamilyInfo& f = dsl::family_info(a.family);
  std::map<std::string, std::string> m;
  auto put = [&](const char* hf, const char* gg) {
    if (hf != nullptr) m[hf] = gg;
  };
  put(f.tensors.norm1, "attn_norm");
  put(f.tensors.norm2, "ffn_norm");
  put(f.tensors.post_attn_norm, "post_attention_norm");
  put(f.tensors.post_mlp_norm, "post_ffw_norm");
  put(f.tensors.q_norm, "attn_q_norm");
  put(f.tensors.k_norm, "attn_k_norm");
  const std::map<std::string, const char*> by_target = {
      {"q_proj", "attn_q"},
      {"k_proj", "attn_k"},
      {"v_proj", "attn_v"},
      {"o_proj", "attn_output"},
      {"gate_proj", "ffn_gate"},
      {"up_proj", "ffn_up"},
      {"down_proj", "ffn_down"},
      {"c_attn", "attn_qkv"},
      {"c_fc", "ffn_up"},
      {"qkv_proj", "attn_qkv"},
      {"gate_up_proj", "ffn_up"},  // Phi-3's fused ones
      {"query_key_value", "attn_qkv"},
      {"dense", "attn_output"},
      {"dense_h_to_4h", "ffn_up"},  // GPT-NeoX's
      {"dense_4h_to_h", "ffn_down"},
  };
  for (const dsl::LinearLayer& l : dsl::block_linears(a)) {
    std::string target = l.target;
    if (target == "c_proj") target = l.projection == dsl::Projection::kO ? "o_proj" : "down_proj";
    if (auto it = by_target.find(target); it != by_target.end()) m[l.module] = it->second;
  }
  return m;
}

// Hugging Face's q or k rows (heads, [first halves | second halves]) as the
// interleaved pairs llama.cpp's "llama" RoPE rotates: the converter's permute().
torch::Tensor interleave_rope(const torch::Tensor& w, std::int64_t heads) {
  const auto shape = w.sizes().vec();
  std::vector<std::int64_t> split = {heads, 2, shape[0] / heads / 2};
  split.insert(split.end(), shape.begin() + 1, shape.end());
  return w.reshape(split).transpose(1, 2).reshape(shape);
}

// GPT-NeoX's q/k/v rows or bias, head by head ([q0 k0 v0 q1 ...]), as the
// q | k | v its llama.cpp graph splits: the converter's GPTNeoXModel
// modify_tensors.
torch::Tensor qkv_by_part(const torch::Tensor& w, std::int64_t heads) {
  const auto shape = w.sizes().vec();
  std::vector<std::int64_t> split = {heads, 3, shape[0] / heads / 3};
  split.insert(split.end(), shape.begin() + 1, shape.end());
  return w.reshape(split).transpose(0, 1).reshape(shape);
}

// Llama 3.1's rope_scaling as the per-frequency divisors llama.cpp reads
// from rope_freqs.weight: the converter's LlamaModel.generate_extra_tensors,
// op for op in float32 tensors (Python numbers as scalars), so that the
// bytes are its bytes.
torch::Tensor llama3_rope_factors(const dsl::ModelArch& a) {
  const dsl::RopeScaling& r = a.rope_scaling;
  const auto dim = static_cast<double>(a.head_dim());
  const torch::Tensor freqs = 1.0 / torch::pow(a.rope_theta, torch::arange(0, a.head_dim(), 2, torch::kFloat32) / dim);
  const double old = static_cast<double>(r.original_max_seq_len);
  const double low_wavelen = old / r.low_freq_factor, high_wavelen = old / r.high_freq_factor;
  std::vector<float> f;
  for (std::int64_t i = 0; i < freqs.size(0); ++i) {
    const torch::Tensor wavelen = (2 * M_PI) / freqs[i];
    if (wavelen.item<float>() < high_wavelen) {
      f.push_back(1.0f);
    } else if (wavelen.item<float>() > low_wavelen) {
      f.push_back(static_cast<float>(r.factor));
    } else {
      const torch::Tensor smooth = (old / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      f.push_back((1 / ((1 - smooth) / r.factor + smooth)).item<float>());
    }
  }
  return torch::tensor(f, torch::kFloat32);
}

// What llama.cpp would compute otherwise, refused before anything is written.
Status check_arch(const dsl::ModelArch& a, const GgufFamily& g) {
  const std::string family = dsl::to_string(a.family);
  if (dsl::family_info(a.family).gemma && a.query_pre_attn_scalar != 0 && a.query_pre_attn_scalar != a.head_dim()) {
    return Status::invalid_argument("query_pre_attn_scalar " + std::to_string(a.query_pre_attn_scalar) +
                                    " differs from head_dim " + std::to_string(a.head_dim()) + ": llama.cpp's " +
                                    g.arch + " scales queries by head_dim^-1/2 (except for 27B models)");
  }
  if (a.family == ModelFamily::kGemma3 && a.rope_local_theta != 0 && a.rope_local_theta != 10000.0) {
    return Status::invalid_argument("rope_local_base_freq " + std::to_string(a.rope_local_theta) +
                                    ": llama.cpp's gemma3 rotates its windowed layers by 10000");
  }
  if (a.family == ModelFamily::kGemma3 && a.rope_scaling.type != dsl::RopeScalingType::kNone &&
      a.rope_scaling.type != dsl::RopeScalingType::kLinear) {
    return Status::invalid_argument("gemma3 with llama3 rope_scaling: llama.cpp's gemma3 takes linear scaling only");
  }
  if (a.rope_scaling.type == dsl::RopeScalingType::kLlama3 && !g.permute_qk) {
    return Status::invalid_argument(family + " with llama3 rope_scaling: llama.cpp reads rope_freqs for its llama "
                                    "architecture only");
  }
  return Status::ok();
}

std::vector<std::pair<std::string, GgufValue>> model_metadata(const dsl::ModelArch& a, const GgufFamily& g,
                                                              const GgufExportOptions& o, GgmlType type) {
  std::vector<std::pair<std::string, GgufValue>> kv;
  const std::string p = std::string(g.arch) + ".";
  auto u32 = [](std::int64_t v) { return GgufValue(static_cast<std::uint32_t>(v)); };
  auto f32 = [](double v) { return GgufValue(static_cast<float>(v)); };
  kv.emplace_back("general.architecture", std::string(g.arch));
  kv.emplace_back("general.type", std::string("model"));
  kv.emplace_back("general.name", o.name);
  kv.emplace_back("general.file_type", u32(file_type(type)));
  kv.emplace_back("general.quantization_version", u32(2));
  kv.emplace_back(p + "vocab_size", u32(a.vocab));
  kv.emplace_back(p + "context_length", u32(a.max_seq_len));
  kv.emplace_back(p + "embedding_length", u32(a.hidden));
  kv.emplace_back(p + "block_count", u32(a.layers));
  kv.emplace_back(p + "feed_forward_length", u32(a.intermediate));
  kv.emplace_back(p + "attention.head_count", u32(a.heads));
  const dsl::BlockKind block = dsl::family_info(a.family).block;
  if (dsl::block_traits(block).layer_norm) kv.emplace_back(p + "attention.layer_norm_epsilon", f32(a.norm_eps));
  if (block == dsl::BlockKind::kGpt2) return kv;
  if (block == dsl::BlockKind::kGptNeox) {
    // As the converter's GPTNeoXModel; the RoPE base it leaves at
    // llama.cpp's default (10000) is written below too.
    kv.emplace_back(p + "use_parallel_residual", GgufValue(true));
  } else {
    kv.emplace_back(p + "attention.head_count_kv", u32(a.kv_heads > 0 ? a.kv_heads : a.heads));
    kv.emplace_back(p + "attention.layer_norm_rms_epsilon", f32(a.norm_eps));
    kv.emplace_back(p + "attention.key_length", u32(a.head_dim()));
    kv.emplace_back(p + "attention.value_length", u32(a.head_dim()));
  }
  // The rotated dimensions (GPT-NeoX: a fraction of each head), the base and
  // a linear stretch (llama3's is rope_freqs.weight, "llama" only).
  kv.emplace_back(p + "rope.dimension_count", u32(a.rotary_dims()));
  kv.emplace_back(p + "rope.freq_base", f32(a.rope_theta));
  if (a.rope_scaling.type == dsl::RopeScalingType::kLinear) {
    kv.emplace_back(p + "rope.scaling.type", std::string("linear"));
    kv.emplace_back(p + "rope.scaling.factor", f32(a.rope_scaling.factor));
  }
  if (block == dsl::BlockKind::kGptNeox) return kv;
  if (a.moe()) {
    kv.emplace_back(p + "expert_count", u32(a.experts));
    kv.emplace_back(p + "expert_used_count", u32(a.experts_per_token));
  }
  // Phi-3's window, 0 for none, as the converter writes it (llama.cpp reads
  // it and, for now, attends to everything: the export warns).
  if (a.family == ModelFamily::kPhi3) kv.emplace_back(p + "attention.sliding_window", u32(a.sliding_window));
  if (dsl::family_info(a.family).gemma) {
    if (a.sliding_window > 0) kv.emplace_back(p + "attention.sliding_window", u32(a.sliding_window));
    if (a.attn_logit_softcap > 0) kv.emplace_back(p + "attn_logit_softcapping", f32(a.attn_logit_softcap));
    if (a.final_logit_softcap > 0) kv.emplace_back(p + "final_logit_softcapping", f32(a.final_logit_softcap));
  }
  return kv;
}

void vocab_metadata(const data::GgufVocab& v, const GgufExportOptions& o,
                    std::vector<std::pair<std::string, GgufValue>>& kv) {
  kv.emplace_back("tokenizer.ggml.model", v.model);
  if (!v.pre.empty()) kv.emplace_back("tokenizer.ggml.pre", v.pre);
  kv.emplace_back("tokenizer.ggml.tokens", v.tokens);
  if (!v.scores.empty()) kv.emplace_back("tokenizer.ggml.scores", v.scores);
  kv.emplace_back("tokenizer.ggml.token_type", v.types);
  if (v.model == "gpt2") kv.emplace_back("tokenizer.ggml.merges", v.merges);
  auto id = [&](const char* key, std::int64_t value) {
    if (value >= 0) kv.emplace_back(key, GgufValue(static_cast<std::uint32_t>(value)));
  };
  id("tokenizer.ggml.bos_token_id", o.bos);
  id("tokenizer.ggml.eos_token_id", o.eos);
  id("tokenizer.ggml.unknown_token_id", v.unk);
  id("tokenizer.ggml.padding_token_id", o.pad);
  if (o.eot != o.eos) id("tokenizer.ggml.eot_token_id", o.eot);
  if (v.add_bos) kv.emplace_back("tokenizer.ggml.add_bos_token", *v.add_bos);
  if (v.add_eos) kv.emplace_back("tokenizer.ggml.add_eos_token", *v.add_eos);
  if (v.add_space_prefix) kv.emplace_back("tokenizer.ggml.add_space_prefix", *v.add_space_prefix);
  if (!o.chat_template.empty()) kv.emplace_back("tokenizer.chat_template", o.chat_template);
}

// The file's tensors in the checkpoint's order, named and laid out for
// llama.cpp; `type` for matrices, f32 for vectors (norms, biases), routers
// and learned positions, as the converter chooses.
Result<std::vector<Planned>> plan_tensors(const dsl::ModelArch& a, const GgufFamily& g, std::vector<HfTensor> hf,
                                          GgmlType type, GgufExportSummary& summary) {
  const dsl::ModelFamilyInfo& f = dsl::family_info(a.family);
  const bool gpt2 = f.block == dsl::BlockKind::kGpt2;
  const std::map<std::string, std::string> in_block = block_names(a);
  const std::string body = f.tensors.body, layers = body + f.tensors.layers;
  std::vector<Planned> out;
  auto add = [&](std::string name, torch::Tensor t, std::function<torch::Tensor(torch::Tensor)> transform = nullptr) {
    GgmlType chosen = type;
    const bool f32_always = t.dim() < 2 || !ends_with(name, ".weight") || name == "position_embd.weight" ||
                            name.find("ffn_gate_inp") != std::string::npos;
    if (f32_always) chosen = GgmlType::kF32;
    if (chosen == GgmlType::kQ8_0 && t.size(-1) % io::ggml_block_size(chosen) != 0) {
      chosen = GgmlType::kF16;
      ++summary.fallback_f16;
    }
    Planned p{{std::move(name), t.sizes().vec(), chosen}, nullptr};
    p.values = [t, transform]() {
      torch::Tensor v = t.is_meta() ? t : t.to(torch::kFloat32);
      return (transform ? transform(v) : v).contiguous();
    };
    out.push_back(std::move(p));
  };
  if (a.rope_scaling.type == dsl::RopeScalingType::kLlama3) add("rope_freqs.weight", llama3_rope_factors(a));
  auto plus_one = [](torch::Tensor t) { return t + 1; };
  // Mixtral's experts: one (experts, rows, cols) tensor per projection,
  // written where the block's last expert was.
  std::map<std::string, std::vector<torch::Tensor>> experts;
  for (HfTensor& t : hf) {
    const std::string& n = t.name;
    const bool norm = g.norm_plus_one && ends_with(n, "norm.weight");
    if (n == body + f.tensors.embed + ".weight") {
      add("token_embd.weight", t.tensor);
      if (gpt2) add("output.weight", t.tensor);  // llama.cpp's gpt2 graph reads its own output matrix
      continue;
    }
    if (f.tensors.positions && n == body + f.tensors.positions + ".weight") {
      add("position_embd.weight", t.tensor);
      continue;
    }
    if (n.rfind(body + f.tensors.final_norm + ".", 0) == 0) {
      add("output_norm" + n.substr(body.size() + std::strlen(f.tensors.final_norm)), t.tensor,
          norm ? std::function<torch::Tensor(torch::Tensor)>(plus_one) : nullptr);
      continue;
    }
    if (n == std::string(f.tensors.head) + ".weight") {
      add("output.weight", t.tensor);
      continue;
    }
    if (n.rfind(layers, 0) != 0) return Status::internal("tensor " + n + " has no GGUF name");
    const std::size_t dot = n.find('.', layers.size());
    const std::string layer = n.substr(layers.size(), dot - layers.size());
    const std::string rest = n.substr(dot + 1);             // "self_attn.q_proj.weight"
    const std::size_t last = rest.rfind('.');
    const std::string module = rest.substr(0, last), what = rest.substr(last);  // ".weight" / ".bias"
    const std::string blk = "blk." + layer + ".";
    if (f.tensors.moe && module.rfind(f.tensors.moe, 0) == 0) {
      const std::string inner = module.substr(std::strlen(f.tensors.moe));  // "gate", "experts.3.w1"
      if (inner == "gate") {
        add(blk + "ffn_gate_inp.weight", t.tensor);
        continue;
      }
      const std::string w = inner.substr(inner.rfind('.') + 1);  // w1 gate, w2 down, w3 up
      auto& list = experts[blk + w];
      list.push_back(t.tensor);
      if (static_cast<std::int64_t>(list.size()) == a.experts) {
        const char* name = w == "w1" ? "ffn_gate_exps" : w == "w2" ? "ffn_down_exps" : "ffn_up_exps";
        // Stacked when written, one projection's experts at a time: a
        // shape-only tensor plans it, the transform makes it.
        const std::vector<torch::Tensor> each = std::move(list);
        std::vector<std::int64_t> shape = each.front().sizes().vec();
        shape.insert(shape.begin(), a.experts);
        add(blk + name + ".weight", torch::empty(shape, torch::TensorOptions().device(torch::kMeta)),
            [each](const torch::Tensor&) { return torch::stack(each).to(torch::kFloat32); });
      }
      continue;
    }
    const auto it = in_block.find(module);
    if (it == in_block.end()) return Status::internal("tensor " + n + " has no GGUF name");
    std::function<torch::Tensor(torch::Tensor)> transform;
    if (norm) transform = plus_one;
    if (dsl::block_traits(f.block).qkv_head_by_head && it->second == "attn_qkv") {
      transform = [heads = a.heads](torch::Tensor w) { return qkv_by_part(w, heads); };
    }
    if (g.permute_qk && what == ".weight" && (it->second == "attn_q" || it->second == "attn_k")) {
      const std::int64_t heads = it->second == "attn_q" ? a.heads : (a.kv_heads > 0 ? a.kv_heads : a.heads);
      transform = [heads](torch::Tensor w) { return interleave_rope(w, heads); };
    }
    // GPT-2's Conv1D weights are (in, out) in its checkpoints: back to (out, in).
    const bool conv1d = gpt2 && what == ".weight" && t.tensor.dim() == 2;
    add(blk + it->second + what, conv1d ? t.tensor.t() : t.tensor, transform);
  }
  summary.tensors = static_cast<std::int64_t>(out.size());
  return out;
}

Status write_values(const Planned& p, std::vector<std::byte>& bytes) {
  torch::NoGradGuard no_grad;
  torch::Tensor v = p.values();
  const auto n = v.numel();
  bytes.resize(io::ggml_bytes(p.info.type, n));
  switch (p.info.type) {
    case GgmlType::kF32: std::memcpy(bytes.data(), v.data_ptr(), bytes.size()); break;
    case GgmlType::kF16: std::memcpy(bytes.data(), v.to(torch::kFloat16).contiguous().data_ptr(), bytes.size()); break;
    case GgmlType::kBF16: std::memcpy(bytes.data(), v.to(torch::kBFloat16).contiguous().data_ptr(), bytes.size()); break;
    case GgmlType::kQ8_0:
      io::quantize_q8_0(std::span<const float>(v.data_ptr<float>(), static_cast<std::size_t>(n)), bytes.data());
      break;
  }
  return Status::ok();
}

}  // namespace

std::string gguf_family_names() {
  std::string s;
  for (std::size_t i = 0; i < std::size(kFamilies); ++i) {
    s += std::string(i == 0 ? "" : i + 1 == std::size(kFamilies) ? " and " : ", ") + dsl::to_string(kFamilies[i].family);
  }
  return s;
}

Result<GgufExportSummary> export_gguf(const CausalLM& model, const std::string& path, const GgufExportOptions& o) {
  const dsl::ModelArch& a = model->arch();
  const GgufFamily* g = gguf_family(a.family);
  if (g == nullptr) {
    return Status::invalid_argument(std::string("GGUF export of ") + dsl::to_string(a.family) + " models is not built; " +
                                    gguf_family_names() + " are exported");
  }
  const auto type = outtype_of(o.outtype);
  if (!type) return Status::invalid_argument("--outtype: expected f32, f16, bf16 or q8_0, got \"" + o.outtype + "\"");
  TAILOR_RETURN_IF_ERROR(check_arch(a, *g));
  if (o.tokenizer_folder.empty()) {
    return Status::invalid_argument("the model has no tokenizer files (tokenizer.model or tokenizer.json), and a "
                                    "GGUF file carries its vocabulary for llama.cpp");
  }
  TAILOR_ASSIGN_OR_RETURN(data::GgufVocab vocab, data::read_gguf_vocab(o.tokenizer_folder, a.vocab));
  GgufExportSummary summary;
  if (!dsl::family_info(a.family).gemma && a.sliding_window > 0 && a.sliding_window < a.max_seq_len) {
    summary.warnings.push_back("sliding_window " + std::to_string(a.sliding_window) + ": llama.cpp's " + g->arch +
                               " architecture attends to the whole context, so sequences longer than " +
                               std::to_string(a.sliding_window) + " tokens are computed otherwise there");
  }
  summary.arch = g->arch;
  summary.vocab_model = vocab.model;
  summary.pre = vocab.pre;
  // Unset, llama.cpp adds BOS for SentencePiece vocabularies and for Llama
  // 3's pre-tokenizer among the BPE ones (llama-vocab.cpp's defaults).
  summary.adds_bos = vocab.add_bos.value_or(vocab.model == "llama" || vocab.pre == "llama-bpe");
  std::vector<std::pair<std::string, GgufValue>> kv = model_metadata(a, *g, o, *type);
  vocab_metadata(vocab, o, kv);
  try {
    TAILOR_ASSIGN_OR_RETURN(std::vector<HfTensor> hf, hf_tensors(model));
    TAILOR_ASSIGN_OR_RETURN(std::vector<Planned> planned, plan_tensors(a, *g, std::move(hf), *type, summary));
    std::vector<io::GgufTensorInfo> infos;
    for (const Planned& p : planned) infos.push_back(p.info);
    TAILOR_RETURN_IF_ERROR(io::write_gguf(path, kv, infos, [&](std::size_t i, std::vector<std::byte>& bytes) {
      return write_values(planned[i], bytes);
    }));
  } catch (const c10::Error& e) {
    return Status::internal(std::string("writing GGUF: LibTorch: ") + e.what_without_backtrace());
  }
  return summary;
}

}  // namespace tailor::runner
