#include "runner/torch/lora.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>

#include "dsl/peft_config.h"
#include "runner/io/safetensors.h"
#include "runner/torch/half_matmul.h"
#include "runner/torch/nf4.h"
#include "runner/torch/weight_file.h"

namespace tailor::runner {
namespace {

namespace fs = std::filesystem;
using torch::Tensor;

// Inverted dropout keeping a one-byte mask for backward instead of a mask in
// the input's dtype (what x * bernoulli would save): (e + 1) bytes per
// element with the dropped copy, as memory_model.cpp counts.
struct MaskedDropout : torch::autograd::Function<MaskedDropout> {
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& x, double p) {
    Tensor keep = torch::empty(x.sizes(), x.options().dtype(torch::kBool)).bernoulli_(1.0 - p);
    ctx->save_for_backward({keep});
    ctx->saved_data["scale"] = 1.0 / (1.0 - p);
    return x.mul(keep).mul_(1.0 / (1.0 - p));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const Tensor keep = ctx->get_saved_variables()[0];
    return {grad_out[0].mul(keep).mul_(ctx->saved_data["scale"].toDouble()), Tensor()};
  }
};

struct Adapter {
  dsl::LinearLayer slice;
  Tensor a;  // (r, in)
  Tensor b;  // (rows, r)
  // freeze_reference_adapters' copies of a and b (undefined until then):
  // not parameters, so never trained, saved or sharded.
  Tensor reference_a, reference_b;
};

// The adapters of every layer and the NF4 copies of the frozen projections;
// registered as the model's "lora" submodule and installed as its
// projection hook.
class LoraAdapters : public torch::nn::Module, public ProjectionHook {
 public:
  LoraAdapters(const CausalLMImpl& model, const LoraOptions& o) : options(o), arch(model.arch()) {
    scale = o.alpha / static_cast<double>(o.rank);
    const auto slices = dsl::block_linears(arch);
    // Adapters live where the base model does (initialised on the CPU, so a
    // seed draws the same values on every device).
    const torch::Device device = model.parameters().front().device();
    layers.resize(static_cast<std::size_t>(arch.layers));
    quantized.resize(static_cast<std::size_t>(arch.layers));
    quantized_experts.resize(static_cast<std::size_t>(arch.layers));
    torch::NoGradGuard no_grad;
    for (std::int64_t l = 0; l < arch.layers; ++l) {
      for (const dsl::LinearLayer& s : slices) {
        if (!o.targets.empty() && std::find(o.targets.begin(), o.targets.end(), s.target) == o.targets.end()) continue;
        std::string base = "layer" + std::to_string(l) + "_" + s.module;
        std::replace(base.begin(), base.end(), '.', '_');
        Adapter ad{
            s, torch::empty({o.rank, s.in}, torch::kFloat32), torch::zeros({s.rows, o.rank}, torch::kFloat32), {}, {}};
        // PEFT's default init: A as nn.Linear's weight (kaiming-uniform with
        // a = sqrt(5), i.e. U(-1/sqrt(in), 1/sqrt(in))), B zero.
        torch::nn::init::kaiming_uniform_(ad.a, std::sqrt(5.0));
        ad.a = register_parameter(base + "_A", ad.a.to(device, o.adapter_dtype));
        ad.b = register_parameter(base + "_B", ad.b.to(device, o.adapter_dtype));
        layers[static_cast<std::size_t>(l)].push_back(std::move(ad));
      }
    }
  }

  Tensor project(std::size_t layer, Projection p, const Tensor& x, const Tensor& weight, const Tensor& bias) override {
    const auto& q = quantized[layer][static_cast<std::size_t>(p)];
    Tensor y = q ? nf4_linear(x, *q, bias) : linear_layer(x, weight, bias);
    if (mode == LoraMode::kOff) return y;
    const bool reference = mode == LoraMode::kReference;
    for (const Adapter& ad : layers[layer]) {
      if (ad.slice.projection != p) continue;
      Tensor in = x;
      // Also without grad mode: a checkpointed layer's first forward must
      // draw the masks its recomputation will draw again. The frozen
      // reference is a fixed function: no dropout.
      if (options.dropout > 0 && is_training() && !reference) {
        in = MaskedDropout::apply(x, options.dropout);
      }
      const Tensor& a = reference ? ad.reference_a : ad.a;
      const Tensor& b = reference ? ad.reference_b : ad.b;
      const Tensor delta = linear_layer(linear_layer(in, a.to(x.scalar_type())), b.to(x.scalar_type()));
      y.narrow(-1, ad.slice.row_offset, ad.slice.rows).add_(delta, scale);
    }
    return y;
  }

  Tensor experts(std::size_t layer, bool gate_up, const Tensor& x, const Tensor& weight,
                 const std::vector<std::int64_t>& counts) override {
    const auto& q = quantized_experts[layer][gate_up ? 0 : 1];
    if (!q) return ProjectionHook::experts(layer, gate_up, x, weight, counts);
    return nf4_grouped_linear(x, *q, arch.experts, counts);
  }

  LoraOptions options;
  dsl::ModelArch arch;
  double scale = 1;
  LoraMode mode = LoraMode::kOn;
  std::vector<std::vector<Adapter>> layers;
  std::vector<std::array<std::optional<Nf4Tensor>, 4>> quantized;  // by layer, by Projection
  // QLoRA on a mixture of experts: each layer's stacked gate/up and down
  // expert weights as one 2-D NF4 tensor of (E * out, in).
  std::vector<std::array<std::optional<Nf4Tensor>, 2>> quantized_experts;
};

LoraAdapters* adapters_of(const CausalLMImpl& model) {
  return dynamic_cast<LoraAdapters*>(model.projection_hook().get());
}

constexpr std::array<Projection, 4> kProjections = {Projection::kQkv, Projection::kO, Projection::kUp,
                                                    Projection::kDown};

Result<io::DType> io_dtype(torch::Dtype t) {
  switch (t) {
    case torch::kFloat32: return io::DType::kF32;
    case torch::kBFloat16: return io::DType::kBF16;
    case torch::kFloat16: return io::DType::kF16;
    default: return Status::invalid_argument(std::string("unsupported adapter dtype ") + c10::toString(t));
  }
}

Result<torch::Dtype> torch_dtype(io::DType t) {
  switch (t) {
    case io::DType::kF32: return torch::kFloat32;
    case io::DType::kBF16: return torch::kBFloat16;
    case io::DType::kF16: return torch::kFloat16;
    case io::DType::kF64: return torch::kFloat64;
    default: return Status::invalid_argument(std::string("dtype ") + io::to_string(t) + " is not a floating type");
  }
}

std::string shape_string(const std::vector<std::int64_t>& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

}  // namespace

// PEFT's name for a sequence classifier's score saved whole
// (modules_to_save): the model's path, no adapter name.
constexpr const char* kPeftScoreName = "base_model.model.score.weight";

namespace {

// modules_to_save's tensor `name` (the embedding's or the head's Hugging Face
// name, checked at attach) with PEFT's name for it: the module's path.
std::pair<std::string, Tensor> whole_module_tensor(CausalLMImpl& model, const std::string& name) {
  const dsl::HfTensorNames& t = dsl::family_info(model.arch().family).tensors;
  if (name == t.embed)
    return {std::string("base_model.model.") + t.body + t.embed + ".weight", model.embedding_weight()};
  const Tensor head = model.lm_head_weight().defined() ? model.lm_head_weight() : model.embedding_weight();
  return {"base_model.model." + name + ".weight", head};
}

}  // namespace

std::string peft_tensor_name(const dsl::ModelArch& arch, std::int64_t layer, const std::string& module,
                             const std::string& which) {
  const dsl::ModelFamilyInfo& family = dsl::family_info(arch.family);
  const std::string prefix = std::string("base_model.model.") + family.tensors.body + family.tensors.layers;
  return prefix + std::to_string(layer) + "." + module + "." + which + ".weight";
}

namespace {

// The tensors modules_to_save names (checked by check_whole_modules): the
// embedding, then an untied head; a tied matrix once.
std::vector<Tensor*> whole_tensors(CausalLMImpl& model, const std::vector<std::string>& names) {
  const dsl::WholeModules w = dsl::whole_modules(model.arch(), names);
  std::vector<Tensor*> out;
  if (w.embedding) out.push_back(&model.embedding_weight());
  if (w.head && model.lm_head_weight().defined()) out.push_back(&model.lm_head_weight());
  return out;
}

Status check_whole_modules(const CausalLMImpl& model, const std::vector<std::string>& names) {
  if (names.empty()) return Status::ok();
  const dsl::ModelArch& arch = model.arch();
  const std::vector<std::string> valid = dsl::whole_module_names(arch.family);
  for (const std::string& n : names) {
    if (std::find(valid.begin(), valid.end(), n) == valid.end()) {
      std::string list;
      for (const std::string& v : valid)
        list += (list.empty() ? "" : ", ") + v;
      return Status::invalid_argument("lora: modules_to_save \"" + n + "\" is not the embedding or the head of a " +
                                      dsl::to_string(arch.family) + " model (valid: " + list + ")");
    }
  }
  if (model.head() == ModelHead::kScore) {
    return Status::invalid_argument("lora: modules_to_save beside a score head is not built");
  }
  const bool embedding = std::find(names.begin(), names.end(), valid[0]) != names.end();
  const bool head = std::any_of(names.begin(), names.end(),
                                [&](const std::string& n) { return dsl::is_head_module(arch.family, n); });
  if (arch.tie_embeddings && embedding != head) {
    return Status::invalid_argument("lora: modules_to_save: this model ties " + valid[0] + " and " + valid[1] +
                                    " (one matrix), so both are named");
  }
  return Status::ok();
}

}  // namespace

Status attach_lora(CausalLMImpl& model, const LoraOptions& o) {
  if (has_lora(model)) return Status::failed_precondition("attach_lora: the model already has adapters");
  TAILOR_RETURN_IF_ERROR(check_whole_modules(model, o.modules_to_save));
  if (o.rank < 1) return Status::invalid_argument("lora: r must be at least 1, got " + std::to_string(o.rank));
  if (!(o.dropout >= 0 && o.dropout < 1)) {
    return Status::invalid_argument("lora: dropout must be in [0, 1), got " + std::to_string(o.dropout));
  }
  const auto slices = dsl::block_linears(model.arch());
  for (const std::string& t : o.targets) {
    if (std::none_of(slices.begin(), slices.end(), [&](const dsl::LinearLayer& s) { return t == s.target; })) {
      std::string valid;
      for (const dsl::LinearLayer& s : slices) {
        if (valid.find(s.target) == std::string::npos) valid += std::string(valid.empty() ? "" : ", ") + s.target;
      }
      return Status::invalid_argument("lora: unknown target module \"" + t + "\" for a " +
                                      dsl::to_string(model.arch().family) + " model (valid: " + valid + ")");
    }
  }
  try {
    for (auto& p : model.parameters()) p.requires_grad_(false);
    auto adapters = std::make_shared<LoraAdapters>(model, o);
    if (o.base != dsl::Quantization::kNone) {
      if (o.base != dsl::Quantization::kNf4 && o.base != dsl::Quantization::kNf4Double) {
        return Status::invalid_argument(std::string("lora: base quantisation ") + dsl::to_string(o.base) +
                                        " is not implemented (nf4 and nf4-double-quant are)");
      }
      const Nf4Scales scales = o.base == dsl::Quantization::kNf4 ? Nf4Scales::kFp32 : Nf4Scales::kDoubleQuantized;
      for (std::size_t l = 0; l < static_cast<std::size_t>(model.arch().layers); ++l) {
        for (Projection p : kProjections) {
          Tensor& w = model.projection_weight(l, p);
          if (!w.defined()) continue;  // a mixture of experts has no shared MLP: its experts come next
          auto q = quantize_nf4(w, scales);
          if (!q.is_ok()) return q.status().prefixed("quantising layer " + std::to_string(l));
          adapters->quantized[l][static_cast<std::size_t>(p)] = std::move(q).value();
          // Free the dense copy: the parameter stays registered (same name,
          // checkpoint order) but holds nothing.
          w.set_data(torch::empty({0}, w.options()));
        }
        // The experts, which every token's MLP goes through, are most of a
        // mixture's weights (Mixtral 8x7B: 45 of 46.7B): NF4 too, as
        // bitsandbytes quantises them under QLoRA. Each expert's weight is
        // whole blocks, so one expert dequantises at a time.
        for (bool up : {true, false}) {
          Tensor& w = model.experts_weight(l, up);
          if (!w.defined() || (w.size(1) * w.size(2)) % kNf4BlockSize != 0) continue;
          auto q = quantize_nf4(w.reshape({w.size(0) * w.size(1), w.size(2)}), scales);
          if (!q.is_ok()) return q.status().prefixed("quantising layer " + std::to_string(l) + "'s experts");
          adapters->quantized_experts[l][up ? 0 : 1] = std::move(q).value();
          w.set_data(torch::empty({0}, w.options()));
        }
      }
    }
    for (Tensor* t : whole_tensors(model, o.modules_to_save))
      t->requires_grad_(true);
    model.register_module("lora", adapters);
    model.set_projection_hook(adapters);
    if (model.head() == ModelHead::kScore) {
      torch::Tensor& score = model.score_weight();
      score.set_data(score.detach().to(o.adapter_dtype));
      score.requires_grad_(true);
    }
  } catch (const c10::Error& e) {
    return Status::internal(std::string("attach_lora: ") + e.what_without_backtrace());
  }
  return Status::ok();
}

bool has_lora(const CausalLMImpl& model) { return adapters_of(model) != nullptr; }

std::vector<Tensor> lora_parameters(const CausalLMImpl& model) {
  std::vector<Tensor> out;
  if (const LoraAdapters* a = adapters_of(model)) {
    for (const auto& layer : a->layers) {
      for (const Adapter& ad : layer) {
        out.push_back(ad.a);
        out.push_back(ad.b);
      }
    }
    if (model.head() == ModelHead::kScore) out.push_back(model.score_weight());
  }
  return out;
}

std::vector<Tensor> whole_module_parameters(const CausalLMImpl& model) {
  std::vector<Tensor> out;
  if (const LoraAdapters* a = adapters_of(model)) {
    for (Tensor* t : whole_tensors(const_cast<CausalLMImpl&>(model), a->options.modules_to_save))
      out.push_back(*t);
  }
  return out;
}

void set_lora_enabled(CausalLMImpl& model, bool on) { set_lora_mode(model, on ? LoraMode::kOn : LoraMode::kOff); }

void set_lora_mode(CausalLMImpl& model, LoraMode mode) {
  if (LoraAdapters* a = adapters_of(model)) a->mode = mode;
}

std::int64_t freeze_reference_adapters(CausalLMImpl& model) {
  LoraAdapters* a = adapters_of(model);
  if (a == nullptr) return 0;
  torch::NoGradGuard no_grad;
  std::int64_t bytes = 0;
  for (auto& layer : a->layers) {
    for (Adapter& ad : layer) {
      ad.reference_a = ad.a.detach().clone();
      ad.reference_b = ad.b.detach().clone();
      bytes += static_cast<std::int64_t>(ad.reference_a.nbytes() + ad.reference_b.nbytes());
    }
  }
  return bytes;
}

void drop_reference_adapters(CausalLMImpl& model) {
  LoraAdapters* a = adapters_of(model);
  if (a == nullptr) return;
  if (a->mode == LoraMode::kReference) a->mode = LoraMode::kOn;
  for (auto& layer : a->layers) {
    for (Adapter& ad : layer)
      ad.reference_a = ad.reference_b = Tensor();
  }
}

std::vector<Tensor> lora_layer_tensors(const CausalLMImpl& model, std::size_t layer) {
  std::vector<Tensor> out;
  const LoraAdapters* a = adapters_of(model);
  if (!a || layer >= a->layers.size()) return out;
  for (const Adapter& ad : a->layers[layer]) {
    out.push_back(ad.a);
    out.push_back(ad.b);
  }
  auto add = [&](const std::optional<Nf4Tensor>& q) {
    if (!q) return;
    out.push_back(q->packed);
    out.push_back(q->absmax_codes);
    out.push_back(q->absmax_scale);
  };
  std::for_each(a->quantized[layer].begin(), a->quantized[layer].end(), add);
  std::for_each(a->quantized_experts[layer].begin(), a->quantized_experts[layer].end(), add);
  return out;
}

LoraFootprint lora_footprint(const CausalLMImpl& model) {
  LoraFootprint f;
  const LoraAdapters* a = adapters_of(model);
  if (!a) return f;
  for (const Tensor& t : lora_parameters(model)) {
    f.adapter_parameters += t.numel();
    f.adapter_bytes += static_cast<std::int64_t>(t.nbytes());
  }
  auto count = [&](const std::optional<Nf4Tensor>& q) {
    if (!q) return;
    f.quantized_parameters += q->numel;
    f.quantized_bytes += q->bytes();
  };
  for (const auto& layer : a->quantized) std::for_each(layer.begin(), layer.end(), count);
  for (const auto& layer : a->quantized_experts) std::for_each(layer.begin(), layer.end(), count);
  return f;
}

Status merge_lora(CausalLMImpl& model, torch::Dtype dtype) {
  LoraAdapters* a = adapters_of(model);
  if (!a) return Status::failed_precondition("merge_lora: the model has no adapters");
  try {
    torch::NoGradGuard no_grad;
    for (std::size_t l = 0; l < a->layers.size(); ++l) {
      for (Projection p : kProjections) {
        auto& q = a->quantized[l][static_cast<std::size_t>(p)];
        if (q) {
          model.projection_weight(l, p).set_data(dequantize_nf4(*q, dtype));
          q.reset();
        }
      }
      for (bool up : {true, false}) {
        auto& q = a->quantized_experts[l][up ? 0 : 1];
        if (!q) continue;
        const std::int64_t e = a->arch.experts;
        model.experts_weight(l, up).set_data(dequantize_nf4(*q, dtype).view({e, q->shape[0] / e, q->shape[1]}));
        q.reset();
      }
      for (const Adapter& ad : a->layers[l]) {
        Tensor& w = model.projection_weight(l, ad.slice.projection);
        // W += (alpha / r) B A, accumulated in fp32 before rounding into W.
        const Tensor delta = torch::matmul(ad.b.to(torch::kFloat32), ad.a.to(torch::kFloat32)).mul_(a->scale);
        Tensor rows = w.narrow(0, ad.slice.row_offset, ad.slice.rows);
        rows.copy_(rows.to(torch::kFloat32).add_(delta));
      }
    }
    model.set_projection_hook(nullptr);
    model.unregister_module("lora");
  } catch (const c10::Error& e) {
    return Status::internal(std::string("merge_lora: ") + e.what_without_backtrace());
  }
  return Status::ok();
}

Status save_peft_adapter(const CausalLMImpl& model, const std::string& dir, const std::string& base_model) {
  const LoraAdapters* a = adapters_of(model);
  if (!a) return Status::failed_precondition("save_peft_adapter: the model has no adapters");
  const fs::path tmp = dir + ".tmp";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return Status::io_error("cannot create " + tmp.string() + ": " + ec.message());

  const bool classifier = model.head() == ModelHead::kScore;
  std::vector<Tensor> keep;  // contiguous CPU copies the spans point into
  std::vector<io::TensorToWrite> tensors;
  std::vector<std::string> modules;
  try {
    for (std::size_t l = 0; l < a->layers.size(); ++l) {
      for (const Adapter& ad : a->layers[l]) {
        if (std::find(modules.begin(), modules.end(), ad.slice.target) == modules.end()) modules.push_back(ad.slice.target);
        for (const auto& [which, t] : {std::pair<const char*, const Tensor&>{"lora_A", ad.a}, {"lora_B", ad.b}}) {
          TAILOR_ASSIGN_OR_RETURN(const io::DType dt, io_dtype(t.scalar_type()));
          keep.push_back(t.detach().to(torch::kCPU).contiguous());
          const Tensor& c = keep.back();
          tensors.push_back({peft_tensor_name(a->arch, static_cast<std::int64_t>(l), ad.slice.module, which), dt,
                             c.sizes().vec(),
                             std::span<const std::byte>(static_cast<const std::byte*>(c.data_ptr()), c.nbytes())});
        }
      }
    }
    if (classifier) {
      const Tensor& score = model.score_weight();
      TAILOR_ASSIGN_OR_RETURN(const io::DType dt, io_dtype(score.scalar_type()));
      keep.push_back(score.detach().to(torch::kCPU).contiguous());
      const Tensor& c = keep.back();
      tensors.push_back({kPeftScoreName, dt, c.sizes().vec(),
                         std::span<const std::byte>(static_cast<const std::byte*>(c.data_ptr()), c.nbytes())});
    }
    // modules_to_save, under PEFT's names (the module's path, no adapter
    // name); a tied matrix under both, as PEFT keeps a copy of each.
    for (const std::string& name : a->options.modules_to_save) {
      const auto [peft_name, t] = whole_module_tensor(const_cast<CausalLMImpl&>(model), name);
      TAILOR_ASSIGN_OR_RETURN(const io::DType dt, io_dtype(t.scalar_type()));
      keep.push_back(t.detach().to(torch::kCPU).contiguous());
      const Tensor& c = keep.back();
      tensors.push_back({peft_name, dt, c.sizes().vec(),
                         std::span<const std::byte>(static_cast<const std::byte*>(c.data_ptr()), c.nbytes())});
    }
  } catch (const c10::Error& e) {
    return Status::internal(std::string("save_peft_adapter: ") + e.what_without_backtrace());
  }
  TAILOR_RETURN_IF_ERROR(
      io::write_safetensors((tmp / "adapter_model.safetensors").string(), tensors, {{"format", "pt"}}));

  nlohmann::json cfg = {
      {"peft_type", "LORA"},
      {"task_type", classifier ? "SEQ_CLS" : "CAUSAL_LM"},
      {"base_model_name_or_path", base_model},
      {"r", a->options.rank},
      {"lora_alpha", a->options.alpha},
      {"lora_dropout", a->options.dropout},
      {"target_modules", modules},
      {"bias", "none"},
      // GPT-2's Hugging Face layers are Conv1D, whose weight is (in, out).
      {"fan_in_fan_out", dsl::block_traits(a->arch).conv1d},
      {"inference_mode", true},
      {"init_lora_weights", true},
      {"modules_to_save", classifier                           ? nlohmann::json::array({"score"})
                          : a->options.modules_to_save.empty() ? nlohmann::json(nullptr)
                                                               : nlohmann::json(a->options.modules_to_save)},
      {"use_rslora", false},
  };
  {
    std::ofstream out(tmp / "adapter_config.json", std::ios::binary | std::ios::trunc);
    out << cfg.dump(2) << '\n';
    out.flush();
    if (!out) return Status::io_error("cannot write " + (tmp / "adapter_config.json").string());
  }
  fs::remove_all(dir, ec);
  fs::rename(tmp, dir, ec);
  if (ec) return Status::io_error("cannot move " + tmp.string() + " to " + dir + ": " + ec.message());
  return Status::ok();
}

Result<LoraOptions> read_peft_config(const std::string& dir, std::string* base_model) {
  TAILOR_ASSIGN_OR_RETURN(const dsl::PeftConfig cfg, dsl::read_peft_config_file(dir));
  if (cfg.sequence_classifier) {
    return Status::invalid_argument((fs::path(dir) / "adapter_config.json").string() +
                                    ": task_type: \"SEQ_CLS\" is a sequence classifier's adapter (e.g. a reward "
                                    "model): it scores text and has no language-model head to generate from or "
                                    "export; load it with PEFT over transformers' AutoModelForSequenceClassification, "
                                    "or write the merged model with the job's output.merge");
  }
  LoraOptions o;
  o.rank = cfg.rank;
  o.alpha = cfg.alpha;
  o.targets = cfg.targets;
  o.modules_to_save = cfg.modules_to_save;
  if (base_model != nullptr) *base_model = cfg.base_model;
  return o;
}

namespace {

// Copies `v` (a view into a mapped file) into `t`, checking its shape.
Status copy_tensor(const io::TensorView& v, Tensor& t, const std::string& where) {
  if (v.shape != t.sizes().vec()) {
    return Status::invalid_argument(where + " has shape " + shape_string(v.shape) + ", expected " +
                                    shape_string(t.sizes().vec()));
  }
  auto dt = torch_dtype(v.dtype);
  if (!dt.is_ok()) return dt.status().prefixed(where);
  // Copied out of the map: its bytes carry no alignment guarantee.
  Tensor src = torch::empty(v.shape, torch::TensorOptions().dtype(*dt));
  std::memcpy(src.data_ptr(), v.data.data(), v.data.size());
  t.copy_(src);
  return Status::ok();
}

}  // namespace

Status load_peft_adapter(CausalLMImpl& model, const std::string& dir) {
  LoraAdapters* a = adapters_of(model);
  if (!a) return Status::failed_precondition("load_peft_adapter: attach adapters to the model first");
  const std::string cfg_path = (fs::path(dir) / "adapter_config.json").string();
  TAILOR_ASSIGN_OR_RETURN(const dsl::PeftConfig cfg, dsl::read_peft_config_file(dir));
  if (cfg.rank != a->options.rank) {
    return Status::invalid_argument(cfg_path + ": r must be " + std::to_string(a->options.rank) +
                                    " (the model's rank), got " + std::to_string(cfg.rank));
  }
  const bool classifier = model.head() == ModelHead::kScore;
  if (cfg.sequence_classifier && !classifier) {
    return Status::invalid_argument(cfg_path +
                                    ": task_type \"SEQ_CLS\" is a sequence classifier's adapter, and this "
                                    "model has a language-model head");
  }
  // PEFT before 0.6 saved adapter_model.bin (torch.save), as PEFT still
  // does with safe_serialization=False; it reads either, safetensors first.
  std::string st_path = (fs::path(dir) / "adapter_model.safetensors").string();
  std::error_code ec;
  if (!fs::exists(st_path, ec) && fs::exists(fs::path(dir) / "adapter_model.bin", ec)) {
    st_path = (fs::path(dir) / "adapter_model.bin").string();
  }
  TAILOR_ASSIGN_OR_RETURN(WeightFile file, WeightFile::open(st_path));
  std::vector<std::string> names;  // of the tensors read
  try {
    torch::NoGradGuard no_grad;
    for (std::size_t l = 0; l < a->layers.size(); ++l) {
      for (Adapter& ad : a->layers[l]) {
        for (const auto& [which, t] : {std::pair<const char*, Tensor&>{"lora_A", ad.a}, {"lora_B", ad.b}}) {
          names.push_back(peft_tensor_name(a->arch, static_cast<std::int64_t>(l), ad.slice.module, which));
          const io::TensorView* v = file.find(names.back());
          if (!v) return Status::invalid_argument(st_path + ": missing tensor " + names.back());
          TAILOR_RETURN_IF_ERROR(copy_tensor(*v, t, st_path + ": tensor " + names.back()));
        }
      }
    }
    // A sequence classifier's adapter carries its trained score (PEFT's
    // modules_to_save); a causal language model's leaves the base's.
    if (cfg.sequence_classifier) {
      names.emplace_back(kPeftScoreName);
      const io::TensorView* v = file.find(kPeftScoreName);
      if (!v) return Status::invalid_argument(st_path + ": missing tensor " + names.back());
      TAILOR_RETURN_IF_ERROR(copy_tensor(*v, model.score_weight(), st_path + ": tensor " + names.back()));
    }
    // modules_to_save: the trained embedding and head replace the base's. A
    // tied matrix is saved under both names; PEFT's copies of it may differ
    // (each trained apart), which one matrix cannot hold.
    std::vector<std::string> whole = a->options.modules_to_save;
    std::sort(whole.begin(), whole.end());
    if (whole != cfg.modules_to_save) {
      return Status::invalid_argument(cfg_path + ": modules_to_save " + nlohmann::json(cfg.modules_to_save).dump() +
                                      " differs from the adapters attached (" + nlohmann::json(whole).dump() + ")");
    }
    std::vector<std::pair<std::string, Tensor>> loaded;  // PEFT's name, the model's tensor
    for (const std::string& name : whole) {
      auto [peft_name, t] = whole_module_tensor(model, name);
      names.push_back(peft_name);
      const io::TensorView* v = file.find(peft_name);
      if (!v) return Status::invalid_argument(st_path + ": missing tensor " + peft_name);
      const auto same = std::find_if(loaded.begin(), loaded.end(), [&](const auto& l) { return l.second.is_same(t); });
      if (same != loaded.end()) {
        Tensor other = torch::empty_like(t);
        TAILOR_RETURN_IF_ERROR(copy_tensor(*v, other, st_path + ": tensor " + peft_name));
        if (!torch::equal(other, t)) {
          return Status::invalid_argument(st_path + ": " + peft_name + " differs from " + same->first +
                                          ", which this model ties to it (one matrix)");
        }
        continue;
      }
      TAILOR_RETURN_IF_ERROR(copy_tensor(*v, t, st_path + ": tensor " + peft_name));
      loaded.emplace_back(peft_name, t);
    }
  } catch (const c10::Error& e) {
    return Status::internal(std::string("load_peft_adapter: ") + e.what_without_backtrace());
  }
  for (const io::TensorView& v : file.tensors()) {
    if (std::find(names.begin(), names.end(), v.name) == names.end()) {
      return Status::invalid_argument(st_path + ": tensor " + v.name + " has no adapter in this model");
    }
  }
  a->scale = cfg.alpha / static_cast<double>(a->options.rank);
  a->options.alpha = cfg.alpha;
  return Status::ok();
}

}  // namespace tailor::runner
