#include "runner/torch/hf_checkpoint.h"

#include <fcntl.h>  // AT_FDCWD

#include <cstdio>  // renameat2, RENAME_EXCHANGE (glibc >= 2.28)
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "dsl/model_family.h"
#include "platform/files.h"
#include "runner/data/bpe_tokenizer.h"
#include "runner/io/hf_folder.h"
#include "runner/io/safetensors.h"
#include "runner/torch/io_dtype.h"
#include "runner/torch/weight_file.h"

namespace tailor::runner {
namespace fs = std::filesystem;
namespace {

using io::DType;

// One Hugging Face tensor and where it lives in the model: rows
// [row0, row0 + rows) of parameter `param` (all rows when rows < 0), of its
// slice `index` along the first dimension when index >= 0 (one expert of a
// mixture's stacked weights), transposed for GPT-2's Conv1D weights.
struct Slot {
  std::string hf_name;
  std::string param;
  std::vector<std::int64_t> hf_shape;
  std::int64_t row0 = 0, rows = -1;
  bool transpose = false;
  std::int64_t index = -1;
  // May be missing from a folder: a reward model's score, which a causal
  // language model's folder does not have (it keeps its initialisation).
  bool optional = false;
};

// The model's parameters (names from model.cpp) as Hugging Face tensors
// (names from the family's row in dsl/model_family.h), as they are added:
// the embeddings, each block by the function of its kind
// (dsl::BlockKind), the final norm and the head.
class HfLayout {
 public:
  explicit HfLayout(const dsl::ModelArch& a)
      : a_(a), f_(dsl::family_info(a.family)), linears_(dsl::block_linears(a)), traits_(dsl::block_traits(f_.block)) {}

  void add(std::string hf, std::string param, std::vector<std::int64_t> shape, std::int64_t row0 = 0,
           std::int64_t rows = -1, bool transpose = false) {
    slots_.push_back({std::move(hf), std::move(param), std::move(shape), row0, rows, transpose});
  }
  void add_norm(const std::string& hf, const std::string& param) {
    add(hf + ".weight", param, {a_.hidden});
    if (traits_.layer_norm) add(hf + ".bias", param + "_bias", {a_.hidden});
  }
  // Block `hf` (its tensors' prefix) as the model's `param` prefix.
  void block(const std::string& hf, const std::string& param) {
    switch (f_.block) {
      case dsl::BlockKind::kGpt2:
      case dsl::BlockKind::kGptNeox: biased_block(hf, param); break;
      case dsl::BlockKind::kLlama: llama_block(hf, param); break;
    }
  }
  std::vector<Slot> take() { return std::move(slots_); }
  std::vector<Slot>& slots() { return slots_; }

 private:
  // GPT-2's ln_1, c_attn, c_proj, ln_2, c_fc, c_proj (GPT-NeoX's norms,
  // query_key_value, dense, dense_h_to_4h, dense_4h_to_h), each linear with
  // its bias. Conv1D computes x @ W + b with W stored (in, out): our
  // (out, in) transposed. GPT-NeoX's q/k/v rows stay head by head (the
  // forward reorders them).
  void biased_block(const std::string& h, const std::string& l) {
    add_norm(h + f_.tensors.norm1, l + "norm1");
    for (const dsl::LinearLayer& lin : linears_) {
      if (lin.projection == dsl::Projection::kUp) add_norm(h + f_.tensors.norm2, l + "norm2");  // before the MLP
      const std::string param = l + (lin.projection == dsl::Projection::kUp ? "fc" : param_of(lin.projection));
      if (traits_.conv1d) {
        add(h + lin.module + ".weight", param, {lin.in, lin.rows}, 0, -1, true);
      } else {
        add(h + lin.module + ".weight", param, {lin.rows, lin.in});
      }
      add(h + lin.module + ".bias", param + "_bias", {lin.rows});
    }
  }
  // The norm, q/k norms where the family has them, the attention's linears
  // (rows of the fused qkv and gate_up), the norms around the MLP, then its
  // linears or Mixtral's router and experts.
  void llama_block(const std::string& h, const std::string& l) {
    add_norm(h + f_.tensors.norm1, l + "norm1");
    if (f_.qk_norm) {
      add(h + f_.tensors.q_norm + ".weight", l + "q_norm", {a_.head_dim()});
      add(h + f_.tensors.k_norm + ".weight", l + "k_norm", {a_.head_dim()});
    }
    bool mlp = false;
    for (const dsl::LinearLayer& lin : linears_) {
      if (!mlp && lin.projection == dsl::Projection::kUp) {
        if (f_.tensors.post_attn_norm) add_norm(h + f_.tensors.post_attn_norm, l + "post_attn_norm");
        add_norm(h + f_.tensors.norm2, l + "norm2");  // before the MLP
      }
      mlp = mlp || lin.projection == dsl::Projection::kUp;
      const std::string param = l + param_of(lin.projection);
      add(h + lin.module + ".weight", param, {lin.rows, lin.in}, lin.row_offset, lin.rows);
      if (f_.qkv_bias && lin.projection == dsl::Projection::kQkv) {
        add(h + lin.module + ".bias", param + "_bias", {lin.rows}, lin.row_offset, lin.rows);
      }
    }
    if (f_.tensors.post_mlp_norm) add_norm(h + f_.tensors.post_mlp_norm, l + "post_mlp_norm");
    if (a_.moe()) experts(h, l);
  }
  // Mixtral's files: the norm, the router, then w1 (gate), w2 (down) and
  // w3 (up) of every expert.
  void experts(const std::string& h, const std::string& l) {
    add_norm(h + f_.tensors.norm2, l + "norm2");
    const std::string moe = h + f_.tensors.moe;
    const std::int64_t n = a_.intermediate, c = a_.hidden;
    add(moe + "gate.weight", l + "router", {a_.experts, c});
    for (std::int64_t e = 0; e < a_.experts; ++e) {
      const std::string x = moe + "experts." + std::to_string(e) + ".";
      slots_.push_back({x + "w1.weight", l + "experts_gate_up", {n, c}, 0, n, false, e});
      slots_.push_back({x + "w2.weight", l + "experts_down", {c, n}, 0, -1, false, e});
      slots_.push_back({x + "w3.weight", l + "experts_gate_up", {n, c}, n, n, false, e});
    }
  }
  // The model's parameter (model.cpp) that holds a fused projection.
  static const char* param_of(dsl::Projection p) {
    switch (p) {
      case dsl::Projection::kQkv: return "qkv";
      case dsl::Projection::kO: return "o";
      case dsl::Projection::kUp: return "gate_up";
      case dsl::Projection::kDown: return "down";
    }
    return "?";
  }

  const dsl::ModelArch& a_;
  const dsl::ModelFamilyInfo& f_;
  const std::vector<dsl::LinearLayer> linears_;
  const dsl::BlockTraits& traits_;
  std::vector<Slot> slots_;
};

// The whole model's layout. `body` is the prefix of the body's tensors
// ("model.", "transformer.", or "" for GPT-2 files without it).
std::vector<Slot> hf_layout(const dsl::ModelArch& a, const std::string& body, ModelHead head) {
  const dsl::ModelFamilyInfo& f = dsl::family_info(a.family);
  const std::int64_t c = a.hidden;
  HfLayout out(a);
  out.add(body + f.tensors.embed + ".weight", "embed.weight", {a.vocab, c});
  if (f.tensors.positions) out.add(body + f.tensors.positions + ".weight", "pos_embed.weight", {a.max_seq_len, c});
  for (std::int64_t i = 0; i < a.layers; ++i) {
    out.block(body + f.tensors.layers + std::to_string(i) + ".", "layer" + std::to_string(i) + ".");
  }
  out.add_norm(body + f.tensors.final_norm, "final_norm");
  if (head == ModelHead::kScore) {
    out.add("score.weight", "score", {1, c});
    out.slots().back().optional = true;
  } else if (!a.tie_embeddings) {
    out.add(std::string(f.tensors.head) + ".weight", "lm_head", {a.vocab, c});
  }
  return out.take();
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Tensors found in real checkpoints that are not weights of the model:
// buffers older transformers saved (GPT-2's attn.bias and masked_bias
// causal masks, GPT-NeoX's attention.bias and masked_bias, the rotary
// inv_freq), and a tied model's copy of the embedding. None is a name of
// the layout (whose biases end in c_attn.bias, query_key_value.bias, ...).
bool harmless_extra(const dsl::ModelArch& a, const std::string& name, ModelHead head) {
  const std::string head_name = std::string(dsl::family_info(a.family).tensors.head) + ".weight";
  // A reward model started from a causal language model drops its head.
  if (head == ModelHead::kScore && name == head_name) return true;
  for (const char* buffer :
       {".attn.bias", ".attn.masked_bias", ".attention.bias", ".attention.masked_bias", ".rotary_emb.inv_freq"}) {
    if (ends_with(name, buffer)) return true;
  }
  return a.tie_embeddings && name == head_name;
}

std::string shape_text(c10::IntArrayRef shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Model weights are floating point; other safetensors types are refused.
std::optional<torch::Dtype> weight_dtype_of(DType t) {
  const auto d = torch_dtype_of(t);
  return d && *d != torch::kFloat64 && c10::isFloatingType(*d) ? d : std::nullopt;
}

const char* hf_dtype_name(torch::Dtype t) {
  switch (t) {
    case torch::kFloat16: return "float16";
    case torch::kBFloat16: return "bfloat16";
    case torch::kFloat64: return "float64";
    default: return "float32";
  }
}

std::string family_name(const dsl::ModelArch& a) { return dsl::to_string(a.family); }

struct Located {
  const io::TensorView* view;
  std::size_t file;
};

Status load_checked(CausalLM& model, const std::string& folder) {
  TAILOR_ASSIGN_OR_RETURN(io::WeightFiles wf, io::find_weight_files(folder));
  std::vector<WeightFile> files;
  std::vector<std::string> file_names;
  std::map<std::string, Located, std::less<>> tensors;
  for (const std::string& path : wf.files) {
    TAILOR_ASSIGN_OR_RETURN(WeightFile f, WeightFile::open(path, /*inside_read_root=*/true));
    files.push_back(std::move(f));
    file_names.push_back(fs::path(path).filename().string());
  }
  for (std::size_t i = 0; i < files.size(); ++i) {
    for (const io::TensorView& t : files[i].tensors()) {
      const auto [it, fresh] = tensors.emplace(t.name, Located{&t, i});
      if (!fresh) {
        return Status::invalid_argument(t.name + " is in both " + file_names[it->second.file] + " and " +
                                        file_names[i]);
      }
    }
  }
  if (wf.index) {
    for (const auto& [name, file] : wf.index->weight_map) {
      const auto it = tensors.find(name);
      if (it == tensors.end() || file_names[it->second.file] != file) {
        return Status::invalid_argument(fs::path(wf.index_path).filename().string() + " places " + name + " in " +
                                        file + ", which does not hold it");
      }
    }
  }

  const dsl::ModelArch& arch = model->arch();
  // GPT-2 files are written with and without the body prefix.
  const std::string body = dsl::family_info(arch.family).tensors.body;
  std::string prefix = dsl::family_info(arch.family).block == dsl::BlockKind::kGpt2 ? "" : body;
  for (const auto& [name, loc] : tensors) {
    if (name.rfind(body, 0) == 0) prefix = body;
  }
  const std::vector<Slot> layout = hf_layout(arch, prefix, model->head());
  auto params = model->named_parameters();
  std::set<std::string, std::less<>> used;
  for (const Slot& s : layout) {
    const torch::Tensor* p = params.find(s.param);
    if (p == nullptr) return Status::internal("the model has no parameter " + s.param + " for " + s.hf_name);
    const auto it = tensors.find(s.hf_name);
    if (it == tensors.end() && s.optional) continue;
    if (it == tensors.end()) {
      return Status::invalid_argument("missing tensor " + s.hf_name + " (a " + family_name(arch) +
                                      " model of this config needs it)");
    }
    const io::TensorView& t = *it->second.view;
    const std::string where = s.hf_name + " in " + file_names[it->second.file];
    if (!weight_dtype_of(t.dtype)) {
      return Status::invalid_argument(where + ": dtype " + io::to_string(t.dtype) +
                                      " is not supported (expected F32, F16 or BF16)");
    }
    if (t.shape != s.hf_shape) {
      return Status::invalid_argument(where + ": shape " + shape_text(t.shape) + ", expected " +
                                      shape_text(s.hf_shape) + " for this config");
    }
    used.insert(s.hf_name);
  }
  for (std::size_t i = 0; i < files.size(); ++i) {
    for (const io::TensorView& t : files[i].tensors()) {
      if (!used.contains(t.name) && !harmless_extra(arch, t.name, model->head())) {
        return Status::invalid_argument("unexpected tensor " + t.name + " in " + file_names[i] + " (not part of a " +
                                        family_name(arch) + " model of this config)");
      }
    }
  }

  torch::NoGradGuard no_grad;
  for (const Slot& s : layout) {
    if (!used.contains(s.hf_name)) continue;  // an optional tensor the folder lacks
    const Located& loc = tensors.find(s.hf_name)->second;
    const io::TensorView& t = *loc.view;
    // Copied out of the map first: the file gives no alignment guarantee.
    torch::Tensor src = torch::empty(t.shape, torch::TensorOptions().dtype(*weight_dtype_of(t.dtype)));
    if (!t.data.empty()) std::memcpy(src.data_ptr(), t.data.data(), t.data.size());
    files[loc.file].done_with(t);  // copied: the file's pages need not stay resident
    if (s.transpose) src = src.t();
    torch::Tensor dst = *params.find(s.param);
    if (s.index >= 0) dst = dst.select(0, s.index);
    if (s.rows >= 0) dst = dst.narrow(0, s.row0, s.rows);
    dst.copy_(src);  // converts to the parameter's dtype and device
  }
  return Status::ok();
}

// Moves the finished `tmp` folder to `folder`, replacing what is there only
// now that the new folder is complete.
Status publish_folder(const fs::path& tmp, const fs::path& folder) {
  std::error_code ec;
  if (!fs::exists(folder, ec)) {
    fs::rename(tmp, folder, ec);
    if (ec) return Status::io_error("cannot rename " + tmp.string() + " to " + folder.string() + ": " + ec.message());
    return Status::ok();
  }
  // Linux swaps the two names in one step; readers never see no folder.
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, folder.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(tmp, ec);  // now the old folder
    return Status::ok();
  }
  // File systems without RENAME_EXCHANGE: move the old folder aside first.
  const fs::path old = folder.string() + ".old";
  fs::remove_all(old, ec);
  fs::rename(folder, old, ec);
  if (ec) return Status::io_error("cannot move " + folder.string() + " aside: " + ec.message());
  fs::rename(tmp, folder, ec);
  if (ec) {
    std::error_code ignored;
    fs::rename(old, folder, ignored);
    return Status::io_error("cannot rename " + tmp.string() + " to " + folder.string() + ": " + ec.message());
  }
  fs::remove_all(old, ec);
  return Status::ok();
}

// The model's tensors by Hugging Face name, un-fused, on the CPU (views).
Result<std::vector<HfTensor>> hf_tensors_checked(const CausalLM& model) {
  const dsl::ModelArch& arch = model->arch();
  const std::vector<Slot> layout = hf_layout(arch, dsl::family_info(arch.family).tensors.body, model->head());
  const auto params = model->named_parameters();
  std::set<std::string> mapped;
  for (const Slot& s : layout) mapped.insert(s.param);
  for (const auto& item : params) {
    if (!mapped.contains(item.key())) {
      return Status::internal("parameter " + item.key() + " has no Hugging Face name (merge adapters before saving)");
    }
  }
  std::vector<HfTensor> outs;
  torch::NoGradGuard no_grad;
  for (const Slot& s : layout) {
    const torch::Tensor* p = params.find(s.param);
    if (p == nullptr) return Status::internal("the model has no parameter " + s.param + " for " + s.hf_name);
    torch::Tensor t = p->detach();
    if (s.index >= 0) t = t.select(0, s.index);
    if (s.rows >= 0) t = t.narrow(0, s.row0, s.rows);
    if (s.transpose) t = t.t();
    t = t.to(torch::kCPU);
    if (t.sizes() != c10::IntArrayRef(s.hf_shape)) {
      return Status::internal(s.param + " gives " + s.hf_name + " the shape " + shape_text(t.sizes()) + ", expected " +
                              shape_text(s.hf_shape));
    }
    outs.push_back({s.hf_name, t});
  }
  return outs;
}

Status save_checked(const CausalLM& model, const std::string& folder_arg, std::int64_t max_shard_bytes,
                    const HfExport& extras) {
  if (max_shard_bytes < 0) {
    return Status::invalid_argument("max_shard_bytes must be positive (0 = one file), got " +
                                    std::to_string(max_shard_bytes));
  }
  const dsl::ModelArch& arch = model->arch();
  TAILOR_ASSIGN_OR_RETURN(std::vector<HfTensor> outs, hf_tensors_checked(model));
  for (HfTensor& o : outs) o.tensor = o.tensor.contiguous();
  torch::Dtype dtype = outs.empty() ? torch::kFloat32 : outs.front().tensor.scalar_type();
  std::vector<DType> dtypes;
  for (const HfTensor& o : outs) {
    const auto d = io_dtype_of(o.tensor.scalar_type());
    if (!d) return Status::internal(o.name + ": dtype " + std::string(c10::toString(o.tensor.scalar_type())) + " cannot be saved");
    dtypes.push_back(*d);
  }

  // Greedy sharding in state_dict order, as transformers does: a new shard
  // starts when the next tensor would take this one over the limit.
  std::vector<std::vector<std::size_t>> shards(1);
  std::int64_t in_shard = 0, total = 0;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    const auto n = static_cast<std::int64_t>(outs[i].tensor.nbytes());
    if (max_shard_bytes > 0 && !shards.back().empty() && in_shard + n > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(i);
    in_shard += n;
    total += n;
  }

  const fs::path folder = fs::path(folder_arg).lexically_normal();
  const fs::path target = folder.has_filename() ? folder : folder.parent_path();
  const fs::path tmp = target.string() + ".tmp";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return Status::io_error("cannot create " + tmp.string() + ": " + ec.message());
  auto fail = [&](const Status& s) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    return s;
  };

  Status s = io::write_hf_config((tmp / io::kConfigFile).string(), arch, hf_dtype_name(dtype), extras.tokens,
                                 model->head() == ModelHead::kScore);
  if (!s.is_ok()) return fail(s);
  if (extras.tokens.bos >= 0 || extras.tokens.eos >= 0) {
    s = platform::write_file_atomic((tmp / "generation_config.json").string(),
                                       dsl::hf_generation_config_json(extras.tokens));
    if (!s.is_ok()) return fail(s);
  }
  s = write_tokenizer_files(tmp.string(), extras);
  if (!s.is_ok()) return fail(s);
  // transformers refuses safetensors files whose metadata lacks format "pt".
  const std::map<std::string, std::string> metadata{{"format", "pt"}};
  io::ShardIndex index;
  index.total_size = total;
  const int count = static_cast<int>(shards.size());
  for (int k = 0; k < count; ++k) {
    const std::string name = count == 1 ? io::kSingleWeightsFile : io::shard_file_name(k + 1, count);
    std::vector<io::TensorToWrite> tw;
    for (std::size_t i : shards[static_cast<std::size_t>(k)]) {
      const HfTensor& o = outs[i];
      tw.push_back({o.name, dtypes[i], std::vector<std::int64_t>(o.tensor.sizes().begin(), o.tensor.sizes().end()),
                    std::span<const std::byte>(static_cast<const std::byte*>(o.tensor.data_ptr()), o.tensor.nbytes())});
      index.weight_map[o.name] = name;
    }
    s = io::write_safetensors((tmp / name).string(), tw, metadata);
    if (!s.is_ok()) return fail(s);
  }
  if (count > 1) {
    s = io::write_shard_index((tmp / io::kShardIndexFile).string(), index);
    if (!s.is_ok()) return fail(s);
  }
  s = publish_folder(tmp, target);
  return s.is_ok() ? s : fail(s);
}

}  // namespace

Status write_tokenizer_files(const std::string& folder_arg, const HfExport& extras) {
  const fs::path folder(folder_arg);
  std::error_code ec;
  if (extras.tokenizer_from.empty() && extras.byte_tokenizer) {
    for (const auto& [name, text] : {std::pair{"tokenizer.json", data::byte_tokenizer_json()},
                                     std::pair{"tokenizer_config.json", data::byte_tokenizer_config_json()}}) {
      TAILOR_RETURN_IF_ERROR(platform::write_file_atomic((folder / name).string(), text));
    }
  }
  if (!extras.tokenizer_from.empty()) {
    for (const char* name : {"tokenizer.model", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                             "added_tokens.json"}) {
      const fs::path from = fs::path(extras.tokenizer_from) / name;
      if (!fs::is_regular_file(from, ec)) continue;
      fs::copy_file(from, folder / name, fs::copy_options::overwrite_existing, ec);
      if (ec) return Status::io_error("copying " + from.string() + ": " + ec.message());
    }
  }
  if (extras.chat_template.empty()) return Status::ok();
  TAILOR_RETURN_IF_ERROR(platform::write_file_atomic((folder / "chat_template.jinja").string(), extras.chat_template));
  const fs::path config = folder / "tokenizer_config.json";
  if (!fs::is_regular_file(config, ec)) return Status::ok();
  std::ifstream in(config);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    return Status::invalid_argument(config.string() + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) return Status::invalid_argument(config.string() + ": not a JSON object");
  j["chat_template"] = extras.chat_template;
  return platform::write_file_atomic(config.string(), j.dump(2) + "\n");
}

Result<std::vector<HfTensor>> hf_tensors(const CausalLM& model) {
  try {
    return hf_tensors_checked(model);
  } catch (const c10::Error& e) {
    return Status::internal(std::string("the model's tensors: LibTorch: ") + e.what_without_backtrace());
  }
}

Status load_hf_weights(CausalLM& model, const std::string& folder) {
  try {
    return load_checked(model, folder).prefixed("loading Hugging Face weights from " + folder);
  } catch (const c10::Error& e) {
    return Status::internal("loading Hugging Face weights from " + folder + ": LibTorch: " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Status::internal("loading Hugging Face weights from " + folder + ": " + e.what());
  }
}

Status save_hf_model(const CausalLM& model, const std::string& folder, std::int64_t max_shard_bytes,
                     const HfExport& extras) {
  try {
    return save_checked(model, folder, max_shard_bytes, extras).prefixed("saving the model to " + folder);
  } catch (const c10::Error& e) {
    return Status::internal("saving the model to " + folder + ": LibTorch: " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Status::internal("saving the model to " + folder + ": " + e.what());
  }
}

}  // namespace tailor::runner
