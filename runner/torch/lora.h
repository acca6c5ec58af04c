// LoRA and QLoRA on CausalLM. LoRA (Hu et al., "LoRA: Low-Rank Adaptation
// of Large Language Models", 2021): the base weights are frozen and each
// targeted linear layer W (out, in) gains y += (alpha / r) * B A dropout(x)
// with A (r, in) and B (out, r); A starts kaiming-uniform (as PEFT and
// nn.Linear do), B at zero, so the adapted model starts equal to the base.
// QLoRA (Dettmers et al. 2023): additionally the blocks' frozen projection
// weights are stored in NF4 (nf4.h) and dequantised per call; embeddings,
// norms, biases and the head stay in the compute dtype.
//
// Targets use Hugging Face names (Llama: q_proj, k_proj, v_proj, o_proj,
// gate_proj, up_proj, down_proj; GPT-2: c_attn, c_proj, c_fc, where c_proj
// names both attn.c_proj and mlp.c_proj as in PEFT). The model fuses
// q/k/v and gate/up: their adapters write into row slices of the fused
// projection's output. Adapters are registered as the model's submodule
// "lora" (parameters "lora.layer<i>_<module>_{A,B}"); no existing parameter
// is renamed. Files are PEFT's adapter_config.json and
// adapter_model.safetensors with PEFT's tensor names, so HF PEFT loads them.
//
// modules_to_save trains the embedding and the head whole beside the
// adapters (in place: there is no frozen original to switch back to, so
// LoraMode::kOff keeps the trained ones), saved under PEFT's names.
//
// Not here: rsLoRA/DoRA variants, bias training, adapters on the embedding
// or the head, several adapters at once.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "dsl/technique.h"
#include "runner/torch/model.h"

namespace tailor::runner {

struct LoraOptions {
  std::int64_t rank = 16;                 // r >= 1
  double alpha = 32;                      // the update is scaled by alpha / r
  double dropout = 0.0;                   // on the adapter input while training, in [0, 1)
  std::vector<std::string> targets;       // Hugging Face names; empty = every linear layer of the blocks
  // QLoRA: the blocks' projections stored in NF4 (nf4: fp32 scales;
  // nf4-double-quant: 8-bit ones); none keeps them dense.
  dsl::Quantization base = dsl::Quantization::kNone;
  torch::Dtype adapter_dtype = torch::kFloat32;  // A and B (and so their gradients)
  // PEFT's modules_to_save by Hugging Face name (dsl::whole_module_names):
  // the embedding and the head trained whole, in place and in the weights'
  // dtype, as a full fine-tune trains them.
  std::vector<std::string> modules_to_save;
};

// What adapters and quantisation hold, in bytes and parameters.
struct LoraFootprint {
  std::int64_t adapter_parameters = 0;
  std::int64_t adapter_bytes = 0;
  std::int64_t quantized_parameters = 0;  // base weights held in NF4
  std::int64_t quantized_bytes = 0;       // their NF4 storage, both levels of scales included
};

// Freezes every parameter of `model`, quantises the blocks' projections to
// NF4 when asked (the dense weights are freed: their parameters become
// empty tensors), and adds adapters. A sequence classifier's score head
// (ModelHead::kScore, a reward model) stays trained whole, in the adapters'
// dtype: PEFT's SEQ_CLS task with the score among its modules_to_save. Call after moving the model to its
// dtype. Errors (InvalidArgument): unknown target or modules_to_save names
// (the valid ones are listed), a tied matrix named once, rank < 1, dropout
// outside [0, 1), adapters already attached.
Status attach_lora(CausalLMImpl& model, const LoraOptions& options);

bool has_lora(const CausalLMImpl& model);
// Switches the adapters off (the model computes as its base: the NF4
// weights dequantised as always) or back on. Nothing is freed or copied:
// a DPO reference that costs no memory (adapters start at zero, so the base
// is the starting model).
void set_lora_enabled(CausalLMImpl& model, bool on);
// What the adapted projections add: the trained adapters, nothing (the
// base), or the frozen copies freeze_reference_adapters made, without
// dropout (the starting model when the adapters started from a folder).
enum class LoraMode { kOn, kOff, kReference };
void set_lora_mode(CausalLMImpl& model, LoraMode mode);
// Copies every adapter's A and B as they are now into frozen tensors beside
// them (same device and dtype; not parameters: not trained, saved or
// sharded) for LoraMode::kReference. Returns their bytes; 0 without
// adapters. drop_reference_adapters frees them (and leaves kReference).
std::int64_t freeze_reference_adapters(CausalLMImpl& model);
void drop_reference_adapters(CausalLMImpl& model);
LoraFootprint lora_footprint(const CausalLMImpl& model);
// The adapter tensors (A and B of every adapted module), then a sequence
// classifier's score head: what the adapters train and PEFT saves.
std::vector<torch::Tensor> lora_parameters(const CausalLMImpl& model);
// modules_to_save's tensors: the embedding, then an untied head.
std::vector<torch::Tensor> whole_module_parameters(const CausalLMImpl& model);
// Block `layer`'s adapters and the storage of its NF4 projections (packed
// codes and both levels of scales): what ZeRO-3 shards with the block.
std::vector<torch::Tensor> lora_layer_tensors(const CausalLMImpl& model, std::size_t layer);

// Folds (alpha / r) B A into the base weights (dequantising NF4 ones into
// `dtype`, the compute dtype), then removes the adapters and the NF4
// storage: the model becomes a plain dense model giving the same outputs.
// FailedPrecondition without adapters.
Status merge_lora(CausalLMImpl& model, torch::Dtype dtype);

// Writes dir/adapter_config.json and dir/adapter_model.safetensors (PEFT
// layout; tensors in the adapters' dtype) atomically: into dir + ".tmp",
// which then replaces dir. `base_model` goes to base_model_name_or_path. A
// sequence classifier's is PEFT's SEQ_CLS task, its score saved whole
// (modules_to_save), as PeftModel loads it over
// AutoModelForSequenceClassification.
Status save_peft_adapter(const CausalLMImpl& model, const std::string& dir, const std::string& base_model);

// Reads a PEFT adapter folder (adapter_config.json with
// adapter_model.safetensors, or PEFT's older adapter_model.bin) into the
// attached adapters: every adapter tensor must be present with shape (r, in) / (out, r); the file's
// lora_alpha sets the scale. Errors name the file and tensor.
Status load_peft_adapter(CausalLMImpl& model, const std::string& dir);

// A PEFT adapter folder's adapter_config.json as options to attach adapters
// that load_peft_adapter then fills: r, lora_alpha and target_modules (a
// list of names, or "all-linear"; empty targets = every linear of the
// blocks), and base_model_name_or_path into `base_model` when given.
// InvalidArgument naming the file and key for what Tailor's adapters do not
// compute (peft_type other than LORA, use_dora, use_rslora, bias other than
// "none", rank_pattern or alpha_pattern, a regex
// target_modules) and for a sequence classifier's adapter (SEQ_CLS: a
// reward model scores text and has no head to generate from or export);
// NotFound when the file is missing.
Result<LoraOptions> read_peft_config(const std::string& dir, std::string* base_model = nullptr);

// PEFT's tensor name of layer `layer`'s adapter on `module`
// ("self_attn.q_proj", "mlp.c_proj", ...), `which` "lora_A" or "lora_B".
std::string peft_tensor_name(const dsl::ModelArch& arch, std::int64_t layer, const std::string& module,
                             const std::string& which);

}  // namespace tailor::runner
