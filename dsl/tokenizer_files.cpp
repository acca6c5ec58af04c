#include "dsl/tokenizer_files.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

namespace tailor::dsl {

Result<TokenizerChoice> choose_tokenizer(const std::string& model_path) {
  namespace fs = std::filesystem;
  if (model_path.empty()) return TokenizerChoice{};
  auto file = [&](const char* name) -> std::string {
    std::error_code ec;
    const fs::path p = fs::path(model_path) / name;
    return fs::is_regular_file(p, ec) ? p.string() : std::string();
  };
  const std::string sp = file("tokenizer.model");
  if (const std::string json = file("tokenizer.json"); !json.empty()) {
    std::ifstream in(json, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    Result<TokenizerKind> kind = check_tokenizer_json(text.str(), json);
    if (kind.is_ok() && *kind == TokenizerKind::kMetaspaceBpe) {
      const fs::path config = fs::path(model_path) / "tokenizer_config.json";
      std::ifstream cin(config, std::ios::binary);
      std::stringstream config_text;
      if (cin) config_text << cin.rdbuf();
      if (auto cls = metaspace_class(config_text.str(), config.string()); !cls.is_ok()) kind = cls.status();
    }
    if (kind.is_ok()) return TokenizerChoice{*kind, json};
    // The SentencePiece model says the same as a tokenizer.json Tailor does
    // not read (e.g. one with SentencePiece's precompiled normalizer).
    if (sp.empty()) return kind.status();
  }
  if (!sp.empty()) return TokenizerChoice{TokenizerKind::kSentencePiece, sp};
  const char* kNotRead =
      " files are not supported; Tailor reads tokenizer.json (BPE) and SentencePiece tokenizer.model files";
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

namespace {

using nlohmann::json;

// A step, or a Sequence's steps under `list_key`.
std::vector<json> steps_of(const json& j, const char* list_key) {
  if (j.is_object() && j.value("type", json()) == "Sequence") return j.value(list_key, json::array());
  if (j.is_null()) return {};
  return {j};
}

bool string_pattern(const json& step) {
  return step.contains("pattern") && step["pattern"].is_object() && step["pattern"].contains("String") &&
         step["pattern"]["String"].is_string() && !step["pattern"]["String"].get<std::string>().empty();
}

// The SentencePiece-style pipeline's steps Tailor reads (metaspace_tokenizer.h
// applies them); the first step it does not, as "key: step", else "".
std::string unread_metaspace_step(const json& j) {
  for (const json& n : steps_of(j.value("normalizer", json()), "normalizers")) {
    const json type = n.is_object() ? n.value("type", json()) : n;
    const bool ok = (type == "Prepend" && n.value("prepend", json()).is_string()) ||
                    (type == "Replace" && string_pattern(n) && n.value("content", json()).is_string());
    if (!ok) return "normalizer " + n.dump().substr(0, 120);
  }
  for (const json& p : steps_of(j.value("pre_tokenizer", json()), "pretokenizers")) {
    const json type = p.is_object() ? p.value("type", json()) : p;
    const json behavior = p.is_object() ? p.value("behavior", json()) : json();
    const bool ok = (type == "Metaspace" && p.value("replacement", json()).is_string()) ||
                    (type == "Split" && string_pattern(p) && !p.value("invert", false) &&
                     (behavior == "MergedWithPrevious" || behavior == "MergedWithNext" || behavior == "Isolated"));
    if (!ok) return "pre_tokenizer " + p.dump().substr(0, 120);
  }
  for (const json& d : steps_of(j.value("decoder", json()), "decoders")) {
    const json type = d.is_object() ? d.value("type", json()) : d;
    const bool ok = type == "ByteFallback" || type == "Fuse" || type == "Strip" ||
                    (type == "Replace" && string_pattern(d) && d.value("content", json()).is_string());
    if (!ok) return "decoder " + d.dump().substr(0, 120);
  }
  return "";
}

}  // namespace

Result<TokenizerKind> check_tokenizer_json(const std::string& json_text, const std::string& path) {
  const json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  auto refuse = [&](const std::string& what) {
    return Status::invalid_argument(path + ": " + what +
                                    "; Tailor reads BPE tokenizer.json files, byte-level (GPT-2, Llama 3 style) or "
                                    "SentencePiece-style with byte fallback (Llama 2, Mistral, Gemma style)");
  };
  if (j.is_discarded() || !j.is_object()) return Status::invalid_argument(path + ": not a JSON object");
  const json model = j.value("model", json());
  const json type = model.is_object() ? model.value("type", json()) : json();
  if (type != "BPE") return refuse("model.type " + type.dump() + " is not supported");
  bool byte_level = false;
  for (const json& p : steps_of(j.value("pre_tokenizer", json()), "pretokenizers")) {
    byte_level = byte_level || (p.is_object() && p.value("type", json()) == "ByteLevel");
  }
  if (!byte_level) {
    if (const std::string step = unread_metaspace_step(j); !step.empty()) return refuse(step + " is not supported");
    return TokenizerKind::kMetaspaceBpe;
  }
  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    const json n = j["normalizer"].is_object() ? j["normalizer"].value("type", json()) : j["normalizer"];
    if (n != "NFC")
      return refuse("normalizer " + n.dump() + " is not supported with a ByteLevel pre-tokenizer (NFC is)");
  }
  if (model.value("byte_fallback", false))
    return refuse("model.byte_fallback is not supported with a ByteLevel pre-tokenizer");
  return TokenizerKind::kByteLevelBpe;
}

Result<MetaspaceClass> metaspace_class(const std::string& config, const std::string& config_path) {
  if (config.empty()) return MetaspaceClass::kAsWritten;
  const json cfg = json::parse(config, nullptr, /*allow_exceptions=*/false);
  if (!cfg.is_object() || !cfg.contains("tokenizer_class") || cfg["tokenizer_class"].is_null()) {
    return MetaspaceClass::kAsWritten;
  }
  const json& name = cfg["tokenizer_class"];
  if (name == "PreTrainedTokenizerFast" || name == "TokenizersBackend") return MetaspaceClass::kAsWritten;
  if (name == "LlamaTokenizer" || name == "LlamaTokenizerFast") return MetaspaceClass::kLlama;
  if (name == "GemmaTokenizer" || name == "GemmaTokenizerFast") return MetaspaceClass::kGemma;
  return Status::invalid_argument(config_path + ": tokenizer_class " + name.dump().substr(0, 80) +
                                  " is not supported with a SentencePiece-style tokenizer.json: transformers builds "
                                  "that class's own pipeline; Tailor reads LlamaTokenizer, GemmaTokenizer and "
                                  "PreTrainedTokenizerFast folders");
}

}  // namespace tailor::dsl
