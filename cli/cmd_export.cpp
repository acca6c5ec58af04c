// `tailor export MODEL_DIR|JOB_ID -o DIR`: a job id is resolved through
// tailord to its output folder; the export is tailor-runner's (it links
// LibTorch, this CLI does not).
#include <ostream>

#include "cli/commands.h"
#include "cli/model_target.h"

namespace tailor::cli {
namespace {

constexpr const char* kExportHelp = R"(usage: tailor export MODEL_DIR|JOB_ID -o DIR [OPTIONS]
       tailor export MODEL_DIR|JOB_ID --format gguf -o FILE [--outtype T] [OPTIONS]

Writes a trained model as one Hugging Face folder (config.json, safetensors,
generation_config.json, the tokenizer's files and the chat template training
used) that transformers, vLLM and llama.cpp's converter load; or, with
--format gguf, as one GGUF file that llama.cpp loads as it is (llama.cpp's
metadata and tensor layout, the tokenizer with the ids training used, the
chat template) and, beside it, FILE's name with .Modelfile for Ollama
(`ollama create NAME -f` it: the chat template training used as Ollama's
Go template, stop words, the model's sampling defaults). A LoRA or QLoRA
run's adapter is merged into its base first, in fp32, and the result
rounded once into the chosen type. MODEL_DIR is a
model folder, a PEFT adapter folder or a run's output folder; JOB_ID is a
tailord job that succeeded, whose output folder is read where tailord
wrote it. GGUF takes every family: llama, mistral, mixtral, qwen2, qwen3,
gemma2, gemma3, gpt2, gpt_neox and phi3.

options:
  -o, --out PATH       the folder (safetensors) or file (gguf) to write;
                       refused when it exists, unless --force
  --adapter DIR        a PEFT adapter folder to merge over MODEL_DIR
  --format F           safetensors (default) or gguf
  --dtype D            safetensors: auto (default: the base folder's
                       torch_dtype, else fp32), fp32, bf16 or fp16
  --outtype T          gguf: f16 (default), bf16, f32 or q8_0 (vectors stay
                       f32; q8_0 rows that are not whole blocks of 32 are f16)
  --quantize Q         gguf: a smaller type (Q4_K_M, Q5_K_M, ...) made by
                       llama.cpp's llama-quantize from the --outtype file
                       (found as $TAILOR_LLAMA_QUANTIZE or on PATH; refused
                       when there is none)
  --no-modelfile       gguf: no Ollama Modelfile beside the file
  --force              replace PATH (and its Modelfile) when it exists
  --output FORMAT      text (default: a summary on stderr) or json
)";

const std::vector<FlagSpec> kExportFlags = {{"out", true, false, 'o'}, {"adapter", true}, {"format", true},
                                            {"dtype", true},           {"outtype", true}, {"quantize", true},
                                            {"no-modelfile", false},   {"force", false},  {"output", true}};

}  // namespace

int run_export(const Argv& argv, Streams io) {
  return run_on_model({"export", kExportHelp, kExportFlags, "tailor-runner", "TAILOR_RUNNER", "export"}, argv, io);
}

}  // namespace tailor::cli
