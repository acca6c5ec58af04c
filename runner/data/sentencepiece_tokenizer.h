// A SentencePiece tokenizer (Kudo & Richardson 2018) read from a
// `tokenizer.model` file, through Debian's libsentencepiece. Encodes with
// the model's own normaliser and pieces, with no sampling and no extra
// options; BOS/EOS are added by the dataset, not here. libsentencepiece is
// reached through libtailor_sentencepiece.so, loaded in its own symbol
// scope on first use (sentencepiece_module.h says why).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "runner/data/tokenizer.h"

struct TailorSpApi;

namespace tailor::runner::data {

// Immutable once loaded; encode/decode are const and safe to call from
// several threads (SentencePieceProcessor's Encode/Decode are const).
class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Loads a serialized SentencePiece ModelProto. Errors name the file:
  // NotFound (missing), IOError (unreadable, a folder), InvalidArgument
  // (empty, or not a SentencePiece model), FailedPrecondition when
  // libtailor_sentencepiece.so cannot be loaded. Never throws.
  static Result<std::unique_ptr<SentencePieceTokenizer>> load(const std::string& model_file);
  ~SentencePieceTokenizer() override;

  std::vector<std::int32_t> encode(std::string_view text) const override;
  // Specials, control pieces and ids outside the vocabulary are skipped.
  std::string decode(const std::vector<std::int32_t>& ids) const override;

  // -1 when the model defines no such piece (trained with --bos_id=-1);
  // make_tokenizer rejects those models for training.
  std::int32_t bos_id() const override;
  std::int32_t eos_id() const override;
  // The model's pad piece when it has one; Llama-2's has none (pad_id -1),
  // and then EOS, the usual choice for Llama fine-tuning: padding cells are
  // masked out of the loss and attention, so only a valid id is needed.
  std::int32_t pad_id() const override;
  std::int64_t vocab_size() const override;
  // "sentencepiece:<fnv1a64 of the model file, hex>:<file bytes>": the
  // file holds every setting encode() depends on (pieces, scores,
  // normaliser rules, byte fallback).
  std::string fingerprint() const override;
  std::string describe() const override;

 private:
  SentencePieceTokenizer() = default;
  const TailorSpApi* api_ = nullptr;
  void* sp_ = nullptr;  // the module's processor, destroyed through api_
  std::int32_t bos_ = -1, eos_ = -1, pad_ = -1;
  std::int64_t pieces_ = 0;
  std::string path_;
  std::string fingerprint_;
};

}  // namespace tailor::runner::data
