// Which tokenizer a model folder gives the job: the one rule that `tailor
// validate`/`plan`, tailord and tailor-runner apply, so that a folder whose
// tokenizer Tailor cannot read is an error before training, naming the
// file, and never a silent fall back to bytes.
#pragma once

#include <string>

#include "core/status.h"

namespace tailor::dsl {

enum class TokenizerKind {
  kBytes,          // no model folder, or one without tokenizer files: byte-level ids
  kSentencePiece,  // the folder's tokenizer.model (Llama-2 style)
};

struct TokenizerChoice {
  TokenizerKind kind = TokenizerKind::kBytes;
  std::string file;  // the tokenizer file, for kSentencePiece
};

// The tokenizer of the model folder `model_path` (empty: none). A folder
// whose only tokenizer files are ones Tailor does not read yet
// (tokenizer.json; GPT-2's vocab.json + merges.txt; BERT's vocab.txt) is
// InvalidArgument naming the file.
Result<TokenizerChoice> choose_tokenizer(const std::string& model_path);

}  // namespace tailor::dsl
