// SentencePiece-style BPE from a Hugging Face tokenizer.json, as transformers
// converts the SentencePiece BPE models of Llama 2, Mistral, Gemma and their
// descendants, read as transformers 5 reads the folder
// (dsl::metaspace_class: LlamaTokenizer and GemmaTokenizer rebuild the
// pipeline from tokenizer_config.json, other folders keep the file's):
//  - added tokens split out first, the text as written (added_tokens.h);
//  - each stretch between them normalized (Prepend, string Replace) and
//    pre-tokenized (Metaspace: spaces become U+2581 "▁", which is prepended
//    to the first stretch, every stretch or none; string Split), every
//    character keeping the bytes of the text it came from, so offsets are
//    the original text's;
//  - each piece merged as the tokenizers library's BPE merges a word: from
//    its characters (a character not in the vocabulary becomes its UTF-8
//    bytes' <0xNN> tokens: byte fallback; else the unknown token, runs of
//    them fused), the lowest-ranked adjacent pair first, leftmost among
//    equals, with a heap, since a piece is often a whole paragraph;
//  - decoding through the decoder's Replace, ByteFallback, Fuse and Strip
//    steps, special tokens left out (skip_special_tokens).
// Refused by name (InvalidArgument naming the file and the key): the steps
// dsl::check_tokenizer_json refuses, a merge whose parts or result are not
// in the vocabulary, dropout, subword prefixes or suffixes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "dsl/tokenizer_files.h"
#include "runner/data/added_tokens.h"
#include "runner/data/tokenizer.h"

namespace tailor::runner::data {

class MetaspaceTokenizer final : public Tokenizer {
 public:
  // Loads `path` (a tokenizer.json) with the tokenizer_config.json beside
  // it: its tokenizer_class chooses the pipeline, its bos_token and
  // eos_token name BOS and EOS (else the class's defaults: "<s>" and "</s>",
  // Gemma's "<bos>" and "<eos>"); a tokenizer without an EOS is an error,
  // one without a BOS starts documents with the EOS.
  static Result<std::unique_ptr<MetaspaceTokenizer>> load(const std::string& path);
  ~MetaspaceTokenizer() override;

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
  std::string describe() const override { return "SentencePiece-style BPE " + path_ + pipeline_note_; }

  // A normalizer or pre-tokenizer step, and a decoder step.
  struct Step;
  struct DecodeStep;
  // Text whose every byte knows the original bytes it stands for.
  struct Aligned;

 private:
  MetaspaceTokenizer();
  Status read_pipeline(const nlohmann::json& j, const nlohmann::json& config);
  Status read_decoder(const nlohmann::json& j);
  Status read_model(const nlohmann::json& j, const nlohmann::json& config);
  Status read_bos_eos(const nlohmann::json& config);
  Status bad(const std::string& what) const;

  using Offsets = std::vector<std::pair<std::uint32_t, std::uint32_t>>;
  void encode_text(std::string_view text, std::vector<std::int32_t>& out, Offsets* offsets) const;
  void encode_stretch(std::string_view text, std::size_t begin, std::size_t end, std::vector<std::int32_t>& out,
                      Offsets* offsets) const;
  // A token of a piece: its id and the piece's bytes it covers.
  struct Piece {
    std::int32_t id;
    std::uint32_t begin, end;
  };
  void merge_piece(std::string_view piece, std::vector<Piece>& out) const;

  std::string path_, fingerprint_, pipeline_note_;
  dsl::MetaspaceClass class_ = dsl::MetaspaceClass::kAsWritten;
  std::vector<Step> normalizer_, pre_tokenizer_;
  std::vector<DecodeStep> decoder_;
  std::unordered_map<std::string, std::int32_t> vocab_;
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<std::uint64_t, std::pair<std::int32_t, std::int32_t>> merges_;
  std::int32_t byte_ids_[256];  // <0xNN>'s id, -1 where the vocabulary lacks it
  bool byte_fallback_ = false, fuse_unk_ = false;
  std::int32_t unk_ = -1;
  AddedTokens added_;
  TokenTable table_;
  std::int32_t bos_ = -1, eos_ = -1, declared_pad_ = -1;
  std::int64_t vocab_size_ = 0;
  // Pieces already merged (short ones: words when the pre-tokenizer splits).
  std::unique_ptr<MergeCache<Piece>> cache_;
};

}  // namespace tailor::runner::data
