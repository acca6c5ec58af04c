#include "dsl/tokenizer_files.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
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
      " files are not supported; Tailor reads SentencePiece tokenizer.model and byte-level BPE tokenizer.json "
      "files";
  if (const std::string json = file("tokenizer.json"); !json.empty()) {
    std::ifstream in(json, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    TAILOR_RETURN_IF_ERROR(check_tokenizer_json(text.str(), json));
    return TokenizerChoice{TokenizerKind::kByteLevelBpe, json};
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
  // Byte ids would be trained into (and exported as the specials of) a model
  // whose vocabulary means something else.
  return Status::invalid_argument("model folder " + model_path +
                                  " has no tokenizer files (looked for tokenizer.model and tokenizer.json): copy "
                                  "the base model's tokenizer files beside its config.json; the byte-level "
                                  "tokenizer is for model.arch specs and presets trained from init: random");
}

Status check_tokenizer_json(const std::string& json_text, const std::string& path) {
  using nlohmann::json;
  const json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  auto refuse = [&](const std::string& what) {
    return Status::invalid_argument(path + ": " + what + "; Tailor reads byte-level BPE tokenizer.json files (GPT-2, Llama 3 style)");
  };
  if (j.is_discarded() || !j.is_object()) return Status::invalid_argument(path + ": not a JSON object");
  const json model = j.value("model", json());
  const json type = model.is_object() ? model.value("type", json()) : json();
  if (type != "BPE") return refuse("model.type " + type.dump() + " is not supported");
  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    const json n = j["normalizer"].is_object() ? j["normalizer"].value("type", json()) : j["normalizer"];
    if (n != "NFC") return refuse("normalizer " + n.dump() + " is not supported (NFC is)");
  }
  if (model.value("byte_fallback", false)) return refuse("model.byte_fallback is not supported");
  bool byte_level = false;
  const json pre = j.value("pre_tokenizer", json());
  if (pre.is_object()) {
    byte_level = pre.value("type", json()) == "ByteLevel";
    for (const json& p : pre.value("pretokenizers", json::array())) {
      byte_level = byte_level || (p.is_object() && p.value("type", json()) == "ByteLevel");
    }
  }
  if (!byte_level) return refuse("pre_tokenizer has no ByteLevel step");
  return Status::ok();
}

}  // namespace tailor::dsl
