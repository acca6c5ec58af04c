// A model as one GGUF file that llama.cpp loads: its family's metadata
// under llama.cpp's architecture name, the tensors under llama.cpp's names
// and in its layouts (Llama's q/k rows interleaved back for its RoPE,
// Gemma's norms as 1 + w, GPT-2's Conv1D weights transposed), the tokenizer
// (gguf_vocab.h) with the ids training used, and the chat template.
// Written as llama.cpp's convert_hf_to_gguf.py writes it, so that the two
// files' tensors are byte-equal for the same weights and type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "runner/torch/model.h"

namespace tailor::runner {

struct GgufExportOptions {
  std::string outtype = "f16";   // f32, f16, bf16 or q8_0 (1-D tensors stay f32)
  std::string name;              // general.name
  std::string tokenizer_folder;  // the folder of tokenizer.model or tokenizer.json
  std::int64_t bos = -1, eos = -1, pad = -1;
  std::int64_t eot = -1;         // the chat template's end of turn, where it differs from EOS
  std::string chat_template;     // tokenizer.chat_template (empty: none)
};

struct GgufExportSummary {
  std::string arch;             // general.architecture
  std::string vocab_model;      // tokenizer.ggml.model
  std::string pre;              // tokenizer.ggml.pre
  std::int64_t tensors = 0;
  // llama.cpp writes BOS before a prompt it tokenizes (the file's
  // add_bos_token, else its default for the tokenizer's type).
  bool adds_bos = false;
  std::int64_t fallback_f16 = 0;  // q8_0 asked, rows not a whole number of blocks: written f16, as the converter does
  // What llama.cpp will compute otherwise than Tailor and transformers,
  // said to the user (the converter drops these silently).
  std::vector<std::string> warnings;
};

// The families GGUF export knows: "llama, mistral, ...".
std::string gguf_family_names();

// Writes `model` (fp32, on the CPU, adapters merged) to `path` (through
// path.tmp, renamed at the end). InvalidArgument, before anything is
// written, for a family, outtype or architecture detail llama.cpp would
// read otherwise (named), and for tokenizer files it cannot take.
Result<GgufExportSummary> export_gguf(const CausalLM& model, const std::string& path, const GgufExportOptions& options);

}  // namespace tailor::runner
