#include "runner/data/token_store.h"

#include <algorithm>
#include <utility>

#include "core/check.h"

namespace tailor::runner::data {
namespace {

struct Owned {
  std::vector<std::int32_t> tokens;
  std::vector<std::uint8_t> trained;
  std::vector<std::int64_t> offsets;
  std::vector<float> values;
};

void check_layout(std::span<const std::int32_t> tokens, std::span<const std::uint8_t> trained,
                  std::span<const std::int64_t> offsets, std::span<const float> values) {
  TAILOR_CHECK(!offsets.empty());
  TAILOR_CHECK(offsets.front() == 0);
  TAILOR_CHECK(std::is_sorted(offsets.begin(), offsets.end()));
  TAILOR_CHECK(offsets.back() == static_cast<std::int64_t>(tokens.size()));
  TAILOR_CHECK(trained.size() == tokens.size());
  TAILOR_CHECK(values.empty() || values.size() + 1 == offsets.size());
}

}  // namespace

TokenStore::TokenStore() : TokenStore(from_vectors({}, {}, {0})) {}

TokenStore TokenStore::from_vectors(std::vector<std::int32_t> tokens, std::vector<std::uint8_t> trained,
                                    std::vector<std::int64_t> offsets, std::vector<float> values) {
  auto owned =
      std::make_shared<Owned>(Owned{std::move(tokens), std::move(trained), std::move(offsets), std::move(values)});
  const Owned& o = *owned;
  return from_views(std::move(owned), o.tokens, o.trained, o.offsets, o.values);
}

TokenStore TokenStore::from_views(std::shared_ptr<const void> owner, std::span<const std::int32_t> tokens,
                                  std::span<const std::uint8_t> trained, std::span<const std::int64_t> offsets,
                                  std::span<const float> values) {
  check_layout(tokens, trained, offsets, values);
  TokenStore s(Private{});
  s.owner_ = std::move(owner);
  s.tokens_ = tokens;
  s.trained_ = trained;
  s.offsets_ = offsets;
  s.values_ = values;
  return s;
}

TokenStore TokenStore::from_examples(const std::vector<Example>& examples) {
  std::size_t total = 0;
  for (const Example& ex : examples) total += ex.tokens.size();
  std::vector<std::int32_t> tokens;
  std::vector<std::uint8_t> trained;
  std::vector<std::int64_t> offsets{0};
  tokens.reserve(total);
  trained.reserve(total);
  offsets.reserve(examples.size() + 1);
  for (const Example& ex : examples) {
    TAILOR_CHECK(ex.trained.size() == ex.tokens.size());
    tokens.insert(tokens.end(), ex.tokens.begin(), ex.tokens.end());
    trained.insert(trained.end(), ex.trained.begin(), ex.trained.end());
    offsets.push_back(static_cast<std::int64_t>(tokens.size()));
  }
  return from_vectors(std::move(tokens), std::move(trained), std::move(offsets));
}

std::vector<Example> TokenStore::to_examples() const {
  std::vector<Example> out(documents());
  for (std::size_t d = 0; d < out.size(); ++d) {
    out[d].tokens.assign(tokens(d).begin(), tokens(d).end());
    out[d].trained.assign(trained(d).begin(), trained(d).end());
  }
  return out;
}

bool same_documents(const TokenStore& a, const TokenStore& b) {
  if (!std::ranges::equal(a.offsets(), b.offsets()) || !std::ranges::equal(a.all_tokens(), b.all_tokens()) ||
      !std::ranges::equal(a.all_trained(), b.all_trained())) {
    return false;
  }
  for (std::size_t d = 0; d < a.documents(); ++d) {
    if (a.value(d) != b.value(d)) return false;
  }
  return true;
}

}  // namespace tailor::runner::data
