#include "runner/data/sentencepiece_tokenizer.h"

#include <string>
#include <vector>

#include "dsl/shared_module.h"
#include "runner/data/file_io.h"
#include "runner/data/hash.h"
#include "runner/data/sentencepiece_module.h"

namespace tailor::runner::data {
namespace {

constexpr const char* kModuleFile = "libtailor_sentencepiece.so";

// RTLD_LOCAL keeps sentencepiece's bundled protobuf out of the global
// scope; RTLD_DEEPBIND makes sentencepiece bind to it rather than to
// LibTorch's libprotobuf (dsl/shared_module.h). Never closed: tokenizers may
// live until exit.
Result<const TailorSpApi*> open_module() {
  const auto entry = dsl::open_shared_module(
      kModuleFile, TAILOR_SENTENCEPIECE_MODULE_PATH, "tailor_sentencepiece_api", [](void* symbol) -> const void* {
        const auto api = reinterpret_cast<const TailorSpApi* (*)()>(symbol)();
        return api != nullptr && api->abi_version == kTailorSpAbiVersion ? api : nullptr;
      });
  if (entry.is_ok()) return static_cast<const TailorSpApi*>(*entry);
  return Status::failed_precondition("cannot load the SentencePiece module " + std::string(kModuleFile) +
                                     "; tried:" + entry.status().message());
}

const Result<const TailorSpApi*>& module_api() {
  static const Result<const TailorSpApi*> api = open_module();  // thread-safe once
  return api;
}

}  // namespace

SentencePieceTokenizer::~SentencePieceTokenizer() {
  if (sp_ != nullptr) api_->destroy(sp_);
}

Result<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::load(const std::string& model_file) {
  // Read it ourselves: sentencepiece's own Load() reports a missing file as
  // "Not found: ... Error #2", and we want the bytes for the fingerprint.
  TAILOR_ASSIGN_OR_RETURN(const std::string bytes, read_file(model_file));
  if (bytes.empty()) return Status::invalid_argument(model_file + ": empty file, not a SentencePiece model");
  const auto& api = module_api();
  if (!api.is_ok()) return api.status().prefixed(model_file);
  std::unique_ptr<SentencePieceTokenizer> tok(new SentencePieceTokenizer());
  tok->api_ = *api;
  char error[512] = {};
  tok->sp_ = tok->api_->load(bytes.data(), bytes.size(), error, sizeof error);
  if (tok->sp_ == nullptr) {
    return Status::invalid_argument(model_file + ": not a valid SentencePiece model (sentencepiece: " +
                                    std::string(error) + ")");
  }
  tok->pieces_ = tok->api_->piece_size(tok->sp_);
  if (tok->pieces_ <= 0) return Status::invalid_argument(model_file + ": SentencePiece model has no pieces");
  tok->bos_ = tok->api_->bos_id(tok->sp_);
  tok->eos_ = tok->api_->eos_id(tok->sp_);
  const std::int32_t pad = tok->api_->pad_id(tok->sp_);
  tok->pad_ = pad >= 0 ? pad : tok->eos_;
  tok->path_ = model_file;
  tok->fingerprint_ = "sentencepiece:" + hex64(fnv1a64(bytes)) + ":" + std::to_string(bytes.size());
  return tok;
}

std::vector<std::int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  static_assert(sizeof(int) == sizeof(std::int32_t), "sentencepiece ids are int");
  std::vector<std::int32_t> ids;
  const int rc = api_->encode(
      sp_, text.data(), text.size(),
      [](void* ctx, const int* out, std::size_t count) {
        static_cast<std::vector<std::int32_t>*>(ctx)->assign(out, out + count);
      },
      &ids);
  // Encode fails only when no model is loaded, which load() rules out.
  TAILOR_CHECK(rc == 0);
  return ids;
}

std::string SentencePieceTokenizer::decode(const std::vector<std::int32_t>& ids) const {
  std::vector<int> kept;
  kept.reserve(ids.size());
  for (std::int32_t id : ids) {
    // Decode() rejects out-of-range ids with an error; control pieces
    // (BOS, EOS, PAD) would decode to nothing anyway.
    if (id >= 0 && id < pieces_ && api_->is_control(sp_, id) == 0) kept.push_back(id);
  }
  std::string text;
  const int rc = api_->decode(
      sp_, kept.data(), kept.size(),
      [](void* ctx, const char* out, std::size_t size) { static_cast<std::string*>(ctx)->assign(out, size); },
      &text);
  return rc == 0 ? text : std::string();
}

std::int32_t SentencePieceTokenizer::bos_id() const { return bos_; }
std::int32_t SentencePieceTokenizer::eos_id() const { return eos_; }
// The model's pad piece, else EOS (see the header).
std::int32_t SentencePieceTokenizer::pad_id() const { return pad_; }
std::int64_t SentencePieceTokenizer::vocab_size() const { return pieces_; }
std::string SentencePieceTokenizer::fingerprint() const { return fingerprint_; }
std::string SentencePieceTokenizer::describe() const { return "SentencePiece " + path_; }

}  // namespace tailor::runner::data
