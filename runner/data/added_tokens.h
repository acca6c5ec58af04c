// What the two tokenizer.json readers (bpe_tokenizer.h: byte-level BPE;
// metaspace_tokenizer.h: SentencePiece-style BPE) share: the added tokens,
// matched in the text before anything else, as the tokenizers library
// matches them (longest first at each position, the text as written), and
// the tokenizer_config.json beside the file, which names BOS, EOS, padding
// and the transformers class that may rebuild the pipeline.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace tailor::runner::data {

struct AddedToken {
  std::string content;
  std::int32_t id = -1;
  bool special = false;
};

class AddedTokens {
 public:
  // tokenizer.json's "added_tokens" (absent: none). InvalidArgument naming
  // `path` and the entry: not {id in [0, 2^24), content}, or lstrip,
  // rstrip or single_word set (not supported).
  static Result<AddedTokens> read(const nlohmann::json& tokenizer_json, const std::string& path);

  const std::vector<AddedToken>& all() const { return tokens_; }  // longest first
  const AddedToken* find(std::string_view content) const;
  std::int64_t max_id() const;

  // Walks `text`: on_text(begin, end) for each non-empty stretch between
  // added tokens and on_token(token, begin) for each one matched, in order.
  template <typename OnText, typename OnToken>
  void split(std::string_view text, OnText&& on_text, OnToken&& on_token) const {
    std::size_t start = 0;
    for (std::size_t i = 0; i < text.size();) {
      const AddedToken* hit = first_byte_[static_cast<unsigned char>(text[i])] ? match(text, i) : nullptr;
      if (hit == nullptr) {
        ++i;
        continue;
      }
      if (i > start) on_text(start, i);
      on_token(*hit, i);
      i += hit->content.size();
      start = i;
    }
    if (text.size() > start) on_text(start, text.size());
  }

 private:
  const AddedToken* match(std::string_view text, std::size_t at) const;
  std::vector<AddedToken> tokens_;
  std::array<bool, 256> first_byte_{};  // bytes an added token starts with
};

// Each id's text (its vocabulary entry, or an added token's content), and
// whether it is an added token and a special one: the decoders' table.
struct TokenTable {
  std::vector<std::string> text;
  std::vector<bool> special, added;
  TokenTable() = default;
  // Ids in [0, size): the vocabulary's and the added tokens'.
  template <typename Vocab>
  TokenTable(const Vocab& vocab, const AddedTokens& added_tokens, std::int64_t size)
      : text(static_cast<std::size_t>(size)),
        special(static_cast<std::size_t>(size)),
        added(static_cast<std::size_t>(size)) {
    for (const auto& [t, id] : vocab)
      text[static_cast<std::size_t>(id)] = t;
    for (const AddedToken& a : added_tokens.all()) {
      text[static_cast<std::size_t>(a.id)] = a.content;
      special[static_cast<std::size_t>(a.id)] = a.special;
      added[static_cast<std::size_t>(a.id)] = true;
    }
  }
};

// Words (or pieces) already merged, by their text: real text repeats its
// words, and merging is an encoder's cost (the tokenizers library caches
// likewise). Bounded; a mutex keeps the tokenizer shareable between threads.
template <typename Piece>
class MergeCache {
 public:
  // The pieces of `key` into `out`: the cached ones, else merge(key, out)'s,
  // kept when the key is short (longer ones rarely repeat).
  template <typename Merge>
  void get(std::string_view key, std::vector<Piece>& out, Merge&& merge) {
    const bool cacheable = key.size() <= kMaxKeyBytes;
    if (cacheable) {
      std::lock_guard<std::mutex> lock(mu_);
      if (const auto it = entries_.find(std::string(key)); it != entries_.end()) {
        out = it->second;
        return;
      }
    }
    merge(key, out);
    if (!cacheable) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (entries_.size() >= kMaxEntries) entries_.clear();
    entries_.emplace(std::string(key), out);
  }

 private:
  static constexpr std::size_t kMaxEntries = 1 << 16;
  static constexpr std::size_t kMaxKeyBytes = 256;
  std::mutex mu_;
  std::unordered_map<std::string, std::vector<Piece>> entries_;
};

// tokenizer_config.json beside the tokenizer file `tokenizer_path`: an
// empty object when there is none; its read errors (under tailord, only
// inside the spec root) otherwise. A file that is not a JSON object counts
// as none, as transformers would fail on it before Tailor matters.
Result<nlohmann::json> read_tokenizer_config(const std::string& tokenizer_path);

// BOS, EOS and the declared padding of a tokenizer.
struct SpecialIds {
  std::int32_t bos = -1, eos = -1, declared_pad = -1;
};

// From tokenizer_config.json (`config`): its bos_token, eos_token and
// pad_token, else the defaults given, each looked up with `id_of` (-1: not
// in the vocabulary). A tokenizer without a BOS starts documents with the
// EOS, padding without a declared one is the EOS. InvalidArgument naming
// `path` when there is no EOS: training needs it between documents.
template <typename IdOf>
Result<SpecialIds> special_ids(const nlohmann::json& config, const std::string& bos_default, std::string eos_default,
                               IdOf&& id_of, const std::string& path);

// Ids index tables of that size: a bound keeps a corrupt file from asking
// for gigabytes (the largest real vocabularies are ~256k).
constexpr std::int64_t kMaxTokenId = std::int64_t{1} << 24;
bool valid_token_id(const nlohmann::json& v);

// The text of a token given as a string or as {"content": ...}; empty if neither.
std::string token_text(const nlohmann::json& j);

template <typename IdOf>
Result<SpecialIds> special_ids(const nlohmann::json& config, const std::string& bos_default, std::string eos_default,
                               IdOf&& id_of, const std::string& path) {
  std::string bos_text = bos_default, pad_text;
  if (config.contains("bos_token")) bos_text = token_text(config["bos_token"]);
  if (config.contains("eos_token") && !token_text(config["eos_token"]).empty())
    eos_default = token_text(config["eos_token"]);
  if (config.contains("pad_token")) pad_text = token_text(config["pad_token"]);
  SpecialIds ids;
  ids.eos = id_of(eos_default);
  if (ids.eos < 0) {
    return Status::invalid_argument(path + ": no EOS token (\"" + eos_default +
                                    "\" is not in the vocabulary; tokenizer_config.json's eos_token names it): "
                                    "training needs it to mark document boundaries");
  }
  ids.bos = bos_text.empty() ? ids.eos : id_of(bos_text);
  if (ids.bos < 0) ids.bos = ids.eos;
  ids.declared_pad = pad_text.empty() ? -1 : id_of(pad_text);
  if (ids.declared_pad < 0) ids.declared_pad = ids.eos;
  return ids;
}

}  // namespace tailor::runner::data
