// A trained model opened for inference (generation.h): what a user points
// at resolved to a base folder and an adapter, the weights loaded on a
// device and dtype, the adapter attached unmerged, the tokenizer, the chat
// template training used, and the ids generation stops at.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "runner/data/chat_tokens.h"
#include "runner/data/tokenizer.h"
#include "runner/torch/model.h"

namespace tailor::runner {

struct ModelSources {
  std::string base;     // a Hugging Face model folder (config.json + safetensors)
  std::string adapter;  // a PEFT adapter folder over `base`; empty: none
  // Where the tokenizer files and chat template are read: the adapter's
  // folder when it has them (training writes them there), else the base.
  std::string tokenizer;
};

// What `target` names, with an explicit `adapter` (may be empty):
//   a model folder (config.json)             -> that base;
//   an adapter folder (adapter_config.json)  -> that adapter over its
//       base_model_name_or_path, which must be a folder here;
//   a run's output folder (tailor run --out, a tailord job's output_dir)
//       -> its model/ when there is one (a full fine-tune, or merged), else
//       its adapter/ as above.
// An explicit adapter goes over a model folder only. InvalidArgument naming
// the folder and what was looked for otherwise.
Result<ModelSources> resolve_model_sources(const std::string& target, const std::string& adapter);

struct InferenceModel {
  CausalLM model{nullptr};
  // Null when the folders hold no tokenizer files (ids in, ids out).
  std::unique_ptr<data::Tokenizer> tokenizer;
  // The chat template (chat_template.jinja or tokenizer_config.json's);
  // unset when there is none.
  std::optional<data::ChatSetup> chat;
  // generation_config.json's and config.json's eos_token_id (a number or a
  // list), the tokenizer's EOS, and the special token the chat template
  // writes after an assistant turn (<|im_end|>, <|eot_id|>, <end_of_turn>).
  std::vector<std::int32_t> stop_ids;
  std::string dtype_name;  // "fp32", "bf16", "fp16"
};

// The device a command names: "auto" (CUDA device 0 where there is one,
// else the CPU), "cpu", "cuda" or "cuda:N"; `name` is how it is shown
// ("cpu", "cuda:0"). InvalidArgument naming what is missing (no GPU, a
// build without the CUDA path).
struct InferenceDevice {
  torch::Device device{torch::kCPU};
  std::string name;
};
Result<InferenceDevice> choose_inference_device(const std::string& choice);

// `dtype`: "auto" (the folder's torch_dtype on a GPU, fp32 on the CPU,
// where bf16 matmuls are slower), "fp32", "bf16" or "fp16". InvalidArgument
// for a bad config.json, dtype or adapter (naming the file and tensor),
// the loaders' errors otherwise. Never throws.
Result<InferenceModel> open_inference_model(const ModelSources& sources, const torch::Device& device,
                                            const std::string& dtype);

// The prompt's ids: plain text as training frames a document (the
// tokenizer's BOS, then the text); a conversation (a JSON object with
// "messages" and optionally "tools", as a chat data record) rendered with
// the chat template and its generation prompt, then encoded whole.
// InvalidArgument without a tokenizer or template, or when the template
// raises.
Result<std::vector<std::int32_t>> prompt_ids_of_text(const InferenceModel& m, const std::string& text);
Result<std::vector<std::int32_t>> prompt_ids_of_conversation(const InferenceModel& m, const std::string& conversation);

// Whether `record` is a conversation a template can be given: "messages" a
// non-empty list of turns, each an object with a role a template is given
// (dsl/chat_records.h) and content a string, null or a list of parts;
// "tools" absent, null or a list. InvalidArgument naming the key path
// ("messages[2].role: expected one of ...") otherwise.
Status check_conversation(const nlohmann::ordered_json& record);

}  // namespace tailor::runner
