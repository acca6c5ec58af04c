#include "runner/torch/export_command.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "platform/executable.h"
#include "platform/files.h"
#include "platform/process.h"
#include "runner/data/ollama_template.h"
#include "runner/data/prompt_tokens.h"
#include "runner/io/ollama_modelfile.h"
#include "runner/torch/gguf_export.h"
#include "runner/torch/hf_checkpoint.h"
#include "runner/torch/inference_model.h"
#include "runner/torch/lora.h"
#include "runner/torch/model_command.h"

namespace tailor::runner {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

constexpr const char* kExportHelp = R"(usage: tailor-runner export MODEL -o DIR [OPTIONS]
       tailor-runner export MODEL --format gguf -o FILE [--outtype T] [OPTIONS]

Writes a trained model as one Hugging Face folder: config.json, the weights
as safetensors (shards past 5 GB), generation_config.json, the tokenizer's
files and the chat template training used. With --format gguf, writes one
GGUF file that llama.cpp loads: llama.cpp's architecture metadata and
tensor layout, the tokenizer with the ids training used, and the chat
template; beside it, FILE's name with .Modelfile for Ollama (FROM the
file, TEMPLATE: the chat template as a Go template, stop words, the
folder's sampling defaults), so `ollama create NAME -f FILE.Modelfile`
takes it as it is. An adapter is merged into the base first, in fp32, and
the result rounded once into the chosen type.
MODEL is a model folder, a PEFT adapter folder whose base_model_name_or_path
is a folder here, or a run's output folder (its model/, else its adapter/).

options:
  -o, --out PATH       the folder (safetensors) or file (gguf) to write;
                       refused when it exists, unless --force
  --adapter DIR        a PEFT adapter folder to merge over MODEL
  --format F           safetensors (default) or gguf
  --dtype D            safetensors: auto (default: the base folder's
                       torch_dtype, else fp32), fp32, bf16 or fp16
  --outtype T          gguf: f16 (default), bf16, f32 or q8_0 (vectors stay
                       f32; q8_0 rows that are not whole blocks of 32 are f16)
  --quantize Q         gguf: a smaller type (Q4_K_M, Q5_K_M, ...) made by
                       llama.cpp's llama-quantize from the --outtype file
                       (found as $TAILOR_LLAMA_QUANTIZE, beside this
                       program or on PATH; refused when there is none)
  --no-modelfile       gguf: no Ollama Modelfile beside the file
  --force              replace PATH (and its Modelfile) when it exists
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

// --quantize: llama.cpp's llama-quantize and the type it is asked for.
struct Quantize {
  std::string type;  // "Q4_K_M"; empty: none
  std::string tool;  // its path
};

// `tool IN OUT.tmp TYPE`, renamed to OUT once it succeeded; its output in
// OUT.quantize.log, whose end is the error when it fails.
Status run_llama_quantize(const Quantize& q, const std::string& in, const std::string& out) {
  const std::string tmp = out + ".tmp", log = out + ".quantize.log";
  std::error_code ec;
  fs::remove(log, ec);
  platform::LaunchRequest launch;
  launch.argv = {q.tool, in, tmp, q.type};
  launch.log_path = log;
  launch.own_process_group = false;  // Ctrl-C stops it with this command
  auto child = platform::launch_process(launch);
  if (!child.is_ok()) return Status::io_error("llama-quantize: " + child.status().message());
  auto exit = platform::wait_child(child->pid);
  std::ifstream in_log(log);
  std::stringstream text;
  text << in_log.rdbuf();
  std::string said = text.str();
  if (said.size() > 2000) said = "..." + said.substr(said.size() - 2000);
  if (!exit.is_ok() || exit->code != 0) {
    fs::remove(tmp, ec);
    const std::string how = !exit.is_ok()          ? exit.status().message()
                            : exit->signal != 0    ? "was killed by signal " + std::to_string(exit->signal)
                                                   : "exited " + std::to_string(exit->code);
    return Status::io_error(q.tool + " " + how + " (its output stays in " + log + "):\n" + said);
  }
  fs::remove(log, ec);
  fs::rename(tmp, out, ec);
  if (ec) return Status::io_error("renaming " + tmp + " to " + out + ": " + ec.message());
  return Status::ok();
}

// FILE.gguf's Modelfile: FILE.Modelfile beside it.
fs::path modelfile_path(const fs::path& gguf) {
  return gguf.parent_path() / ((gguf.has_extension() ? gguf.stem() : gguf.filename()).string() + ".Modelfile");
}

struct ModelfileWritten {
  bool with_template = false;
  std::vector<std::string> stops;
  std::vector<std::string> notes;  // where Ollama renders otherwise, or why it has no template of Tailor's
};

// The Modelfile for the GGUF at `gguf`: the chat template as Ollama's Go
// template when it is a per-role layout (else none, and Ollama picks one
// of its own by likeness to the file's chat template: said in `notes`),
// {{ .Prompt }} for a model without one, so prompts reach it as written.
Result<ModelfileWritten> write_modelfile(const InferenceModel& model, const ModelSources& sources, const fs::path& gguf,
                                         bool adds_bos) {
  ModelfileWritten w;
  io::Modelfile m;
  m.comments = {"Ollama's Modelfile for " + gguf.filename().string() + ", written by tailor export:",
                "  ollama create NAME -f " + modelfile_path(gguf).filename().string()};
  m.from = "./" + gguf.filename().string();
  if (!model.chat) {
    m.template_text = "{{ .Prompt }}";
    w.with_template = true;
    w.notes.push_back("no chat template: prompts reach the model as written");
  } else {
    data::OllamaTemplateOptions o;
    o.variables = model.chat->variables;
    if (o.variables.contains("bos_token") && o.variables["bos_token"].is_string()) {
      o.bos = o.variables["bos_token"].get<std::string>();
    }
    o.add_bos = adds_bos;
    auto t = data::ollama_template(model.chat->chat_template, o);
    if (t.is_ok()) {
      m.template_text = t->text;
      w.with_template = true;
      w.stops = t->stops;
      w.notes = t->notes;
      if (model.chat->template_text.find("strftime_now") != std::string::npos) {
        w.notes.push_back("the chat template writes today's date; the Ollama template keeps the export's");
      }
    } else {
      w.notes.push_back(t.status().message() +
                        "; without TEMPLATE, Ollama picks the template of its own library nearest to the file's "
                        "tokenizer.chat_template");
      m.comments.push_back("No TEMPLATE: " + t.status().message());
    }
  }
  for (const std::string& stop : w.stops)
    m.parameters.emplace_back("stop", stop);
  for (auto& p : io::ollama_sampling_parameters(sources.base))
    m.parameters.push_back(std::move(p));
  auto text = io::modelfile_text(m);
  if (!text.is_ok() && w.with_template) {
    // A template the parser cannot carry: the Modelfile without it.
    w.notes.push_back(text.status().message() + "; the Modelfile has no TEMPLATE");
    m.template_text.clear();
    w.with_template = false;
    text = io::modelfile_text(m);
  }
  if (!text.is_ok()) return text.status();
  TAILOR_RETURN_IF_ERROR(platform::write_file_atomic(modelfile_path(gguf).string(), *text));
  return w;
}

// The GGUF branch of the command: the merged fp32 model written by
// export_gguf, with the tokenizer's ids and the chat template training used.
int write_gguf_file(const InferenceModel& model, const ModelSources& sources, const fs::path& dest,
                    const std::string& outtype, const Quantize& quantize, bool modelfile, const std::string& output,
                    std::chrono::steady_clock::time_point start, std::ostream& out, const ModelCommand& command) {
  GgufExportOptions o;
  o.outtype = outtype;
  const fs::path base = fs::path(sources.base).lexically_normal();
  o.name = base.has_filename() ? base.filename().string() : base.parent_path().filename().string();
  if (model.tokenizer) {
    o.tokenizer_folder = sources.tokenizer;
    o.bos = model.tokenizer->bos_id();
    o.eos = model.tokenizer->eos_id();
    o.pad = model.tokenizer->pad_id();
    if (model.chat) {
      if (auto eot = data::template_end_of_turn(*model.chat, *model.tokenizer)) o.eot = *eot;
    }
  }
  if (model.chat) o.chat_template = model.chat->template_text;
  std::error_code ec;
  if (fs::path parent = dest.parent_path(); !parent.empty()) {
    fs::create_directories(parent, ec);
    if (ec) return command.fail(kModelCommandFailed, "cannot create " + parent.string() + ": " + ec.message());
  }
  // With --quantize, the --outtype file is llama-quantize's input, beside
  // the destination, and removed after.
  const std::string written = quantize.tool.empty() ? dest.string() : dest.string() + ".unquantized.gguf";
  auto summary = export_gguf(model.model, written, o);
  if (!summary.is_ok()) {
    const StatusCode code = summary.status().code();
    const bool bad_input = code == StatusCode::kInvalidArgument || code == StatusCode::kNotFound;
    return command.fail(bad_input ? kModelCommandInvalid : kModelCommandFailed, summary.status().message());
  }
  if (!quantize.tool.empty()) {
    Status s = run_llama_quantize(quantize, written, dest.string());
    fs::remove(written, ec);
    if (!s.is_ok()) return command.fail(kModelCommandFailed, s.message());
  }
  std::optional<ModelfileWritten> ollama;
  if (modelfile) {
    auto made = write_modelfile(model, sources, dest, summary->adds_bos);
    if (!made.is_ok()) {
      return command.fail(kModelCommandFailed, "writing " + modelfile_path(dest).string() + ": " +
                                                   made.status().message() + " (the GGUF file is written)");
    }
    ollama = std::move(*made);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::uintmax_t bytes = fs::file_size(dest, ec);
  if (output == "json") {
    Json j;
    j["file"] = dest.string();
    j["modelfile"] = ollama ? Json(modelfile_path(dest).string()) : Json();
    if (ollama) {
      j["ollama"] = {{"template", ollama->with_template}, {"stops", ollama->stops}, {"notes", ollama->notes}};
    }
    j["format"] = "gguf";
    j["outtype"] = outtype;
    j["quantize"] = quantize.type.empty() ? Json() : Json(quantize.type);
    j["architecture"] = summary->arch;
    j["tokenizer"] = {{"model", summary->vocab_model}, {"pre", summary->pre}};
    j["chat_template"] = !o.chat_template.empty();
    j["tensors"] = summary->tensors;
    j["f16_fallback_tensors"] = summary->fallback_f16;
    j["warnings"] = summary->warnings;
    j["base"] = sources.base;
    j["adapter"] = sources.adapter.empty() ? Json() : Json(sources.adapter);
    j["merged"] = !sources.adapter.empty();
    j["bytes"] = bytes;
    j["seconds"] = seconds;
    out << j.dump() << "\n";
    return kModelCommandOk;
  }
  char line[200];
  const std::string type = quantize.type.empty() ? outtype : quantize.type + " (llama-quantize from " + outtype + ")";
  std::snprintf(line, sizeof line, " as GGUF %s (%s, %lld tensors, %.1f MB) in %.1f s\n", type.c_str(),
                summary->arch.c_str(), static_cast<long long>(summary->tensors), bytes / 1e6, seconds);
  command.err << "exported " << sources.base << (sources.adapter.empty() ? "" : " with " + sources.adapter + " merged")
              << " to " << dest.string() << line;
  if (summary->fallback_f16 > 0) {
    command.err << "  " << summary->fallback_f16 << " tensors are f16: their rows are not whole q8_0 blocks of 32\n";
  }
  for (const std::string& w : summary->warnings) command.err << "  warning: " << w << "\n";
  if (o.chat_template.empty()) command.err << "  no chat template: llama.cpp formats chats with its own default\n";
  if (ollama) {
    command.err << "  Ollama: " << modelfile_path(dest).string()
                << (ollama->with_template ? " (the chat template as its TEMPLATE)" : " (no TEMPLATE)")
                << "; ollama create NAME -f " << modelfile_path(dest).string() << "\n";
    for (const std::string& n : ollama->notes)
      command.err << "    " << n << "\n";
  }
  return kModelCommandOk;
}

}  // namespace

int run_export_command(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  const ModelCommand command{"export", kExportHelp, out, err};
  int exit_code = kModelCommandOk;
  const auto parsed = command.parse(argv,
                                    {{"out", true, false, 'o'},
                                     {"adapter", true},
                                     {"format", true},
                                     {"dtype", true},
                                     {"outtype", true},
                                     {"quantize", true},
                                     {"force", false},
                                     {"no-modelfile", false},
                                     {"output", true}},
                                    exit_code);
  if (!parsed) return exit_code;
  const Args& args = *parsed;
  auto usage = [&](const std::string& why) { return command.usage(why); };
  auto fail = [&](int code, const std::string& why) { return command.fail(code, why); };
  if (!args.has("out")) return usage("-o DIR: the folder to write is required");
  const std::string format = args.get("format", "safetensors");
  const std::string output = args.get("output", "text");
  if (output != "text" && output != "json") return usage("--output: expected text or json, got \"" + output + "\"");
  const bool gguf = format == "gguf";
  if (format != "safetensors" && !gguf) return usage("--format: expected safetensors or gguf, got \"" + format + "\"");
  if (gguf && args.has("dtype")) return usage("--dtype is for safetensors; a GGUF file's type is --outtype");
  if (!gguf && (args.has("outtype") || args.has("quantize") || args.has("no-modelfile"))) {
    return usage(std::string(args.has("outtype")    ? "--outtype"
                             : args.has("quantize") ? "--quantize"
                                                    : "--no-modelfile") +
                 " is for --format gguf");
  }
  const std::string outtype = args.get("outtype", "f16");
  if (outtype != "f32" && outtype != "f16" && outtype != "bf16" && outtype != "q8_0") {
    return usage("--outtype: expected f16, bf16, f32 or q8_0, got \"" + outtype + "\"");
  }
  Quantize quantize;
  if (args.has("quantize")) {
    quantize.type = args.get("quantize");
    if (quantize.type.empty() || quantize.type.find_first_not_of(
                                     "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos) {
      return usage("--quantize: expected a llama.cpp type name such as Q4_K_M, got \"" + quantize.type + "\"");
    }
    if (outtype == "q8_0") return usage("--quantize starts from an f16, bf16 or f32 file, not --outtype q8_0");
    auto tool = platform::find_executable("llama-quantize", "", "TAILOR_LLAMA_QUANTIZE");
    if (!tool.is_ok()) {
      return fail(kModelCommandInvalid,
                  "--quantize " + quantize.type + " needs llama.cpp's llama-quantize, which was not found (" +
                      tool.status().message() + "); export --outtype f16 and quantize the file with it");
    }
    quantize.tool = *tool;
  }
  const std::string dtype = args.get("dtype", "auto");
  if (dtype != "auto" && dtype != "fp32" && dtype != "bf16" && dtype != "fp16") {
    return usage("--dtype: expected auto, fp32, bf16 or fp16, got \"" + dtype + "\"");
  }
  const fs::path dest = fs::path(args.get("out")).lexically_normal();
  std::error_code ec;
  if (fs::exists(dest, ec) && !args.has("force")) {
    return fail(kModelCommandInvalid, dest.string() + " exists; choose another " + (gguf ? "file" : "folder") +
                                          ", or give --force to replace it");
  }
  if (gguf && fs::is_directory(dest, ec))
    return fail(kModelCommandInvalid, dest.string() + " is a folder; -o names the GGUF file");
  const bool modelfile = gguf && !args.has("no-modelfile");
  if (modelfile && fs::exists(modelfile_path(dest), ec) && !args.has("force")) {
    return fail(kModelCommandInvalid, modelfile_path(dest).string() +
                                          " exists (the Ollama Modelfile beside the file); choose another file, give "
                                          "--force to replace both, or --no-modelfile");
  }

  auto sources = resolve_model_sources(args.positional()[0], args.get("adapter"));
  if (!sources.is_ok()) return fail(kModelCommandInvalid, sources.status().message());
  const auto start = std::chrono::steady_clock::now();
  // fp32 on the host whatever is asked: the merge adds in fp32 and the
  // weights are rounded once, at the end.
  auto model = open_inference_model(*sources, torch::kCPU, "fp32");
  if (!model.is_ok()) return fail(kModelCommandInvalid, model.status().message());
  const std::string chosen = dtype == "auto" ? folder_dtype(sources->base) : dtype;
  HfExport extras;
  if (model->tokenizer) {
    extras.tokens = {model->tokenizer->bos_id(), model->tokenizer->eos_id()};
    extras.tokenizer_from = sources->tokenizer;
  }
  if (model->chat) extras.chat_template = model->chat->template_text;
  try {
    if (!sources->adapter.empty()) {
      if (Status s = merge_lora(*model->model, torch::kFloat32); !s.is_ok())
        return fail(kModelCommandFailed, s.message());
    }
    if (!gguf) model->model->to(torch_dtype(chosen));
  } catch (const c10::Error& e) {
    return fail(kModelCommandFailed, std::string("converting: ") + e.what_without_backtrace());
  }
  if (gguf) return write_gguf_file(*model, *sources, dest, outtype, quantize, modelfile, output, start, out, command);
  if (Status s = save_hf_model(model->model, dest.string(), kDefaultMaxShardBytes, extras); !s.is_ok()) {
    return fail(kModelCommandFailed, s.message());
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
  return kModelCommandOk;
}

}  // namespace tailor::runner
