#include "runner/torch/export_command.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "runner/torch/hf_checkpoint.h"
#include "runner/torch/inference_model.h"
#include "runner/torch/lora.h"
#include "runner/torch/model_command.h"

namespace tailor::runner {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

constexpr int kOk = 0, kInvalid = 1, kFailed = 5;

constexpr const char* kHelp = R"(usage: tailor-runner export MODEL -o DIR [OPTIONS]

Writes a trained model as one Hugging Face folder: config.json, the weights
as safetensors (shards past 5 GB), generation_config.json, the tokenizer's
files and the chat template training used. An adapter is merged into the
base first, in fp32, and the result rounded once into the chosen dtype.
MODEL is a model folder, a PEFT adapter folder whose base_model_name_or_path
is a folder here, or a run's output folder (its model/, else its adapter/).

options:
  -o, --out DIR        the folder to write (refused when it exists, unless --force)
  --adapter DIR        a PEFT adapter folder to merge over MODEL
  --format F           safetensors (default); gguf is not built yet
  --dtype D            auto (default: the base folder's torch_dtype, else
                       fp32), fp32, bf16 or fp16
  --force              replace DIR when it exists
  --output FORMAT      text (default: a summary on stderr) or json (stdout)

exit codes: 0 done, 1 bad input, 2 bad command line, 5 writing failed
)";

// The base folder's torch_dtype (or transformers 5's "dtype") as a name
// open_inference_model takes; fp32 when it says nothing Tailor writes.
std::string folder_dtype(const std::string& base) {
  std::ifstream in(fs::path(base) / "config.json");
  const Json config = Json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) return "fp32";
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (!config.contains(key) || !config[key].is_string()) continue;
    const std::string d = config[key].get<std::string>();
    if (d == "bfloat16") return "bf16";
    if (d == "float16") return "fp16";
    return "fp32";
  }
  return "fp32";
}

torch::Dtype torch_dtype(const std::string& name) {
  if (name == "bf16") return torch::kBFloat16;
  if (name == "fp16") return torch::kFloat16;
  return torch::kFloat32;
}

std::uintmax_t folder_bytes(const fs::path& dir) {
  std::uintmax_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec)) total += e.file_size(ec);
  }
  return total;
}

}  // namespace

int run_export_command(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  const ModelCommand command{"export", kHelp, out, err};
  int exit_code = kOk;
  const auto parsed = command.parse(argv,
                                    {{"out", true, false, 'o'}, {"adapter", true}, {"format", true},
                                     {"dtype", true}, {"force", false}, {"output", true}},
                                    exit_code);
  if (!parsed) return exit_code;
  const Args& args = *parsed;
  auto usage = [&](const std::string& why) { return command.usage(why); };
  auto fail = [&](int code, const std::string& why) { return command.fail(code, why); };
  if (!args.has("out")) return usage("-o DIR: the folder to write is required");
  const std::string format = args.get("format", "safetensors");
  const std::string output = args.get("output", "text");
  if (output != "text" && output != "json") return usage("--output: expected text or json, got \"" + output + "\"");
  if (format == "gguf") {
    return fail(kInvalid, "--format gguf is not built yet; export safetensors and convert that folder with llama.cpp's "
                          "convert_hf_to_gguf.py");
  }
  if (format != "safetensors") return usage("--format: expected safetensors, got \"" + format + "\"");
  const std::string dtype = args.get("dtype", "auto");
  if (dtype != "auto" && dtype != "fp32" && dtype != "bf16" && dtype != "fp16") {
    return usage("--dtype: expected auto, fp32, bf16 or fp16, got \"" + dtype + "\"");
  }
  const fs::path dest = fs::path(args.get("out")).lexically_normal();
  std::error_code ec;
  if (fs::exists(dest, ec) && !args.has("force")) {
    return fail(kInvalid, dest.string() + " exists; choose another folder, or give --force to replace it");
  }

  auto sources = resolve_model_sources(args.positional()[0], args.get("adapter"));
  if (!sources.is_ok()) return fail(kInvalid, sources.status().message());
  const auto start = std::chrono::steady_clock::now();
  // fp32 on the host whatever is asked: the merge adds in fp32 and the
  // weights are rounded once, at the end.
  auto model = open_inference_model(*sources, torch::kCPU, "fp32");
  if (!model.is_ok()) return fail(kInvalid, model.status().message());
  const std::string chosen = dtype == "auto" ? folder_dtype(sources->base) : dtype;
  HfExport extras;
  if (model->tokenizer) {
    extras.tokens = {model->tokenizer->bos_id(), model->tokenizer->eos_id()};
    extras.tokenizer_from = sources->tokenizer;
  }
  if (model->chat) extras.chat_template = model->chat->template_text;
  try {
    if (!sources->adapter.empty()) {
      if (Status s = merge_lora(*model->model, torch::kFloat32); !s.is_ok()) return fail(kFailed, s.message());
    }
    model->model->to(torch_dtype(chosen));
  } catch (const c10::Error& e) {
    return fail(kFailed, std::string("converting: ") + e.what_without_backtrace());
  }
  if (Status s = save_hf_model(model->model, dest.string(), kDefaultMaxShardBytes, extras); !s.is_ok()) {
    return fail(kFailed, s.message());
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::uintmax_t bytes = folder_bytes(dest);
  if (output == "json") {
    Json j;
    j["dir"] = dest.string();
    j["format"] = format;
    j["dtype"] = chosen;
    j["base"] = sources->base;
    j["adapter"] = sources->adapter.empty() ? Json() : Json(sources->adapter);
    j["merged"] = !sources->adapter.empty();
    j["bytes"] = bytes;
    j["seconds"] = seconds;
    out << j.dump() << "\n";
  } else {
    char line[160];
    std::snprintf(line, sizeof line, " as %s safetensors (%.1f MB) in %.1f s\n", chosen.c_str(), bytes / 1e6, seconds);
    err << "exported " << sources->base << (sources->adapter.empty() ? "" : " with " + sources->adapter + " merged")
        << " to " << dest.string() << line;
  }
  return kOk;
}

}  // namespace tailor::runner
