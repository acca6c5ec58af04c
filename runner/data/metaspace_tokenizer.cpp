#include "runner/data/metaspace_tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <queue>

#include "core/text.h"
#include "dsl/tokenizer_files.h"
#include "runner/data/file_io.h"
#include "runner/data/hash.h"
#include "runner/data/jinja/text.h"

namespace tailor::runner::data {

using nlohmann::json;

struct MetaspaceTokenizer::Step {
  enum Kind { kPrepend, kReplace, kMetaspace, kSplit } kind;
  std::string pattern,
      content;  // Prepend: content; Replace: both; Metaspace: content (the replacement); Split: pattern
  enum Scheme { kAlways, kFirst, kNever } scheme = kAlways;                                // Metaspace
  bool split = false;                                                                      // Metaspace
  enum Behavior { kMergedWithPrevious, kMergedWithNext, kIsolated } behavior = kIsolated;  // Split
};

struct MetaspaceTokenizer::DecodeStep {
  enum Kind { kReplace, kByteFallback, kFuse, kStrip } kind;
  std::string pattern, content;     // Replace; Strip: content (one character)
  std::size_t start = 0, stop = 0;  // Strip
};

struct MetaspaceTokenizer::Aligned {
  std::string text;
  std::vector<std::uint32_t> begin, end;  // per byte of text: the original bytes it stands for

  void append(std::string_view s, std::uint32_t b, std::uint32_t e) {
    text.append(s);
    begin.insert(begin.end(), s.size(), b);
    end.insert(end.end(), s.size(), e);
  }
  void append_from(const Aligned& a, std::size_t from, std::size_t to) {
    text.append(a.text, from, to - from);
    begin.insert(begin.end(), a.begin.begin() + static_cast<std::ptrdiff_t>(from),
                 a.begin.begin() + static_cast<std::ptrdiff_t>(to));
    end.insert(end.end(), a.end.begin() + static_cast<std::ptrdiff_t>(from),
               a.end.begin() + static_cast<std::ptrdiff_t>(to));
  }
  Aligned slice(std::size_t from, std::size_t to) const {
    Aligned out;
    out.append_from(*this, from, to);
    return out;
  }
};

namespace {

// A character's bytes at s[i]; a byte that starts no well-formed character
// stands alone (and goes to byte fallback).
std::size_t char_length(std::string_view s, std::size_t i) {
  return std::max<std::size_t>(1, utf8_sequence_length(s, i));
}

// The string of a {"String": ...} pattern.
std::string string_pattern(const json& step) { return step["pattern"]["String"].get<std::string>(); }

// Prepend: the new bytes stand for the first character (as the tokenizers
// library aligns them), and nothing is prepended to empty text.
void prepend(MetaspaceTokenizer::Aligned& a, const std::string& p) {
  if (a.text.empty() || p.empty()) return;
  MetaspaceTokenizer::Aligned out;
  out.append(p, a.begin[0], a.end[0]);
  out.append_from(a, 0, a.text.size());
  a = std::move(out);
}

// Every occurrence of `pattern`, left to right, becomes `content`, which
// stands for the bytes the occurrence stood for.
void replace(MetaspaceTokenizer::Aligned& a, const std::string& pattern, const std::string& content) {
  if (a.text.find(pattern) == std::string::npos) return;
  MetaspaceTokenizer::Aligned out;
  for (std::size_t i = 0; i < a.text.size();) {
    if (a.text.compare(i, pattern.size(), pattern) == 0) {
      out.append(content, a.begin[i], a.end[i + pattern.size() - 1]);
      i += pattern.size();
    } else {
      out.append_from(a, i, i + 1);
      ++i;
    }
  }
  a = std::move(out);
}

// The pieces of `a` cut at each occurrence of `pattern`, which joins the
// piece before it, the piece after it, or stands alone; no empty pieces.
void split(const MetaspaceTokenizer::Aligned& a, const std::string& pattern,
           MetaspaceTokenizer::Step::Behavior behavior, std::vector<MetaspaceTokenizer::Aligned>& out) {
  using Step = MetaspaceTokenizer::Step;
  std::size_t start = 0;
  auto emit = [&](std::size_t from, std::size_t to) {
    if (to > from) out.push_back(a.slice(from, to));
  };
  for (std::size_t at = a.text.find(pattern); at != std::string::npos; at = a.text.find(pattern, at)) {
    const std::size_t after = at + pattern.size();
    if (behavior == Step::kMergedWithPrevious) {
      emit(start, after);
      start = after;
    } else if (behavior == Step::kMergedWithNext) {
      emit(start, at);
      start = at;
    } else {
      emit(start, at);
      emit(at, after);
      start = after;
    }
    at = after;
  }
  emit(start, a.text.size());
}

Result<MetaspaceTokenizer::Step> read_step(const json& s) {
  using Step = MetaspaceTokenizer::Step;
  const std::string type = s.value("type", std::string());
  Step step{Step::kPrepend, "", ""};
  if (type == "Prepend") {
    step.content = s["prepend"].get<std::string>();
  } else if (type == "Replace") {
    step.kind = Step::kReplace;
    step.pattern = string_pattern(s);
    step.content = s["content"].get<std::string>();
  } else if (type == "Metaspace") {
    step.kind = Step::kMetaspace;
    step.content = s["replacement"].get<std::string>();
    // Files before tokenizers 0.19 say add_prefix_space and always split.
    const std::string scheme = s.contains("prepend_scheme") && s["prepend_scheme"].is_string()
                                   ? s["prepend_scheme"].get<std::string>()
                                   : (s.value("add_prefix_space", true) ? "always" : "never");
    if (scheme == "always") {
      step.scheme = Step::kAlways;
    } else if (scheme == "first") {
      step.scheme = Step::kFirst;
    } else if (scheme == "never") {
      step.scheme = Step::kNever;
    } else {
      return Status::invalid_argument("Metaspace prepend_scheme " + json(scheme).dump() + " is not supported");
    }
    step.split = !s.contains("split") || !s["split"].is_boolean() || s["split"].get<bool>();
  } else if (type == "Split") {
    step.kind = Step::kSplit;
    step.pattern = string_pattern(s);
    const std::string behavior = s.value("behavior", std::string());
    step.behavior = behavior == "MergedWithPrevious" ? Step::kMergedWithPrevious
                    : behavior == "MergedWithNext"   ? Step::kMergedWithNext
                                                     : Step::kIsolated;
  } else {
    return Status::invalid_argument(s.dump().substr(0, 120) + " is not supported");
  }
  return step;
}

std::vector<json> steps_of(const json& j, const char* list_key) {
  if (j.is_object() && j.value("type", json()) == "Sequence") return j.value(list_key, json::array());
  if (j.is_null()) return {};
  return {j};
}

std::uint64_t pair_key(std::int32_t left, std::int32_t right) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) | static_cast<std::uint32_t>(right);
}

}  // namespace

MetaspaceTokenizer::MetaspaceTokenizer() { std::fill(std::begin(byte_ids_), std::end(byte_ids_), -1); }
MetaspaceTokenizer::~MetaspaceTokenizer() = default;

Status MetaspaceTokenizer::bad(const std::string& what) const { return Status::invalid_argument(path_ + ": " + what); }

Result<std::unique_ptr<MetaspaceTokenizer>> MetaspaceTokenizer::load(const std::string& path) {
  // read_file: under tailord, only inside the spec root.
  TAILOR_ASSIGN_OR_RETURN(const std::string text, read_file(path));
  TAILOR_ASSIGN_OR_RETURN(const dsl::TokenizerKind kind, dsl::check_tokenizer_json(text, path));
  if (kind != dsl::TokenizerKind::kMetaspaceBpe) {
    return Status::invalid_argument(path + ": a byte-level BPE tokenizer, not a SentencePiece-style one");
  }
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto tok = std::unique_ptr<MetaspaceTokenizer>(new MetaspaceTokenizer());
  tok->path_ = path;
  tok->cache_ = std::make_unique<MergeCache<Piece>>();
  TAILOR_ASSIGN_OR_RETURN(const json config, read_tokenizer_config(path));
  const std::string config_path = (std::filesystem::path(path).parent_path() / "tokenizer_config.json").string();
  TAILOR_ASSIGN_OR_RETURN(tok->class_,
                          dsl::metaspace_class(config.empty() ? std::string() : config.dump(), config_path));
  TAILOR_RETURN_IF_ERROR(tok->read_pipeline(j, config));
  TAILOR_RETURN_IF_ERROR(tok->read_model(j, config));
  TAILOR_RETURN_IF_ERROR(tok->read_bos_eos(config));
  char fp[96];
  // The file and what tokenizer_config.json decides: the class's pipeline
  // (its note), the unknown token, BOS and EOS.
  std::snprintf(fp, sizeof fp, "metaspace-v1:%016llx:%016llx:%d:%d:%d",
                static_cast<unsigned long long>(checksum64(text.data(), text.size())),
                static_cast<unsigned long long>(checksum64(tok->pipeline_note_.data(), tok->pipeline_note_.size())),
                tok->unk_, tok->bos_, tok->eos_);
  tok->fingerprint_ = fp;
  return tok;
}

Status MetaspaceTokenizer::read_pipeline(const json& j, const json& config) {
  const dsl::MetaspaceClass cls = class_;
  const std::string space = " ", meta = "\xE2\x96\x81";  // U+2581
  DecodeStep replace_meta{DecodeStep::kReplace, meta, space};
  if (cls == dsl::MetaspaceClass::kLlama) {
    // transformers 5's LlamaTokenizer: the file's normalizer, pre-tokenizer
    // and decoder give way to these (models/llama/tokenization_llama.py).
    auto flag = [&](const char* key, bool fallback) {
      return config.contains(key) && config[key].is_boolean() ? config[key].get<bool>() : fallback;
    };
    const bool prefix = flag("add_prefix_space", true), legacy = flag("legacy", false);
    Step metaspace{Step::kMetaspace, "", meta};
    metaspace.scheme = !prefix ? Step::kNever : legacy ? Step::kAlways : Step::kFirst;
    pre_tokenizer_ = {metaspace};
    decoder_ = {replace_meta, {DecodeStep::kByteFallback, "", ""}, {DecodeStep::kFuse, "", ""}};
    if (prefix) decoder_.push_back({DecodeStep::kStrip, "", space, 1, 0});
    pipeline_note_ = std::string(" (as transformers' LlamaTokenizer reads it: ") +
                     (!prefix  ? "no prefix"
                      : legacy ? "legacy, a prefix on every piece"
                               : "a prefix on the first piece") +
                     ")";
    return Status::ok();
  }
  if (cls == dsl::MetaspaceClass::kGemma) {
    // transformers 5's GemmaTokenizer (models/gemma/tokenization_gemma.py).
    normalizer_ = {Step{Step::kReplace, space, meta}};
    Step split{Step::kSplit, space, ""};
    split.behavior = Step::kMergedWithPrevious;
    pre_tokenizer_ = {split};
    decoder_ = {replace_meta, {DecodeStep::kByteFallback, "", ""}, {DecodeStep::kFuse, "", ""}};
    pipeline_note_ = " (as transformers' GemmaTokenizer reads it)";
    return Status::ok();
  }
  for (const json& s : steps_of(j.value("normalizer", json()), "normalizers")) {
    auto step = read_step(s);
    if (!step.is_ok()) return bad("normalizer " + step.status().message());
    normalizer_.push_back(*step);
  }
  for (const json& s : steps_of(j.value("pre_tokenizer", json()), "pretokenizers")) {
    auto step = read_step(s);
    if (!step.is_ok()) return bad("pre_tokenizer " + step.status().message());
    pre_tokenizer_.push_back(*step);
  }
  return read_decoder(j);
}

Status MetaspaceTokenizer::read_decoder(const json& j) {
  for (const json& s : steps_of(j.value("decoder", json()), "decoders")) {
    const std::string type = s.value("type", std::string());
    if (type == "Replace") {
      decoder_.push_back({DecodeStep::kReplace, string_pattern(s), s["content"].get<std::string>()});
    } else if (type == "ByteFallback") {
      decoder_.push_back({DecodeStep::kByteFallback, "", ""});
    } else if (type == "Fuse") {
      decoder_.push_back({DecodeStep::kFuse, "", ""});
    } else if (type == "Strip") {
      const json content = s.value("content", json(" "));
      if (!content.is_string() || content.get<std::string>().empty()) return bad("decoder Strip: no content character");
      auto count = [&](const char* key) {
        const json v = s.value(key, json(0));
        return v.is_number_unsigned() ? v.get<std::size_t>() : std::size_t{0};
      };
      decoder_.push_back({DecodeStep::kStrip, "", content.get<std::string>(), count("start"), count("stop")});
    } else {
      return bad("decoder " + s.dump().substr(0, 120) + " is not supported");
    }
  }
  return Status::ok();
}

Status MetaspaceTokenizer::read_model(const json& j, const json& config) {
  const json& model = j["model"];
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null() && model[key] != "") {
      return bad(std::string("model.") + key + " is not supported");
    }
  }
  if (model.contains("dropout") && !model["dropout"].is_null()) return bad("model.dropout is not supported");
  const json& vocab = model.value("vocab", json());
  if (!vocab.is_object() || vocab.empty()) return bad("model.vocab is not a non-empty object");
  std::int64_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!valid_token_id(it.value()))
      return bad("model.vocab[" + json(it.key()).dump() + "] is not an integer id in [0, 2^24)");
    vocab_.emplace(it.key(), it.value().get<std::int32_t>());
    max_id = std::max<std::int64_t>(max_id, it.value().get<std::int64_t>());
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    if (auto it = vocab_.find(name); it != vocab_.end()) byte_ids_[b] = it->second;
  }
  std::int32_t rank = 0;
  for (const json& m : model.value("merges", json::array())) {
    std::string left, right;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const std::size_t space = s.find(' ');
      if (space != std::string::npos && s.find(' ', space + 1) == std::string::npos) {
        left = s.substr(0, space);
        right = s.substr(space + 1);
      }
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    }
    const std::string where = "model.merges[" + std::to_string(rank) + "]";
    if (left.empty() || right.empty()) return bad(where + " is not a pair of tokens");
    const auto l = vocab_.find(left), r = vocab_.find(right), merged = vocab_.find(left + right);
    if (l == vocab_.end() || r == vocab_.end() || merged == vocab_.end()) {
      return bad(where + " " + json(left + " " + right).dump() + ": a token or the merged token is not in model.vocab");
    }
    // As the tokenizers library builds its map: a repeated pair takes its last rank.
    merges_[pair_key(l->second, r->second)] = {rank++, merged->second};
  }
  const dsl::MetaspaceClass cls = class_;
  std::string unk;
  if (cls == dsl::MetaspaceClass::kAsWritten) {
    byte_fallback_ = model.value("byte_fallback", false);
    fuse_unk_ = model.value("fuse_unk", false);
    if (model.contains("unk_token") && model["unk_token"].is_string()) unk = model["unk_token"].get<std::string>();
  } else {
    // Both classes build BPE(fuse_unk=True, byte_fallback=True); Llama's
    // without an unknown token.
    byte_fallback_ = fuse_unk_ = true;
    if (cls == dsl::MetaspaceClass::kGemma)
      unk = config.contains("unk_token") ? token_text(config["unk_token"]) : "<unk>";
  }
  if (auto it = vocab_.find(unk); !unk.empty() && it != vocab_.end()) unk_ = it->second;
  TAILOR_ASSIGN_OR_RETURN(added_, AddedTokens::read(j, path_));
  vocab_size_ = std::max(max_id, added_.max_id()) + 1;
  table_ = TokenTable(vocab_, added_, vocab_size_);
  return Status::ok();
}

Status MetaspaceTokenizer::read_bos_eos(const json& config) {
  auto id_of = [&](const std::string& t) -> std::int32_t {
    if (const AddedToken* a = added_.find(t)) return a->id;
    auto it = vocab_.find(t);
    return it == vocab_.end() ? -1 : it->second;
  };
  const bool gemma = class_ == dsl::MetaspaceClass::kGemma;
  TAILOR_ASSIGN_OR_RETURN(const SpecialIds ids,
                          special_ids(config, gemma ? "<bos>" : "<s>", gemma ? "<eos>" : "</s>", id_of, path_));
  bos_ = ids.bos;
  eos_ = ids.eos;
  declared_pad_ = ids.declared_pad;
  return Status::ok();
}

void MetaspaceTokenizer::merge_piece(std::string_view piece, std::vector<Piece>& out) const {
  struct Sym {
    std::int32_t id;
    std::uint32_t begin, len;
    std::int32_t prev, next;
  };
  std::vector<Sym> syms;
  syms.reserve(piece.size());
  auto push = [&](std::int32_t id, std::size_t begin, std::size_t len) {
    syms.push_back({id, static_cast<std::uint32_t>(begin), static_cast<std::uint32_t>(len), 0, 0});
  };
  // The tokenizers library's BPE::merge_word: a pending (fused) unknown is
  // written when the next character in the vocabulary comes.
  bool pending = false;
  std::size_t unk_begin = 0, unk_len = 0;
  std::string ch;
  for (std::size_t i = 0; i < piece.size();) {
    const std::size_t n = std::min(char_length(piece, i), piece.size() - i);
    ch.assign(piece.substr(i, n));
    if (auto it = vocab_.find(ch); it != vocab_.end()) {
      if (pending) push(unk_, unk_begin, unk_len);
      pending = false;
      push(it->second, i, n);
    } else {
      bool bytes = byte_fallback_;
      for (std::size_t k = 0; bytes && k < n; ++k)
        bytes = byte_ids_[static_cast<unsigned char>(piece[i + k])] >= 0;
      if (bytes) {
        for (std::size_t k = 0; k < n; ++k)
          push(byte_ids_[static_cast<unsigned char>(piece[i + k])], i + k, 1);
      } else if (unk_ >= 0) {
        if (pending && fuse_unk_) {
          unk_len += n;
        } else {
          if (pending) push(unk_, unk_begin, unk_len);
          pending = true;
          unk_begin = i;
          unk_len = n;
        }
      }
    }
    i += n;
  }
  if (pending) push(unk_, unk_begin, unk_len);
  if (syms.empty()) return;
  for (std::size_t k = 0; k < syms.size(); ++k) {
    syms[k].prev = static_cast<std::int32_t>(k) - 1;
    syms[k].next = k + 1 < syms.size() ? static_cast<std::int32_t>(k + 1) : -1;
  }
  // Lowest rank first, then leftmost (word.rs merge_all); entries left stale
  // by a merge are recognised and skipped when they come up.
  struct Candidate {
    std::int32_t rank, pos, merged;
    bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate> queue;
  auto consider = [&](std::int32_t pos) {
    const std::int32_t next = syms[static_cast<std::size_t>(pos)].next;
    if (next < 0) return;
    const auto it =
        merges_.find(pair_key(syms[static_cast<std::size_t>(pos)].id, syms[static_cast<std::size_t>(next)].id));
    if (it != merges_.end()) queue.push({it->second.first, pos, it->second.second});
  };
  for (std::size_t k = 0; k + 1 < syms.size(); ++k)
    consider(static_cast<std::int32_t>(k));
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Sym& s = syms[static_cast<std::size_t>(top.pos)];
    if (s.len == 0 || s.next < 0) continue;
    Sym& right = syms[static_cast<std::size_t>(s.next)];
    const auto it = merges_.find(pair_key(s.id, right.id));
    if (it == merges_.end() || it->second.second != top.merged) continue;
    s.id = top.merged;
    s.len += right.len;
    right.len = 0;
    s.next = right.next;
    if (s.next >= 0) syms[static_cast<std::size_t>(s.next)].prev = top.pos;
    if (s.prev >= 0) consider(s.prev);
    consider(top.pos);
  }
  for (std::int32_t k = 0; k >= 0; k = syms[static_cast<std::size_t>(k)].next) {
    const Sym& s = syms[static_cast<std::size_t>(k)];
    out.push_back({s.id, s.begin, s.begin + s.len});
  }
}

void MetaspaceTokenizer::encode_stretch(std::string_view text, std::size_t begin, std::size_t end,
                                        std::vector<std::int32_t>& out, Offsets* offsets) const {
  Aligned a;
  for (std::size_t i = begin; i < end;) {
    const std::size_t n = std::min(char_length(text, i), end - i);
    a.append(text.substr(i, n), static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i + n));
    i += n;
  }
  for (const Step& s : normalizer_) {
    if (s.kind == Step::kPrepend) prepend(a, s.content);
    if (s.kind == Step::kReplace) replace(a, s.pattern, s.content);
  }
  std::vector<Aligned> pieces;
  pieces.push_back(std::move(a));
  for (const Step& s : pre_tokenizer_) {
    std::vector<Aligned> next;
    for (Aligned& p : pieces) {
      if (s.kind == Step::kSplit) {
        split(p, s.pattern, s.behavior, next);
        continue;
      }
      // Metaspace (pre_tokenizers/metaspace.rs): spaces replaced, then the
      // replacement prepended unless the piece starts with it, for "first"
      // only where the piece starts the whole text.
      replace(p, " ", s.content);
      const bool starts = p.text.compare(0, s.content.size(), s.content) == 0;
      if (!starts && !p.text.empty() && (s.scheme == Step::kAlways || (s.scheme == Step::kFirst && p.begin[0] == 0))) {
        prepend(p, s.content);
      }
      if (s.split) {
        split(p, s.content, Step::kMergedWithNext, next);
      } else if (!p.text.empty()) {
        next.push_back(std::move(p));
      }
    }
    pieces = std::move(next);
  }
  std::vector<Piece> merged;
  for (const Aligned& p : pieces) {
    merged.clear();
    cache_->get(p.text, merged, [this](std::string_view s, std::vector<Piece>& into) { merge_piece(s, into); });
    for (const Piece& m : merged) {
      out.push_back(m.id);
      if (offsets == nullptr) continue;
      const auto first = p.begin.begin() + m.begin, last = p.begin.begin() + m.end;
      const auto first_end = p.end.begin() + m.begin, last_end = p.end.begin() + m.end;
      offsets->emplace_back(*std::min_element(first, last), *std::max_element(first_end, last_end));
    }
  }
}

void MetaspaceTokenizer::encode_text(std::string_view text, std::vector<std::int32_t>& out, Offsets* offsets) const {
  added_.split(
      text, [&](std::size_t begin, std::size_t end) { encode_stretch(text, begin, end, out, offsets); },
      [&](const AddedToken& t, std::size_t at) {
        out.push_back(t.id);
        if (offsets)
          offsets->emplace_back(static_cast<std::uint32_t>(at), static_cast<std::uint32_t>(at + t.content.size()));
      });
}

std::vector<std::int32_t> MetaspaceTokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> out;
  encode_text(text, out, nullptr);
  return out;
}

Result<EncodedText> MetaspaceTokenizer::encode_with_offsets(std::string_view text) const {
  EncodedText out;
  encode_text(text, out.ids, &out.offsets);
  return out;
}

bool MetaspaceTokenizer::is_special(std::int32_t id) const {
  return id >= 0 && static_cast<std::size_t>(id) < table_.special.size() &&
         table_.special[static_cast<std::size_t>(id)];
}

std::string MetaspaceTokenizer::decode(const std::vector<std::int32_t>& ids) const {
  std::vector<std::string> tokens;
  for (std::int32_t id : ids) {
    if (id < 0 || id >= vocab_size_ || table_.special[static_cast<std::size_t>(id)]) continue;
    tokens.push_back(table_.text[static_cast<std::size_t>(id)]);
  }
  // The decoders of the tokenizers library, each over the whole list.
  for (const DecodeStep& d : decoder_) {
    if (d.kind == DecodeStep::kReplace) {
      for (std::string& t : tokens) {
        std::string r;
        for (std::size_t i = 0; i < t.size();) {
          if (t.compare(i, d.pattern.size(), d.pattern) == 0) {
            r += d.content;
            i += d.pattern.size();
          } else {
            r += t[i++];
          }
        }
        t = std::move(r);
      }
    } else if (d.kind == DecodeStep::kByteFallback) {
      // Runs of <0xNN> tokens become their bytes when those are UTF-8, else
      // one U+FFFD per byte (decoders/byte_fallback.rs).
      std::vector<std::string> out;
      std::string bytes;
      std::size_t count = 0;
      auto flush = [&] {
        if (count == 0) return;
        if (jinja::is_valid_utf8(bytes)) {
          out.push_back(bytes);
        } else {
          for (std::size_t k = 0; k < count; ++k)
            out.emplace_back("\xEF\xBF\xBD");
        }
        bytes.clear();
        count = 0;
      };
      for (const std::string& t : tokens) {
        const bool byte = t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
                          std::isxdigit(static_cast<unsigned char>(t[3])) &&
                          std::isxdigit(static_cast<unsigned char>(t[4]));
        if (byte) {
          bytes += static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16));
          ++count;
        } else {
          flush();
          out.push_back(t);
        }
      }
      flush();
      tokens = std::move(out);
    } else if (d.kind == DecodeStep::kFuse) {
      std::string all;
      for (const std::string& t : tokens)
        all += t;
      tokens.assign(1, std::move(all));
    } else {
      for (std::string& t : tokens) {
        std::size_t from = 0, to = t.size();
        for (std::size_t k = 0; k < d.start && t.compare(from, d.content.size(), d.content) == 0 && from < to; ++k) {
          from += d.content.size();
        }
        for (std::size_t k = 0; k < d.stop && to >= from + d.content.size() &&
                                t.compare(to - d.content.size(), d.content.size(), d.content) == 0;
             ++k) {
          to -= d.content.size();
        }
        t = t.substr(from, to - from);
      }
    }
  }
  std::string text;
  for (const std::string& t : tokens)
    text += t;
  return text;
}

}  // namespace tailor::runner::data
