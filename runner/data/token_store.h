// Tokenized documents stored flat: one array of token ids, one of trained
// flags and one of document offsets, and optionally a number per document
// (a reward pair's margin), either owned or views into memory kept alive by
// someone else (the token cache's mmap). A corpus costs 13 bytes per token
// plus 8 (12 with values) per document and no heap object per document.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace tailor::runner::data {

// One training document as separate vectors: the form tests and small
// callers build by hand.
struct Example {
  std::vector<std::int32_t> tokens;   // BOS + content + EOS
  std::vector<std::uint8_t> trained;  // same length; trained[i] = 1 when predicting tokens[i] counts
                                      // in the loss. Always 0 for the leading BOS (nothing predicts
                                      // it); 0 on the prompt of prompt/completion pairs.
};

// Immutable; copies share the storage (cheap), so any number of copies may
// be read from several threads. Document d is tokens[offsets[d],
// offsets[d+1]) with the same range of trained.
class TokenStore {
 public:
  TokenStore();  // no documents

  // Takes ownership. Requires offsets.size() >= 1, offsets[0] == 0,
  // non-decreasing offsets, offsets.back() == tokens.size() ==
  // trained.size(); violations are bugs (TAILOR_CHECK).
  // `values`: empty (every document's value 0) or one per document.
  static TokenStore from_vectors(std::vector<std::int32_t> tokens, std::vector<std::uint8_t> trained,
                                 std::vector<std::int64_t> offsets, std::vector<float> values = {});
  // Views into memory that `owner` keeps alive (e.g. a mapping); the same
  // requirements. The store holds `owner` until its last copy is gone.
  static TokenStore from_views(std::shared_ptr<const void> owner, std::span<const std::int32_t> tokens,
                               std::span<const std::uint8_t> trained, std::span<const std::int64_t> offsets,
                               std::span<const float> values = {});
  static TokenStore from_examples(const std::vector<Example>& examples);
  std::vector<Example> to_examples() const;

  std::size_t documents() const { return offsets_.empty() ? 0 : offsets_.size() - 1; }
  std::int64_t total_tokens() const { return static_cast<std::int64_t>(tokens_.size()); }
  std::int64_t length(std::size_t doc) const { return offsets_[doc + 1] - offsets_[doc]; }
  std::span<const std::int32_t> tokens(std::size_t doc) const {
    return tokens_.subspan(static_cast<std::size_t>(offsets_[doc]), static_cast<std::size_t>(length(doc)));
  }
  std::span<const std::uint8_t> trained(std::size_t doc) const {
    return trained_.subspan(static_cast<std::size_t>(offsets_[doc]), static_cast<std::size_t>(length(doc)));
  }
  // The document's number (data.margin_field: its pair's margin); 0 when
  // the store has none.
  float value(std::size_t doc) const { return values_.empty() ? 0.0f : values_[doc]; }
  bool has_values() const { return !values_.empty(); }
  std::span<const float> all_values() const { return values_; }  // empty or one per document
  std::span<const std::int32_t> all_tokens() const { return tokens_; }
  std::span<const std::uint8_t> all_trained() const { return trained_; }
  std::span<const std::int64_t> offsets() const { return offsets_; }

 private:
  struct Private {};
  explicit TokenStore(Private) {}

  std::shared_ptr<const void> owner_;
  std::span<const std::int32_t> tokens_;
  std::span<const std::uint8_t> trained_;
  std::span<const std::int64_t> offsets_;
  std::span<const float> values_;
};

// Two stores with the same documents, tokens, trained flags and values
// (none reads as zeros).
bool same_documents(const TokenStore& a, const TokenStore& b);

}  // namespace tailor::runner::data
