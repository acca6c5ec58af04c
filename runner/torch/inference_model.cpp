#include "runner/torch/inference_model.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/text.h"
#include "dsl/chat_records.h"
#include "dsl/model_family.h"
#include "runner/data/prompt_tokens.h"
#include "runner/device_choice.h"
#include "runner/torch/cuda_kernels.h"
#include "runner/torch/hf_checkpoint.h"
#include "runner/torch/lora.h"
#include "runner/torch_probe.h"

namespace tailor::runner {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

bool has_file(const fs::path& dir, const char* name) {
  std::error_code ec;
  return fs::is_regular_file(dir / name, ec);
}

bool has_tokenizer_files(const fs::path& dir) {
  return has_file(dir, "tokenizer.json") || has_file(dir, "tokenizer.model");
}

Result<std::string> read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::not_found("cannot open " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// An adapter folder and the base its config names.
Result<ModelSources> adapter_sources(const fs::path& adapter) {
  std::string base;
  TAILOR_RETURN_IF_ERROR(read_peft_config(adapter.string(), &base).status());
  std::error_code ec;
  if (base.empty() || !fs::is_regular_file(fs::path(base) / "config.json", ec)) {
    return Status::invalid_argument(
        (adapter / "adapter_config.json").string() + ": base_model_name_or_path " +
        (base.empty() ? std::string("is not given") : "\"" + base + "\" is not a model folder on this machine") +
        "; name the base model folder and pass this one with --adapter");
  }
  ModelSources s{base, adapter.string(), has_tokenizer_files(adapter) ? adapter.string() : base};
  return s;
}

// eos_token_id of a config file: a number, a list of numbers or absent.
void add_ids(const fs::path& file, std::vector<std::int32_t>& ids) {
  auto text = read_text(file);
  if (!text.is_ok()) return;
  const Json j = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("eos_token_id")) return;
  const Json& e = j["eos_token_id"];
  if (e.is_number_integer()) ids.push_back(e.get<std::int32_t>());
  if (e.is_array()) {
    for (const Json& x : e) {
      if (x.is_number_integer()) ids.push_back(x.get<std::int32_t>());
    }
  }
}

Result<torch::Dtype> dtype_of(const std::string& name, const Json& config, const torch::Device& device,
                              std::string& chosen) {
  std::string n = name;
  if (n == "auto") {
    n = "fp32";
    const std::string key = config.contains("torch_dtype") ? "torch_dtype" : "dtype";
    if (device.is_cuda() && config.contains(key) && config[key].is_string()) {
      const std::string folder = config[key].get<std::string>();
      if (folder == "bfloat16") n = "bf16";
      if (folder == "float16") n = "fp16";
    }
  }
  chosen = n;
  if (n == "fp32") return torch::kFloat32;
  if (n == "bf16") return torch::kBFloat16;
  if (n == "fp16") return torch::kFloat16;
  return Status::invalid_argument("dtype \"" + name + "\": expected auto, fp32, bf16 or fp16");
}

}  // namespace

Result<ModelSources> resolve_model_sources(const std::string& target, const std::string& adapter) {
  const fs::path dir(target);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::invalid_argument(target + ": no such folder");
  if (!adapter.empty()) {
    if (!has_file(dir, "config.json")) {
      return Status::invalid_argument(target + ": --adapter goes over a model folder (config.json), and " + target +
                                      " has none");
    }
    TAILOR_RETURN_IF_ERROR(read_peft_config(adapter).status());
    return ModelSources{target, adapter, has_tokenizer_files(adapter) ? adapter : target};
  }
  if (has_file(dir, "config.json")) return ModelSources{target, "", target};
  if (has_file(dir, "adapter_config.json")) return adapter_sources(dir);
  if (has_file(dir / "model", "config.json")) return ModelSources{(dir / "model").string(), "", (dir / "model").string()};
  if (has_file(dir / "adapter", "adapter_config.json")) return adapter_sources(dir / "adapter");
  return Status::invalid_argument(target +
                                  ": not a model folder (config.json), an adapter folder (adapter_config.json) or a "
                                  "run's output (model/ or adapter/); did the run finish?");
}

Result<InferenceDevice> choose_inference_device(const std::string& choice) {
  TAILOR_RETURN_IF_ERROR(select_cuda_kernels());
  const int cuda_devices = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  TAILOR_ASSIGN_OR_RETURN(const DeviceChoice d,
                          choose_device(choice, dsl::TrainDevice::kAuto, /*plan_for_gpus=*/cuda_devices > 0, cuda_devices,
                                        /*cuda_built=*/cuda_path_built(), std::getenv("CUDA_VISIBLE_DEVICES")));
  InferenceDevice out;
  out.device = d.cuda ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(d.index)) : torch::Device(torch::kCPU);
  out.name = d.name();
  return out;
}

Result<InferenceModel> open_inference_model(const ModelSources& src, const torch::Device& device,
                                            const std::string& dtype) {
  const fs::path config_path = fs::path(src.base) / "config.json";
  TAILOR_ASSIGN_OR_RETURN(const std::string config_text, read_text(config_path));
  dsl::ModelArch arch;
  std::vector<std::string> errors;
  if (!dsl::arch_from_hf_config(config_text, config_path.string(), arch, errors)) {
    return Status::invalid_argument(errors.empty() ? config_path.string() + ": unreadable" : errors.front());
  }
  const Json config = Json::parse(config_text, nullptr, /*allow_exceptions=*/false);
  // A reward model (training.method reward) scores text; it has no
  // vocabulary head to generate or convert.
  if (config.is_object() && config.contains("architectures") && config["architectures"].is_array()) {
    for (const Json& a : config["architectures"]) {
      const std::string name = a.is_string() ? a.get<std::string>() : "";
      if (name.ends_with("ForSequenceClassification")) {
        return Status::invalid_argument(src.base + " is a sequence classifier (" + name +
                                        ", e.g. a reward model): it scores text and has no language-model head to "
                                        "generate from or export; load it with transformers' "
                                        "AutoModelForSequenceClassification");
      }
    }
  }
  InferenceModel m;
  TAILOR_ASSIGN_OR_RETURN(const torch::Dtype dt, dtype_of(dtype, config, device, m.dtype_name));
  try {
    m.model = CausalLM(arch, /*checkpoint_every=*/0);
    m.model->eval();
    TAILOR_RETURN_IF_ERROR(load_hf_weights(m.model, src.base));
    m.model->to(device, dt);
    if (!src.adapter.empty()) {
      TAILOR_ASSIGN_OR_RETURN(LoraOptions lo, read_peft_config(src.adapter));
      lo.adapter_dtype = dt;
      TAILOR_RETURN_IF_ERROR(attach_lora(*m.model, lo).prefixed(src.adapter));
      TAILOR_RETURN_IF_ERROR(load_peft_adapter(*m.model, src.adapter));
    }
  } catch (const c10::Error& e) {
    return Status::internal(std::string("loading ") + src.base + ": " + e.what_without_backtrace());
  }

  if (has_tokenizer_files(src.tokenizer)) {
    dsl::ModelSpec spec;
    spec.path = src.tokenizer;
    spec.arch = arch;
    TAILOR_ASSIGN_OR_RETURN(m.tokenizer, data::make_tokenizer(spec));
    dsl::DataSpec data;
    if (auto chat = data::load_chat_setup(data, src.tokenizer); chat.is_ok()) m.chat = std::move(chat).value();
  }
  add_ids(fs::path(src.base) / "generation_config.json", m.stop_ids);
  add_ids(config_path, m.stop_ids);
  if (m.tokenizer) {
    if (m.tokenizer->eos_id() >= 0) m.stop_ids.push_back(m.tokenizer->eos_id());
    if (m.chat) {
      if (auto eot = data::template_end_of_turn(*m.chat, *m.tokenizer)) m.stop_ids.push_back(*eot);
    }
  }
  std::sort(m.stop_ids.begin(), m.stop_ids.end());
  m.stop_ids.erase(std::unique(m.stop_ids.begin(), m.stop_ids.end()), m.stop_ids.end());
  return m;
}

Result<std::vector<std::int32_t>> prompt_ids_of_text(const InferenceModel& m, const std::string& text) {
  if (!m.tokenizer) {
    return Status::invalid_argument("the model folder has no tokenizer (tokenizer.json or tokenizer.model); give "
                                    "token ids instead");
  }
  return data::text_prompt_ids(*m.tokenizer, text);
}

Result<std::vector<std::int32_t>> prompt_ids_of_conversation(const InferenceModel& m, const std::string& conversation) {
  if (!m.tokenizer) return Status::invalid_argument("the model folder has no tokenizer (tokenizer.json or tokenizer.model)");
  if (!m.chat) {
    return Status::invalid_argument("the model folder has no chat template (chat_template.jinja or "
                                    "tokenizer_config.json's chat_template); give a plain prompt instead");
  }
  return data::conversation_prompt_ids(*m.chat, *m.tokenizer, conversation);
}

Status check_conversation(const nlohmann::ordered_json& record) {
  if (!record.is_object() || !record.contains("messages") || !record["messages"].is_array()) {
    return Status::invalid_argument("expected a list of turns or an object with \"messages\"");
  }
  const auto& turns = record["messages"];
  if (turns.empty()) return Status::invalid_argument("messages: the conversation has no turns");
  const auto& roles = dsl::template_roles();
  for (std::size_t i = 0; i < turns.size(); ++i) {
    const std::string where = "messages[" + std::to_string(i) + "]";
    const auto& t = turns[i];
    if (!t.is_object()) return Status::invalid_argument(where + ": a turn is an object with role and content");
    if (!t.contains("role") || !t["role"].is_string() ||
        std::find(roles.begin(), roles.end(), t["role"].get<std::string>()) == roles.end()) {
      return Status::invalid_argument(where + ".role: expected one of " + join(roles, ", "));
    }
    if (t.contains("content") && !t["content"].is_string() && !t["content"].is_null() && !t["content"].is_array()) {
      return Status::invalid_argument(where + ".content: expected a string, null or a list of parts");
    }
  }
  if (record.contains("tools") && !record["tools"].is_array() && !record["tools"].is_null()) {
    return Status::invalid_argument("tools: expected a list");
  }
  return Status::ok();
}

}  // namespace tailor::runner
