#include "dsl/tokenizer_files.h"

#include <filesystem>
#include <system_error>

namespace tailor::dsl {

Result<TokenizerChoice> choose_tokenizer(const std::string& model_path) {
  namespace fs = std::filesystem;
  if (model_path.empty()) return TokenizerChoice{};
  auto file = [&](const char* name) -> std::string {
    std::error_code ec;
    const fs::path p = fs::path(model_path) / name;
    return fs::is_regular_file(p, ec) ? p.string() : std::string();
  };
  if (const std::string sp = file("tokenizer.model"); !sp.empty()) {
    return TokenizerChoice{TokenizerKind::kSentencePiece, sp};
  }
  const char* kNotRead =
      " files are not supported; Tailor reads SentencePiece tokenizer.model files (Llama-2 style) and uses its "
      "byte-level tokenizer for folders without tokenizer files";
  if (const std::string json = file("tokenizer.json"); !json.empty()) {
    return Status::invalid_argument(json + ": Hugging Face tokenizer.json" + kNotRead);
  }
  if (const std::string merges = file("merges.txt"); !merges.empty()) {
    return Status::invalid_argument(merges + ": byte-level BPE (vocab.json + merges.txt)" + kNotRead);
  }
  if (const std::string vocab = file("vocab.json"); !vocab.empty()) {
    return Status::invalid_argument(vocab + ": vocab.json" + kNotRead);
  }
  if (const std::string vocab = file("vocab.txt"); !vocab.empty()) {
    return Status::invalid_argument(vocab + ": WordPiece vocab.txt" + kNotRead);
  }
  return TokenizerChoice{};
}

}  // namespace tailor::dsl
