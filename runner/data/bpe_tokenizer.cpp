#include "runner/data/bpe_tokenizer.h"

#include "core/text.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "dsl/tokenizer_files.h"
#include "runner/data/byte_tokenizer.h"
#include "runner/data/file_io.h"
#include "runner/data/hash.h"

namespace tailor::runner::data {
namespace {

using nlohmann::json;

// GPT-2's pre-tokenizer pattern (ByteLevel with use_regex, as the tokenizers
// library writes it in Rust: pre_tokenizers/byte_level.rs).
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// GPT-2's reversible byte -> printable character map (Radford et al. 2019,
// encoder.py bytes_to_unicode): printable Latin-1 bytes stand for
// themselves, the other 68 for U+0100 onwards in byte order.
struct ByteSymbols {
  std::array<std::string, 256> of_byte;
  std::unordered_map<std::string, unsigned char> to_byte;
  ByteSymbols() {
    std::uint32_t next = 256;
    for (std::uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      append_utf8(of_byte[b], printable ? b : next++);
      to_byte.emplace(of_byte[b], static_cast<unsigned char>(b));
    }
  }
};

const ByteSymbols& byte_symbols() {
  static const ByteSymbols s;
  return s;
}

std::size_t utf8_length(unsigned char lead) {
  return lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 1;
}

// Unicode NFC (UAX #15) through ICU, as the tokenizers library's NFC
// normalizer applies it; text that is not valid UTF-8 is left as it is.
std::string nfc(std::string_view text) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(err);
  if (U_FAILURE(err)) return std::string(text);
  const icu::UnicodeString in =
      icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  if (n->isNormalized(in, err) && U_SUCCESS(err)) return std::string(text);
  err = U_ZERO_ERROR;
  const icu::UnicodeString out = n->normalize(in, err);
  if (U_FAILURE(err)) return std::string(text);
  std::string utf8;
  out.toUTF8String(utf8);
  return utf8;
}

// Text cut where NFC has a boundary, each piece normalized on its own.
struct NfcChunks {
  std::string normalized;
  std::vector<std::size_t> raw_start, norm_start;  // per chunk, plus the ends
  // The raw offset for a normalized one: a chunk's start, or (for an end
  // inside a chunk) that chunk's end.
  std::size_t to_raw(std::size_t norm, bool is_end) const {
    const auto it = std::upper_bound(norm_start.begin(), norm_start.end(), norm);
    const std::size_t k = static_cast<std::size_t>(it - norm_start.begin()) - 1;
    if (norm_start[k] == norm || !is_end) return raw_start[k];
    return raw_start[std::min(k + 1, raw_start.size() - 1)];
  }
};

NfcChunks nfc_chunks(std::string_view text) {
  NfcChunks out;
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(err);
  std::size_t chunk = 0;
  auto flush = [&](std::size_t end) {
    if (end == chunk) return;
    out.raw_start.push_back(chunk);
    out.norm_start.push_back(out.normalized.size());
    out.normalized += nfc(text.substr(chunk, end - chunk));
    chunk = end;
  };
  const auto* p = reinterpret_cast<const std::uint8_t*>(text.data());
  const auto size = static_cast<std::int32_t>(text.size());
  for (std::int32_t i = 0; i < size;) {
    const std::int32_t at = i;
    UChar32 c = 0;
    U8_NEXT(p, i, size, c);
    if (at > 0 && (U_FAILURE(err) || c < 0 || n->hasBoundaryBefore(c))) flush(static_cast<std::size_t>(at));
  }
  flush(text.size());
  out.raw_start.push_back(text.size());
  out.norm_start.push_back(out.normalized.size());
  return out;
}

}  // namespace

struct BpeTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

BpeTokenizer::~BpeTokenizer() = default;

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::load(const std::string& path) {
  // read_file: under tailord, only inside the spec root.
  TAILOR_ASSIGN_OR_RETURN(const std::string text, read_file(path));
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const std::string& what) { return Status::invalid_argument(path + ": " + what); };
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  const json& model = j.value("model", json());
  if (!model.is_object()) return bad("no \"model\" object");
  TAILOR_ASSIGN_OR_RETURN(const dsl::TokenizerKind kind, dsl::check_tokenizer_json(text, path));
  if (kind != dsl::TokenizerKind::kByteLevelBpe)
    return bad("not a byte-level BPE tokenizer (no ByteLevel pre-tokenizer step)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null() && model[key] != "")
      return bad(std::string("model.") + key + " is not supported");
  }
  if (model.contains("dropout") && !model["dropout"].is_null()) return bad("model.dropout is not supported");

  auto tok = std::unique_ptr<BpeTokenizer>(new BpeTokenizer());
  tok->cache_ = std::make_unique<MergeCache<Piece>>();
  tok->path_ = path;
  tok->ignore_merges_ = model.value("ignore_merges", false);
  tok->nfc_ = j.contains("normalizer") && !j["normalizer"].is_null();  // check_tokenizer_json admits NFC only

  TAILOR_RETURN_IF_ERROR(tok->read_pre_tokenizer(j));
  TAILOR_RETURN_IF_ERROR(tok->read_vocabulary(j, model));
  TAILOR_RETURN_IF_ERROR(tok->read_bos_eos());
  char fp[80];
  std::snprintf(fp, sizeof fp, "bpe-v1:%016llx:%d:%d",
                static_cast<unsigned long long>(checksum64(text.data(), text.size())), tok->bos_, tok->eos_);
  tok->fingerprint_ = fp;
  return tok;
}

Status BpeTokenizer::bad(const std::string& what) const { return Status::invalid_argument(path_ + ": " + what); }

// ByteLevel (GPT-2's regex), or Split(regex) then ByteLevel without its
// regex (Llama 3).
Status BpeTokenizer::read_pre_tokenizer(const json& j) {
  std::vector<json> steps;
  const json& pre = j.value("pre_tokenizer", json());
  if (pre.is_object() && pre.value("type", std::string()) == "Sequence") {
    for (const json& p : pre.value("pretokenizers", json::array()))
      steps.push_back(p);
  } else if (!pre.is_null()) {
    steps.push_back(pre);
  }
  std::string pattern;
  bool byte_level = false;
  for (const json& p : steps) {
    const std::string type = p.value("type", std::string());
    if (type == "ByteLevel" && !byte_level) {
      byte_level = true;
      add_prefix_space_ = p.value("add_prefix_space", false);
      if (p.value("use_regex", true)) {
        if (!pattern.empty()) return bad("pre_tokenizer: two regular expressions");
        pattern = kGpt2Pattern;
      }
    } else if (type == "Split" && !byte_level && pattern.empty() && p.contains("pattern") &&
               p["pattern"].contains("Regex") && p.value("behavior", std::string()) == "Isolated" &&
               !p.value("invert", false)) {
      pattern = p["pattern"]["Regex"].get<std::string>();
    } else {
      return bad("pre_tokenizer " + p.dump().substr(0, 120) +
                 " is not supported: Tailor reads ByteLevel, or an isolating regex Split then ByteLevel");
    }
  }
  if (!byte_level) return bad("pre_tokenizer: no ByteLevel step: not a byte-level BPE tokenizer");
  if (!pattern.empty()) {
    int err = 0;
    PCRE2_SIZE at = 0;
    regex_ = std::make_unique<Regex>();
    regex_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                                      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &at, nullptr);
    if (regex_->code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      return bad("pre_tokenizer regex " + json(pattern).dump() + ": " + reinterpret_cast<const char*>(msg) +
                 " at offset " + std::to_string(at));
    }
    pcre2_jit_compile(regex_->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if unavailable
  }

  return Status::ok();
}

Status BpeTokenizer::read_vocabulary(const json& j, const json& model) {
  const json& vocab = model.value("vocab", json());
  if (!vocab.is_object() || vocab.empty()) return bad("model.vocab is not a non-empty object");
  std::int64_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!valid_token_id(it.value())) {
      return bad("model.vocab[" + json(it.key()).dump() + "] is not an integer id in [0, 2^24)");
    }
    const auto id = it.value().get<std::int32_t>();
    vocab_.emplace(it.key(), id);
    max_id = std::max<std::int64_t>(max_id, id);
  }
  const json& merges = model.value("merges", json::array());
  std::int32_t rank = 0;
  for (const json& m : merges) {
    std::string key;
    if (m.is_string()) {
      key = m.get<std::string>();
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      key = m[0].get<std::string>() + " " + m[1].get<std::string>();
    }
    if (key.find(' ') == std::string::npos) return bad("model.merges[" + std::to_string(rank) + "] is not a pair");
    merge_rank_.emplace(std::move(key), rank++);
  }
  TAILOR_ASSIGN_OR_RETURN(added_, AddedTokens::read(j, path_));
  max_id = std::max(max_id, added_.max_id());
  vocab_size_ = max_id + 1;
  table_ = TokenTable(vocab_, added_, vocab_size_);

  return Status::ok();
}

// BOS and EOS: tokenizer_config.json's, else GPT-2's <|endoftext|>.
Status BpeTokenizer::read_bos_eos() {
  auto id_of = [&](const std::string& t) -> std::int32_t {
    if (const AddedToken* a = added_.find(t)) return a->id;
    auto it = vocab_.find(t);
    return it == vocab_.end() ? -1 : it->second;
  };
  // Optional; but one that exists is read like tokenizer.json (under
  // tailord, only inside the spec root).
  TAILOR_ASSIGN_OR_RETURN(const json cfg, read_tokenizer_config(path_));
  TAILOR_ASSIGN_OR_RETURN(const SpecialIds ids, special_ids(cfg, "", "<|endoftext|>", id_of, path_));
  bos_ = ids.bos;
  eos_ = ids.eos;
  declared_pad_ = ids.declared_pad;
  return Status::ok();
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<std::int32_t>& out, std::size_t base,
                               Offsets* offsets) const {
  std::vector<Piece> pieces;
  cache_->get(word, pieces, [this](std::string_view w, std::vector<Piece>& merged) { merge_word(w, merged); });
  for (const Piece& p : pieces) {
    out.push_back(p.id);
    if (offsets) offsets->emplace_back(static_cast<std::uint32_t>(base + p.begin), static_cast<std::uint32_t>(base + p.end));
  }
}

void BpeTokenizer::merge_word(std::string_view word, std::vector<Piece>& out) const {
  const ByteSymbols& bs = byte_symbols();
  std::vector<std::string> symbols;
  std::vector<std::uint32_t> lengths;  // bytes of `word` each symbol stands for
  symbols.reserve(word.size());
  for (unsigned char b : word)
    symbols.push_back(bs.of_byte[b]);
  lengths.assign(word.size(), 1);
  auto emit = [&](std::int32_t id, std::size_t begin, std::size_t end) {
    out.push_back(Piece{id, static_cast<std::uint32_t>(begin), static_cast<std::uint32_t>(end)});
  };
  if (ignore_merges_) {
    std::string whole;
    for (const std::string& s : symbols)
      whole += s;
    if (auto it = vocab_.find(whole); it != vocab_.end()) {
      emit(it->second, 0, word.size());
      return;
    }
  }
  // Merge the lowest-ranked adjacent pair, leftmost first, until none is a merge.
  std::string key;
  while (symbols.size() > 1) {
    std::int32_t best = -1;
    std::size_t at = 0;
    for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
      key.assign(symbols[i]).append(" ").append(symbols[i + 1]);
      auto it = merge_rank_.find(key);
      if (it != merge_rank_.end() && (best < 0 || it->second < best)) {
        best = it->second;
        at = i;
      }
    }
    if (best < 0) break;
    symbols[at] += symbols[at + 1];
    lengths[at] += lengths[at + 1];
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    lengths.erase(lengths.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  std::size_t pos = 0;
  for (std::size_t k = 0; k < symbols.size(); ++k) {
    const std::string& s = symbols[k];
    if (auto it = vocab_.find(s); it != vocab_.end()) {
      emit(it->second, pos, pos + lengths[k]);
    } else {
      // Not in the vocabulary (a tokenizer without every byte): its bytes,
      // each byte symbol standing for one byte of the word.
      std::size_t byte = pos;
      for (std::size_t i = 0; i < s.size(); i += utf8_length(static_cast<unsigned char>(s[i])), ++byte) {
        auto b = vocab_.find(s.substr(i, utf8_length(static_cast<unsigned char>(s[i]))));
        if (b != vocab_.end()) emit(b->second, byte, byte + 1);
      }
    }
    pos += lengths[k];
  }
}

void BpeTokenizer::encode_pieces(std::string_view text, std::vector<std::int32_t>& out, std::size_t base,
                                 Offsets* offsets) const {
  if (!regex_) {
    encode_word(text, out, base, offsets);
    return;
  }
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(regex_->code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t pos = 0;
  while (pos < text.size()) {
    const int rc = pcre2_match(regex_->code, subject, text.size(), pos, 0, md, nullptr);
    if (rc < 0) {  // no further match: the rest is one piece
      encode_word(text.substr(pos), out, base + pos, offsets);
      break;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const std::size_t start = ov[0], end = ov[1];
    if (start > pos) encode_word(text.substr(pos, start - pos), out, base + pos, offsets);  // Isolated: gaps are pieces too
    if (end > start) {
      encode_word(text.substr(start, end - start), out, base + start, offsets);
      pos = end;
    } else {
      // An empty match: step over one character.
      const std::size_t n = std::min(text.size() - start, utf8_length(static_cast<unsigned char>(text[start])));
      encode_word(text.substr(start, n), out, base + start, offsets);
      pos = start + n;
    }
  }
  pcre2_match_data_free(md);
}

void BpeTokenizer::encode_words(std::string_view raw, std::vector<std::int32_t>& out, std::size_t base,
                                Offsets* offsets) const {
  if (raw.empty()) return;
  // The normalizer applies to the text between added tokens, as in the
  // tokenizers library (its added tokens match the text as written).
  if (!nfc_) {
    encode_pieces(raw, out, base, offsets);
    return;
  }
  if (offsets == nullptr) {
    const std::string normalized = nfc(raw);
    encode_pieces(normalized, out, 0, nullptr);
    return;
  }
  // Offsets of normalized text are taken back to `raw` chunk by chunk: NFC
  // of a text is the NFC of its pieces cut where a character has a
  // normalization boundary before it, so each piece maps onto its own.
  const NfcChunks chunks = nfc_chunks(raw);
  Offsets local;
  encode_pieces(chunks.normalized, out, 0, &local);
  for (auto [begin, end] : local) {
    offsets->emplace_back(static_cast<std::uint32_t>(base + chunks.to_raw(begin, false)),
                          static_cast<std::uint32_t>(base + chunks.to_raw(end, true)));
  }
}

void BpeTokenizer::encode_text(std::string_view text, std::vector<std::int32_t>& out, Offsets* offsets) const {
  added_.split(
      text,
      [&](std::size_t begin, std::size_t end) { encode_words(text.substr(begin, end - begin), out, begin, offsets); },
      [&](const AddedToken& t, std::size_t at) {
        out.push_back(t.id);
        if (offsets)
          offsets->emplace_back(static_cast<std::uint32_t>(at), static_cast<std::uint32_t>(at + t.content.size()));
      });
}

std::vector<std::int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> out;
  if (add_prefix_space_ && !text.empty() && text.front() != ' ') {
    encode_text(" " + std::string(text), out, nullptr);
  } else {
    encode_text(text, out, nullptr);
  }
  return out;
}

Result<EncodedText> BpeTokenizer::encode_with_offsets(std::string_view text) const {
  EncodedText out;
  if (add_prefix_space_ && !text.empty() && text.front() != ' ') {
    encode_text(" " + std::string(text), out.ids, &out.offsets);
    // The space added in front is no byte of `text`: the first token starts at 0.
    for (auto& [begin, end] : out.offsets) {
      begin = begin == 0 ? 0 : begin - 1;
      end = end == 0 ? 0 : end - 1;
    }
  } else {
    encode_text(text, out.ids, &out.offsets);
  }
  return out;
}

bool BpeTokenizer::is_special(std::int32_t id) const {
  return id >= 0 && static_cast<std::size_t>(id) < table_.special.size() &&
         table_.special[static_cast<std::size_t>(id)];
}

std::string BpeTokenizer::decode(const std::vector<std::int32_t>& ids) const {
  const ByteSymbols& bs = byte_symbols();
  std::string out;
  for (std::int32_t id : ids) {
    if (id < 0 || id >= vocab_size_) continue;
    const auto i = static_cast<std::size_t>(id);
    if (table_.special[i]) continue;
    const std::string& t = table_.text[i];
    if (table_.added[i]) {
      out += t;
      continue;
    }
    for (std::size_t k = 0; k < t.size();) {
      const std::size_t n = utf8_length(static_cast<unsigned char>(t[k]));
      auto b = bs.to_byte.find(t.substr(k, n));
      if (b != bs.to_byte.end()) out += static_cast<char>(b->second);
      k += n;
    }
  }
  // As the ByteLevel decoder of Hugging Face tokenizers: bytes that are no
  // UTF-8 (a character cut between tokens) become U+FFFD.
  return utf8_lossy(out);
}

std::string byte_tokenizer_json() {
  const ByteSymbols& bs = byte_symbols();
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[bs.of_byte[static_cast<std::size_t>(b)]] = b;
  json added = json::array();
  for (const auto& [id, content] : {std::pair{ByteTokenizer::kBos, "<|bos|>"}, std::pair{ByteTokenizer::kEos, "<|eos|>"},
                                    std::pair{ByteTokenizer::kPad, "<|pad|>"}}) {
    added.push_back({{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
  }
  // Without merges the regex split changes nothing: every byte is a token.
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
  const json doc = {{"version", "1.0"},
                    {"truncation", nullptr},
                    {"padding", nullptr},
                    {"added_tokens", added},
                    {"normalizer", nullptr},
                    {"pre_tokenizer", byte_level},
                    {"post_processor", nullptr},
                    {"decoder", byte_level},
                    {"model",
                     {{"type", "BPE"},
                      {"dropout", nullptr},
                      {"unk_token", nullptr},
                      {"continuing_subword_prefix", nullptr},
                      {"end_of_word_suffix", nullptr},
                      {"fuse_unk", false},
                      {"byte_fallback", false},
                      {"ignore_merges", false},
                      {"vocab", vocab},
                      {"merges", json::array()}}}};
  return doc.dump(1) + "\n";
}

std::string byte_tokenizer_config_json() {
  const json cfg = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                    {"bos_token", "<|bos|>"},
                    {"eos_token", "<|eos|>"},
                    {"pad_token", "<|pad|>"},
                    {"add_bos_token", false}};
  return cfg.dump(1) + "\n";
}

}  // namespace tailor::runner::data
