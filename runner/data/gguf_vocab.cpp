#include "runner/data/gguf_vocab.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace tailor::runner::data {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The Split expressions of the tokenizers llama.cpp names (llama-vocab.cpp
// keeps the same expressions under these names).
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The score of a SentencePiece vocabulary's padding rows, as the
// converter's _create_vocab_sentencepiece writes it.
constexpr float kPadScore = -10000.0f;

std::optional<std::string> read_whole(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// ---- SentencePiece's ModelProto (sentencepiece_model.proto) -----------------

// Protocol buffer wire format, as far as ModelProto needs it.
class Wire {
 public:
  explicit Wire(std::string_view b) : b_(b) {}
  bool done() const { return at_ >= b_.size(); }
  bool ok() const { return ok_; }
  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64 && at_ < b_.size(); shift += 7) {
      const auto c = static_cast<unsigned char>(b_[at_++]);
      v |= static_cast<std::uint64_t>(c & 0x7F) << shift;
      if ((c & 0x80) == 0) return v;
    }
    ok_ = false;
    return 0;
  }
  std::string_view bytes() {
    const std::uint64_t n = varint();
    if (!ok_ || n > b_.size() - at_) return fail();
    const std::string_view s = b_.substr(at_, n);
    at_ += n;
    return s;
  }
  float fixed32() {
    if (b_.size() - at_ < 4) return (ok_ = false), 0.0f;
    float f;
    std::memcpy(&f, b_.data() + at_, 4);
    at_ += 4;
    return f;
  }
  void skip(std::uint64_t wire_type) {
    switch (wire_type) {
      case 0: varint(); return;
      case 1: at_ + 8 <= b_.size() ? at_ += 8 : (ok_ = false); return;
      case 2: bytes(); return;
      case 5: fixed32(); return;
      default: ok_ = false;
    }
  }

 private:
  std::string_view fail() {
    ok_ = false;
    at_ = b_.size();
    return {};
  }
  std::string_view b_;
  std::size_t at_ = 0;
  bool ok_ = true;
};

Status read_sentencepiece(const fs::path& file, GgufVocab& v) {
  const auto text = read_whole(file);
  if (!text) return Status::io_error("cannot read " + file.string());
  auto bad = [&](const std::string& what) { return Status::invalid_argument(file.string() + ": " + what); };
  Wire w(*text);
  std::int64_t unk = 0;
  std::uint64_t model_type = 1;  // proto2 defaults are not written: UNIGRAM
  while (!w.done() && w.ok()) {
    const std::uint64_t tag = w.varint();
    if (tag >> 3 == 1 && (tag & 7) == 2) {  // pieces
      Wire p(w.bytes());
      std::string piece;
      float score = 0;
      std::int32_t type = kTokenNormal;
      while (!p.done() && p.ok()) {
        const std::uint64_t t = p.varint();
        if (t >> 3 == 1 && (t & 7) == 2) piece = std::string(p.bytes());
        else if (t >> 3 == 2 && (t & 7) == 5) score = p.fixed32();
        else if (t >> 3 == 3 && (t & 7) == 0) type = static_cast<std::int32_t>(p.varint());
        else p.skip(t & 7);
      }
      if (!p.ok()) return bad("piece " + std::to_string(v.tokens.size()) + " is damaged");
      if (type < kTokenNormal || type > kTokenByte) {
        return bad("piece " + std::to_string(v.tokens.size()) + " has the unknown type " + std::to_string(type));
      }
      v.tokens.push_back(std::move(piece));
      v.scores.push_back(score);
      v.types.push_back(type);
    } else if (tag >> 3 == 2 && (tag & 7) == 2) {  // trainer_spec
      Wire t(w.bytes());
      while (!t.done() && t.ok()) {
        const std::uint64_t f = t.varint();
        if (f >> 3 == 3 && (f & 7) == 0) model_type = t.varint();
        else if (f >> 3 == 40 && (f & 7) == 0) unk = static_cast<std::int64_t>(t.varint());
        else t.skip(f & 7);
      }
      if (!t.ok()) return bad("trainer_spec is damaged");
    } else if (tag >> 3 == 3 && (tag & 7) == 2) {  // normalizer_spec
      Wire n(w.bytes());
      std::string name;
      bool charsmap = false, collapse = true;
      v.add_space_prefix = true;  // add_dummy_prefix's default
      while (!n.done() && n.ok()) {
        const std::uint64_t f = n.varint();
        if (f >> 3 == 1 && (f & 7) == 2) name = std::string(n.bytes());
        else if (f >> 3 == 2 && (f & 7) == 2) charsmap = !n.bytes().empty();
        else if (f >> 3 == 3 && (f & 7) == 0) v.add_space_prefix = n.varint() != 0;
        else if (f >> 3 == 4 && (f & 7) == 0) collapse = n.varint() != 0;
        else n.skip(f & 7);
      }
      if (!n.ok()) return bad("normalizer_spec is damaged");
      // llama.cpp's SentencePiece tokenizer only escapes spaces (and adds
      // the dummy prefix): a model that normalises text otherwise would
      // tokenize differently there.
      if (charsmap && name != "identity") {
        return bad("the normalizer " + (name.empty() ? std::string("(a character map)") : name) +
                   ", which llama.cpp does not apply (it tokenizes text as the identity normalizer would)");
      }
      if (collapse) {
        return bad("remove_extra_whitespaces is on, and llama.cpp does not collapse whitespace as this model does");
      }
    } else {
      w.skip(tag & 7);
    }
  }
  if (!w.ok() || v.tokens.empty()) return bad("not a SentencePiece model (no pieces could be read)");
  // llama.cpp's SentencePiece tokenizer merges pieces by score, as
  // SentencePiece's BPE (type 2) does; a unigram model (1) tokenizes otherwise.
  if (model_type != 2) {
    return bad("a SentencePiece model of type " + std::to_string(model_type) +
               " (1 unigram, 3 word, 4 char); GGUF export takes BPE models (type 2), which llama.cpp's \"llama\" "
               "tokenizer encodes as SentencePiece does");
  }
  v.model = "llama";
  v.pre = "default";  // as the converter writes it; llama.cpp's SentencePiece tokenizer has no pre-tokenizer
  v.unk = unk;
  return Status::ok();
}

// ---- byte-level BPE (tokenizer.json) ------------------------------------------

Status read_bpe(const fs::path& file, GgufVocab& v) {
  const auto text = read_whole(file);
  if (!text) return Status::io_error("cannot read " + file.string());
  auto bad = [&](const std::string& what) { return Status::invalid_argument(file.string() + ": " + what); };
  const json j = json::parse(*text, nullptr, false);
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) return bad("not a tokenizer.json (no model)");
  const json& model = j["model"];
  if (model.value("type", std::string()) != "BPE") {
    return bad("model.type " + model.value("type", json()).dump() + ": GGUF export takes byte-level BPE or a SentencePiece tokenizer.model");
  }
  // The pre-tokenizer, by llama.cpp's name for its expression.
  const json pre = j.value("pre_tokenizer", json());
  auto split_pattern = [](const json& p) -> std::string {
    if (p.is_object() && p.value("type", std::string()) == "Split" && p.contains("pattern") && p["pattern"].is_object() &&
        p["pattern"].contains("Regex") && p["pattern"]["Regex"].is_string()) {
      return p["pattern"]["Regex"].get<std::string>();
    }
    return "";
  };
  // Byte-level without an expression (the byte tokenizer's): with no merges
  // every byte is a token however the text is split, so GPT-2's is as good.
  const bool unsplit = pre.is_object() && pre.value("type", std::string()) == "ByteLevel" && !pre.value("use_regex", true);
  const bool no_merges = !model.contains("merges") || (model["merges"].is_array() && model["merges"].empty());
  if (pre.is_object() && pre.value("type", std::string()) == "ByteLevel" && (pre.value("use_regex", true) || no_merges)) {
    v.pre = "gpt-2";
  } else if (unsplit) {
    return bad("pre_tokenizer ByteLevel without its expression, and merges: llama.cpp always splits words first");
  } else if (pre.is_object() && pre.value("type", std::string()) == "Sequence" && pre.contains("pretokenizers") &&
             pre["pretokenizers"].is_array() && !pre["pretokenizers"].empty()) {
    const std::string pattern = split_pattern(pre["pretokenizers"][0]);
    if (pattern == kLlama3Pattern) v.pre = "llama-bpe";
    else if (pattern == kQwen2Pattern) v.pre = "qwen2";
    else return bad("pre_tokenizer's Split expression " + json(pattern).dump() + " is not one llama.cpp names (GPT-2's, Llama 3's and Qwen2's are exported)");
  } else {
    return bad("pre_tokenizer " + pre.dump().substr(0, 120) + " is not one llama.cpp names (GPT-2's, Llama 3's and Qwen2's are exported)");
  }
  if (!model.contains("vocab") || !model["vocab"].is_object()) return bad("model.vocab is not an object");
  std::vector<std::string> by_id;
  auto place = [&](std::int64_t id, const std::string& token) {
    if (id < 0) return;
    if (static_cast<std::size_t>(id) >= by_id.size()) by_id.resize(static_cast<std::size_t>(id) + 1);
    by_id[static_cast<std::size_t>(id)] = token;
  };
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer()) return bad("model.vocab[" + json(token).dump() + "] is not an id");
    place(id.get<std::int64_t>(), token);
  }
  std::vector<std::int32_t> types(by_id.size(), kTokenNormal);
  for (const json& a : j.value("added_tokens", json::array())) {
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
        !a["content"].is_string()) {
      return bad("added_tokens: an entry without an id and content");
    }
    const auto id = a["id"].get<std::int64_t>();
    place(id, a["content"].get<std::string>());
    types.resize(by_id.size(), kTokenNormal);
    types[static_cast<std::size_t>(id)] = a.value("special", false) ? kTokenControl : kTokenUserDefined;
  }
  v.tokens = std::move(by_id);
  v.types = std::move(types);
  for (const json& m : model.value("merges", json::array())) {
    if (m.is_string()) v.merges.push_back(m.get<std::string>());
    else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      v.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    } else {
      return bad("model.merges: an entry that is neither \"a b\" nor [a, b]");
    }
  }
  // A post-processor that puts a special token first adds a BOS.
  const json post = j.value("post_processor", json());
  if (post.is_object() && post.value("type", std::string()) == "TemplateProcessing" && post.contains("single") &&
      post["single"].is_array() && !post["single"].empty()) {
    v.add_bos = post["single"][0].contains("SpecialToken");
  }
  v.model = "gpt2";
  return Status::ok();
}

// tokenizer_config.json: add_bos_token, add_eos_token and added_tokens_decoder.
Status read_config(const fs::path& file, GgufVocab& v) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return Status::ok();
  const auto text = read_whole(file);
  if (!text) return Status::io_error("cannot read " + file.string());
  const json j = json::parse(*text, nullptr, false);
  if (!j.is_object()) return Status::invalid_argument(file.string() + ": not a JSON object");
  if (j.contains("add_bos_token") && j["add_bos_token"].is_boolean()) v.add_bos = j["add_bos_token"].get<bool>();
  if (j.contains("add_eos_token") && j["add_eos_token"].is_boolean()) v.add_eos = j["add_eos_token"].get<bool>();
  if (!j.contains("added_tokens_decoder") || !j["added_tokens_decoder"].is_object()) return Status::ok();
  for (const auto& [key, a] : j["added_tokens_decoder"].items()) {
    std::int64_t id = -1;
    try {
      id = std::stoll(key);
    } catch (const std::exception&) {
    }
    if (id < 0 || !a.is_object() || !a.contains("content") || !a["content"].is_string()) {
      return Status::invalid_argument(file.string() + ": added_tokens_decoder[" + json(key).dump() + "] is not an id with content");
    }
    const auto i = static_cast<std::size_t>(id);
    if (i >= v.tokens.size()) {
      v.tokens.resize(i + 1);
      v.types.resize(i + 1, kTokenUnused);
      if (!v.scores.empty()) v.scores.resize(i + 1, kPadScore);
    }
    std::string content = a["content"].get<std::string>();
    const bool special = a.value("special", false);
    if (!v.scores.empty()) {
      v.scores[i] = -1000.0f;
      // The converter writes a user-defined piece's "▁" as the space it stands for.
      for (std::size_t at; !special && (at = content.find("\xE2\x96\x81")) != std::string::npos;) content.replace(at, 3, " ");
    }
    v.tokens[i] = std::move(content);
    v.types[i] = special ? kTokenControl : kTokenUserDefined;
  }
  return Status::ok();
}

}  // namespace

Result<GgufVocab> read_gguf_vocab(const std::string& folder, std::int64_t vocab_size) {
  const fs::path dir(folder);
  std::error_code ec;
  GgufVocab v;
  if (fs::is_regular_file(dir / "tokenizer.model", ec)) {
    TAILOR_RETURN_IF_ERROR(read_sentencepiece(dir / "tokenizer.model", v));
  } else if (fs::is_regular_file(dir / "tokenizer.json", ec)) {
    TAILOR_RETURN_IF_ERROR(read_bpe(dir / "tokenizer.json", v));
  } else {
    return Status::not_found(folder + " holds no tokenizer.model or tokenizer.json");
  }
  TAILOR_RETURN_IF_ERROR(read_config(dir / "tokenizer_config.json", v));
  if (static_cast<std::int64_t>(v.tokens.size()) > vocab_size) {
    return Status::invalid_argument(folder + ": the tokenizer has " + std::to_string(v.tokens.size()) +
                                    " tokens, more than the model's " + std::to_string(vocab_size) + " embeddings");
  }
  // Ids the files leave out (gaps, rows past the tokenizer) become unused
  // "[PAD<id>]" tokens, as llama.cpp's converter writes them.
  for (std::size_t i = 0; i < static_cast<std::size_t>(vocab_size); ++i) {
    if (i >= v.tokens.size()) {
      v.tokens.emplace_back();
      v.types.push_back(kTokenUnused);
      if (v.model == "llama") v.scores.push_back(kPadScore);
    }
    if (v.tokens[i].empty()) {
      v.tokens[i] = "[PAD" + std::to_string(i) + "]";
      v.types[i] = kTokenUnused;
    }
  }
  return v;
}

}  // namespace tailor::runner::data
