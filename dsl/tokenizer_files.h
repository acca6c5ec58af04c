// Which tokenizer a model folder gives the job: the one rule that `tailor
// validate`/`plan`, tailord and tailor-runner apply, so that a folder whose
// tokenizer Tailor cannot read is an error before training, naming the
// file, and never a silent fall back to bytes.
#pragma once

#include <string>

#include "core/status.h"

namespace tailor::dsl {

enum class TokenizerKind {
  kBytes,          // no model folder (a preset or model.arch): byte-level ids
  kSentencePiece,  // the folder's tokenizer.model (Llama-2 style)
  kByteLevelBpe,   // the folder's tokenizer.json, byte-level BPE (GPT-2, Llama 3 style)
};

struct TokenizerChoice {
  TokenizerKind kind = TokenizerKind::kBytes;
  std::string file;  // the tokenizer file, for kSentencePiece and kByteLevelBpe
};

// The tokenizer of the model folder `model_path` (empty: none):
// tokenizer.model first, else tokenizer.json when it is a byte-level BPE
// (check_tokenizer_json). A tokenizer.json of another kind, or a folder whose
// only tokenizer files are ones Tailor does not read (GPT-2's vocab.json +
// merges.txt without tokenizer.json; BERT's vocab.txt), is InvalidArgument
// naming the file; a folder without tokenizer files is InvalidArgument naming
// the folder and the files looked for (never bytes: their ids would be
// trained into a vocabulary that means something else, pre-tokenized data
// included, whose documents are framed by the tokenizer's BOS and EOS).
Result<TokenizerChoice> choose_tokenizer(const std::string& model_path);

// Whether the tokenizer.json text at `path` is of the kind Tailor reads: a
// BPE model, no normalizer or NFC (Qwen2's), a ByteLevel pre-tokenizer
// step, no byte fallback. InvalidArgument naming the file and key otherwise.
Status check_tokenizer_json(const std::string& json_text, const std::string& path);

}  // namespace tailor::dsl
