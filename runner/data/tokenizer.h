// The tokenizer interface of the data pipeline, and the choice of tokenizer
// for a model. Implementations: ByteTokenizer (byte_tokenizer.h),
// SentencePieceTokenizer (sentencepiece_tokenizer.h), BpeTokenizer
// (bpe_tokenizer.h: Hugging Face tokenizer.json, byte-level BPE) and
// MetaspaceTokenizer (metaspace_tokenizer.h: tokenizer.json, SentencePiece-
// style BPE).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "dsl/job_spec.h"

namespace tailor::runner::data {

// Ids with the bytes of the text each stands for.
struct EncodedText {
  std::vector<std::int32_t> ids;
  // [begin, end) byte offsets into the text, one per id, in order; a
  // special matched in the text covers its spelling.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> offsets;
};

// Text <-> token ids. Implementations are immutable after construction, so
// a tokenizer may be shared between threads.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The ids of `text`, without BOS/EOS (the dataset adds those per document).
  virtual std::vector<std::int32_t> encode(std::string_view text) const = 0;
  // encode(text) with each id's bytes of `text`: chat data maps the
  // characters it trains to tokens through them. FailedPrecondition from a
  // tokenizer that cannot say (naming it).
  virtual Result<EncodedText> encode_with_offsets(std::string_view text) const;
  // Whether `id` is a special token (BOS, EOS, an end-of-turn marker): the
  // end of a chat turn is the first special after the reply.
  virtual bool is_special(std::int32_t id) const { return id == bos_id() || id == eos_id(); }
  // The text of `ids`; special ids (BOS, EOS, padding) contribute nothing.
  virtual std::string decode(const std::vector<std::int32_t>& ids) const = 0;

  virtual std::int32_t bos_id() const = 0;
  virtual std::int32_t eos_id() const = 0;
  // The id written into padding cells. Padding is never a target and never
  // attended to (segment id -1), so a model without a pad token may use any
  // valid id here; see each implementation for its choice.
  virtual std::int32_t pad_id() const = 0;
  // The padding token the tokenizer declares (tokenizer_config.json's
  // pad_token), else EOS, as TRL falls back to it: where transformers'
  // sequence classifiers pool (the last token that is not this one), so a
  // reward model scores where TRL's and its exported folder do.
  virtual std::int32_t declared_pad_id() const { return eos_id(); }
  // Ids are in [0, vocab_size()); a model needs at least this many embeddings.
  virtual std::int64_t vocab_size() const = 0;

  // A string that differs whenever encode() could give different ids for
  // some text (another model file, other specials, another algorithm). Used
  // as part of the token cache's key; not meant for display.
  virtual std::string fingerprint() const = 0;
  // For messages: "byte-level" or "SentencePiece /path/tokenizer.model".
  virtual std::string describe() const = 0;
};

// The tokenizer for a job's model, as dsl::choose_tokenizer
// (dsl/tokenizer_files.h) chooses it:
//  - model.path holds a tokenizer.json of a kind Tailor reads: that,
//    byte-level BPE (GPT-2, Llama 3 style folders) or SentencePiece-style BPE
//    (Llama 2, Mistral, Gemma style folders), as transformers prefers it;
//  - else model.path holds tokenizer.model: that SentencePiece model;
//  - model.path holds only tokenizer files Tailor does not read (another
//    kind of tokenizer.json and no tokenizer.model, vocab.json + merges.txt,
//    vocab.txt):
//    InvalidArgument naming the file;
//  - a folder without tokenizer files: InvalidArgument naming the folder
//    (`tailor validate` refuses it first; this is the runner's own check);
//  - no folder (a preset, an inline arch): the byte-level tokenizer.
// InvalidArgument when the tokenizer's vocab_size() exceeds model.arch.vocab
// (ids would index past the embedding table) or a SentencePiece model has no
// BOS or EOS piece; the loading errors of SentencePieceTokenizer::load
// otherwise. Never throws.
Result<std::unique_ptr<Tokenizer>> make_tokenizer(const dsl::ModelSpec& model);

}  // namespace tailor::runner::data
