#include "runner/data/tokenizer.h"

#include "dsl/tokenizer_files.h"
#include "runner/data/bpe_tokenizer.h"
#include "runner/data/byte_tokenizer.h"
#include "runner/data/metaspace_tokenizer.h"
#include "runner/data/sentencepiece_tokenizer.h"

namespace tailor::runner::data {

Result<EncodedText> Tokenizer::encode_with_offsets(std::string_view) const {
  return Status::failed_precondition("the tokenizer (" + describe() +
                                     ") does not report which text each token stands for, which chat data needs; "
                                     "chat data is read with the model folder's tokenizer.json or the byte tokenizer");
}

Result<std::unique_ptr<Tokenizer>> make_tokenizer(const dsl::ModelSpec& model) {
  TAILOR_ASSIGN_OR_RETURN(const dsl::TokenizerChoice choice, dsl::choose_tokenizer(model.path));
  std::unique_ptr<Tokenizer> tok;
  if (choice.kind == dsl::TokenizerKind::kSentencePiece) {
    TAILOR_ASSIGN_OR_RETURN(auto sp, SentencePieceTokenizer::load(choice.file));
    if (sp->bos_id() < 0 || sp->eos_id() < 0) {
      return Status::invalid_argument(choice.file + ": the SentencePiece model has no " +
                                      (sp->bos_id() < 0 ? "BOS" : "EOS") +
                                      " piece; training needs both to mark document boundaries");
    }
    tok = std::move(sp);
  } else if (choice.kind == dsl::TokenizerKind::kByteLevelBpe) {
    TAILOR_ASSIGN_OR_RETURN(tok, BpeTokenizer::load(choice.file));
  } else if (choice.kind == dsl::TokenizerKind::kMetaspaceBpe) {
    TAILOR_ASSIGN_OR_RETURN(tok, MetaspaceTokenizer::load(choice.file));
  } else {
    tok = std::make_unique<ByteTokenizer>();
  }
  if (tok->vocab_size() > model.arch.vocab) {
    return Status::invalid_argument("the tokenizer (" + tok->describe() + ") has " +
                                    std::to_string(tok->vocab_size()) + " ids but the model's vocabulary (arch.vocab) is " +
                                    std::to_string(model.arch.vocab) + ": ids would index past the embedding table");
  }
  return tok;
}

}  // namespace tailor::runner::data
