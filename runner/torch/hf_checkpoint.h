// Hugging Face checkpoints for CausalLM: loading a model folder's weights
// (safetensors or pytorch_model.bin, one file or an index with shards) into
// the model's fused parameters, and saving the model as a folder transformers can load
// (config.json + model.safetensors or shards + index).
//
// Names: Llama/Mistral/Qwen2 as LlamaForCausalLM (model.embed_tokens,
// model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj,
// post_attention_layernorm, mlp.{gate,up,down}_proj}, model.norm, lm_head;
// q/k/v biases for Qwen2); GPT-2 as GPT2LMHeadModel (wte, wpe,
// h.N.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}, ln_f,
// with or without the "transformer." prefix; its Conv1D weights are stored
// (in, out), the transpose of ours). q/k/v and gate/up are slices of the
// fused qkv and gate_up parameters, in that order.
// Not here: adapters (merge them first), tokenizers
// (their files are copied, not read).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "dsl/model_family.h"
#include "runner/torch/model.h"

namespace tailor::runner {

// transformers' default max_shard_size ("5GB").
inline constexpr std::int64_t kDefaultMaxShardBytes = 5'000'000'000;

// Copies the weights of the Hugging Face folder `folder` into `model`'s
// parameters, converting F32/F16/BF16 to the parameters' dtype. Everything
// is checked before anything is copied, so on error the model is unchanged.
// Errors (InvalidArgument, naming the file and tensor): a missing tensor; an
// unexpected one (the attention-mask buffers of GPT-2 files, rotary inv_freq
// and a tied model's lm_head.weight are ignored); a wrong shape; an
// unsupported dtype; a tensor in two files or not where the index says; an
// index naming a missing shard; a pytorch_model.bin that TorchSaveFile
// refuses (runner/torch/torch_save_file.h). NotFound when the folder holds
// no weights; IOError when a file cannot be read.
Status load_hf_weights(CausalLM& model, const std::string& folder);

// One tensor of a checkpoint by its Hugging Face name.
struct HfTensor {
  std::string name;
  torch::Tensor tensor;  // Hugging Face's shape, on the CPU: a view of the parameter where it can be (contiguous() before reading bytes)
};

// The model's parameters as the tensors save_hf_model writes, in its order
// (un-fused, GPT-2's Conv1D weights transposed), in the parameters' dtype:
// what another format's writer starts from. Internal for a parameter that
// has no Hugging Face name (adapters not merged).
Result<std::vector<HfTensor>> hf_tensors(const CausalLM& model);

// Writes `model` to `folder` as config.json plus model.safetensors, or, when
// the tensors exceed `max_shard_bytes` (> 0; 0 = never shard), as
// model-0000i-of-0000n.safetensors shards plus model.safetensors.index.json.
// Tensors are un-fused, named as above and stored in the parameters' dtype
// (config.json's torch_dtype says which). The folder is built as
// `folder`.tmp and renamed into place; an existing folder is replaced only
// once the new one is complete (atomically swapped where the file system
// supports it). InvalidArgument for a negative max_shard_bytes; Internal for
// a parameter that has no Hugging Face name (adapters not merged);
// IOError naming the path when writing fails.
//
// With `tokens`, config.json and generation_config.json declare its BOS and
// EOS ids, and the files of `tokenizer_from` (a model folder's
// tokenizer.model, tokenizer.json, tokenizer_config.json,
// special_tokens_map.json, added_tokens.json, those present) are copied
// beside the weights, so transformers' AutoTokenizer loads the folder too.
struct HfExport {
  dsl::SpecialTokenIds tokens;
  std::string tokenizer_from;  // a model folder; empty: no tokenizer files
  // Trained with the byte tokenizer (no model folder): its tokenizer.json
  // and tokenizer_config.json are written (bpe_tokenizer.h), so the folder
  // has a tokenizer that Tailor and transformers read as the same ids.
  bool byte_tokenizer = false;
  // The chat template training rendered conversations with (empty: none):
  // written as chat_template.jinja and into tokenizer_config.json's
  // chat_template, so serving renders as training did.
  std::string chat_template;
};

// The tokenizer files and chat template of `extras` into `folder` (an
// existing folder): what save_hf_model writes beside the weights, and what
// an adapter folder gets so that AutoTokenizer loads it too. IOError naming
// the file.
Status write_tokenizer_files(const std::string& folder, const HfExport& extras);
Status save_hf_model(const CausalLM& model, const std::string& folder, std::int64_t max_shard_bytes,
                     const HfExport& extras = {});

}  // namespace tailor::runner
