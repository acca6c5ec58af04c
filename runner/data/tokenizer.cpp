#include "runner/data/tokenizer.h"

#include <filesystem>
#include <system_error>

#include "runner/data/byte_tokenizer.h"
#include "runner/data/sentencepiece_tokenizer.h"

namespace tailor::runner::data {
namespace {

namespace fs = std::filesystem;

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> make_tokenizer(const dsl::ModelSpec& model) {
  std::unique_ptr<Tokenizer> tok;
  if (!model.path.empty() && is_file(fs::path(model.path) / "tokenizer.model")) {
    const std::string file = (fs::path(model.path) / "tokenizer.model").string();
    TAILOR_ASSIGN_OR_RETURN(auto sp, SentencePieceTokenizer::load(file));
    if (sp->bos_id() < 0 || sp->eos_id() < 0) {
      return Status::invalid_argument(file + ": the SentencePiece model has no " +
                                      (sp->bos_id() < 0 ? "BOS" : "EOS") +
                                      " piece; training needs both to mark document boundaries");
    }
    tok = std::move(sp);
  } else if (!model.path.empty() && is_file(fs::path(model.path) / "tokenizer.json")) {
    return Status::invalid_argument((fs::path(model.path) / "tokenizer.json").string() +
                                    ": Hugging Face tokenizer.json files are not supported; the runner reads "
                                    "SentencePiece tokenizer.model files (Llama-2 style) or uses its byte-level "
                                    "tokenizer for folders without tokenizer files");
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
