// A model folder's tokenizer as GGUF's tokenizer.ggml.* metadata, which
// llama.cpp tokenizes with: the vocabulary by id with each token's type,
// SentencePiece scores or byte-level BPE merges, and the pre-tokenizer by
// the name llama.cpp gives its regular expressions. Torch-free.
//
// Read from the files Tailor trains with (tokenizer.h): tokenizer.model
// (a SentencePiece ModelProto, parsed here: pieces, scores, types, unk_id)
// or a byte-level BPE tokenizer.json, with tokenizer_config.json's
// add_bos_token / add_eos_token and added_tokens_decoder. The special ids
// (BOS, EOS, padding, end of turn) are the tokenizer's as training used
// them, set by the exporter.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace tailor::runner::data {

// llama.cpp's token types (llama.h's llama_token_type; SentencePiece's
// ModelProto types have the same numbers).
enum GgufTokenType : std::int32_t {
  kTokenNormal = 1, kTokenUnknown = 2, kTokenControl = 3, kTokenUserDefined = 4, kTokenUnused = 5, kTokenByte = 6,
};

struct GgufVocab {
  std::string model;  // tokenizer.ggml.model: "llama" (SentencePiece) or "gpt2" (byte-level BPE)
  std::string pre;    // tokenizer.ggml.pre: "gpt-2", "llama-bpe" or "qwen2" (BPE); "default" (SentencePiece)
  std::vector<std::string> tokens;  // by id, padded with "[PAD<id>]" (unused) to the model's vocabulary
  std::vector<float> scores;        // SentencePiece only
  std::vector<std::int32_t> types;
  std::vector<std::string> merges;  // BPE only: "left right", by rank
  std::int64_t unk = -1;            // SentencePiece's unk_id
  std::optional<bool> add_bos, add_eos;
  std::optional<bool> add_space_prefix;  // SentencePiece's add_dummy_prefix
};

// The vocabulary of the tokenizer files in `folder`, `vocab_size` tokens
// (the model's embedding rows; more tokens than that is an error).
// InvalidArgument naming the file and what llama.cpp cannot take: another
// kind of tokenizer.json, a pre-tokenizer whose expression llama.cpp has
// no name for (GPT-2's, Llama 3's and Qwen2's are known), a damaged
// tokenizer.model; NotFound when the folder holds neither file.
Result<GgufVocab> read_gguf_vocab(const std::string& folder, std::int64_t vocab_size);

}  // namespace tailor::runner::data
