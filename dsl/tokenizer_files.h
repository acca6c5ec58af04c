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
  kMetaspaceBpe,   // the folder's tokenizer.json, SentencePiece-style BPE with byte fallback
                   // (Llama 2, Mistral, Gemma style)
};

struct TokenizerChoice {
  TokenizerKind kind = TokenizerKind::kBytes;
  std::string file;  // the tokenizer file (none for kBytes)
};

// The tokenizer of the model folder `model_path` (empty: none): its
// tokenizer.json when it is of a kind Tailor reads (check_tokenizer_json), as
// transformers prefers it too; else tokenizer.model (SentencePiece). A
// tokenizer.json of another kind without a tokenizer.model, or a folder whose
// only tokenizer files are ones Tailor does not read (GPT-2's vocab.json +
// merges.txt without tokenizer.json; BERT's vocab.txt), is InvalidArgument
// naming the file; a folder without tokenizer files is InvalidArgument naming
// the folder and the files looked for (never bytes: their ids would be
// trained into a vocabulary that means something else, pre-tokenized data
// included, whose documents are framed by the tokenizer's BOS and EOS).
Result<TokenizerChoice> choose_tokenizer(const std::string& model_path);

// Which kind of tokenizer.json the text at `path` is, of the two Tailor reads:
//  - kByteLevelBpe: a BPE model, no normalizer or NFC (Qwen2's), a ByteLevel
//    pre-tokenizer step, no byte fallback;
//  - kMetaspaceBpe: a BPE model without a ByteLevel step, whose normalizer
//    is none or Prepend and string Replace steps, whose pre-tokenizer is none
//    or Metaspace and string Split steps, and whose decoder is none or
//    Replace, ByteFallback, Fuse and Strip steps (as transformers converts
//    SentencePiece BPE models).
// InvalidArgument naming the file and the key otherwise.
Result<TokenizerKind> check_tokenizer_json(const std::string& json_text, const std::string& path);

// Whose pipeline a SentencePiece-style tokenizer.json is read with, as
// transformers 5 loads the folder: classes with their own constructor
// rebuild the normalizer, pre-tokenizer and decoder from tokenizer_config.json
// (LlamaTokenizer: a Metaspace pre-tokenizer prepending to the first piece,
// to every piece when `legacy`, to none without `add_prefix_space`;
// GemmaTokenizer: spaces replaced, no prefix), keeping the file's vocabulary,
// merges and added tokens; PreTrainedTokenizerFast (or no class) reads the
// file as it is.
enum class MetaspaceClass { kAsWritten, kLlama, kGemma };

// The class named by `config` (tokenizer_config.json's text; empty: none).
// InvalidArgument naming `config_path` for another tokenizer_class, whose
// pipeline Tailor does not know.
Result<MetaspaceClass> metaspace_class(const std::string& config, const std::string& config_path);

}  // namespace tailor::dsl
