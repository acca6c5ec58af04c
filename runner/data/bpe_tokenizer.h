// Byte-level BPE from a Hugging Face tokenizer.json (the `tokenizers`
// library's format), as GPT-2, Llama 3 and their descendants ship it:
// added tokens split out first; the pre-tokenizer's regex (GPT-2's, or a
// Split with its own pattern, as Llama 3's) cuts the rest into words, run
// through PCRE2 with Unicode properties; each word's bytes become GPT-2's
// printable byte symbols and are merged by the merges' ranks (or taken whole
// when the model says ignore_merges and the word is in the vocabulary).
// Qwen2's NFC normalizer is applied (ICU) to the text between added tokens.
//
// Refused by name (InvalidArgument naming the file and key): another model
// type (WordPiece, Unigram), a normalizer other than NFC, a
// pre-tokenizer other than ByteLevel or Split + ByteLevel, byte fallback,
// subword prefixes or suffixes, dropout.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runner/data/added_tokens.h"
#include "runner/data/tokenizer.h"

namespace tailor::runner::data {

class BpeTokenizer final : public Tokenizer {
 public:
  // Loads `path` (a tokenizer.json). BOS and EOS are the bos_token and
  // eos_token of tokenizer_config.json beside it, where it names them, else
  // the added token "<|endoftext|>"; a tokenizer without an EOS is an error.
  // Without a BOS, documents start with the EOS (as GPT-2's do).
  static Result<std::unique_ptr<BpeTokenizer>> load(const std::string& path);
  ~BpeTokenizer() override;

  std::vector<std::int32_t> encode(std::string_view text) const override;
  Result<EncodedText> encode_with_offsets(std::string_view text) const override;
  bool is_special(std::int32_t id) const override;
  std::string decode(const std::vector<std::int32_t>& ids) const override;
  std::int32_t bos_id() const override { return bos_; }
  std::int32_t eos_id() const override { return eos_; }
  std::int32_t pad_id() const override { return eos_; }
  std::int32_t declared_pad_id() const override { return declared_pad_; }
  std::int64_t vocab_size() const override { return vocab_size_; }
  std::string fingerprint() const override { return fingerprint_; }
  std::string describe() const override { return "byte-level BPE " + path_; }

 private:
  struct Regex;
  // load()'s steps, each reading its part of tokenizer.json (and of the
  // tokenizer_config.json beside it) into this; InvalidArgument naming the
  // file and the key.
  Status read_pre_tokenizer(const nlohmann::json& j);
  Status read_vocabulary(const nlohmann::json& j, const nlohmann::json& model);
  Status read_bos_eos();
  Status bad(const std::string& what) const;
  BpeTokenizer() = default;
  // Offsets, where asked for, are of the bytes of the text given to encode():
  // `base` is where `text`/`word` starts in it.
  using Offsets = std::vector<std::pair<std::uint32_t, std::uint32_t>>;
  void encode_text(std::string_view text, std::vector<std::int32_t>& out, Offsets* offsets) const;
  void encode_words(std::string_view text, std::vector<std::int32_t>& out, std::size_t base, Offsets* offsets) const;
  void encode_pieces(std::string_view text, std::vector<std::int32_t>& out, std::size_t base, Offsets* offsets) const;
  void encode_word(std::string_view word, std::vector<std::int32_t>& out, std::size_t base, Offsets* offsets) const;
  // A token of a word: its id and the bytes of the word it stands for.
  struct Piece {
    std::int32_t id;
    std::uint32_t begin, end;
  };
  void merge_word(std::string_view word, std::vector<Piece>& out) const;

  std::string path_, fingerprint_;
  std::unique_ptr<Regex> regex_;
  bool add_prefix_space_ = false;
  bool ignore_merges_ = false;
  bool nfc_ = false;  // the NFC normalizer (Qwen2)
  std::unordered_map<std::string, std::int32_t> vocab_;
  std::unordered_map<std::string, std::int32_t> merge_rank_;  // "left right" -> rank
  AddedTokens added_;
  TokenTable table_;
  std::int32_t bos_ = -1, eos_ = -1;
  std::int32_t declared_pad_ = -1;  // tokenizer_config.json's pad_token, else eos_
  std::int64_t vocab_size_ = 0;
  // Words already merged: (id, bytes of the word) per token.
  std::unique_ptr<MergeCache<Piece>> cache_;
};

// The files of a model folder whose tokenizer is the byte tokenizer
// (byte_tokenizer.h): tokenizer.json (byte-level BPE without merges: byte b
// is id b; "<|bos|>" 256, "<|eos|>" 257 and "<|pad|>" 258 special added
// tokens) and tokenizer_config.json naming those BOS, EOS and padding. This
// reader and the tokenizers library (transformers' AutoTokenizer) both read
// them as the byte tokenizer's ids, so a model trained from scratch on bytes
// is a folder that model.path and transformers can use. One difference
// remains: text that spells a special ("<|eos|>") is that special here, and
// its bytes under the byte tokenizer.
std::string byte_tokenizer_json();
std::string byte_tokenizer_config_json();

}  // namespace tailor::runner::data
