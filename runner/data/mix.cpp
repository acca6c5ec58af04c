#include "runner/data/mix.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <utility>

#include "core/text.h"
#include "runner/data/seeded_order.h"

namespace tailor::runner::data {
namespace {

// Integer shares of `total` in proportion to `weights` that add up to it:
// floors first, then one more to the largest remainders (ties to the
// earlier dataset).
std::vector<std::int64_t> apportion(std::int64_t total, const std::vector<double>& weights) {
  const double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<std::int64_t> out(weights.size());
  std::vector<std::pair<double, std::size_t>> remainders;
  std::int64_t given = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    const double exact = static_cast<double>(total) * weights[i] / sum;
    out[i] = static_cast<std::int64_t>(std::floor(exact));
    given += out[i];
    remainders.emplace_back(exact - static_cast<double>(out[i]), i);
  }
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (std::size_t k = 0; given < total && k < remainders.size(); ++k, ++given)
    ++out[remainders[k].second];
  return out;
}

// `count` examples of a dataset of n: whole passes in seeded orders (a new
// order per pass, stream (seed, dataset, pass)), the last pass cut short.
std::vector<std::int64_t> take_examples(std::int64_t n, std::int64_t count, std::uint64_t seed, std::size_t dataset,
                                        bool keep_first_pass_order) {
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(count));
  for (std::uint64_t pass = 0; static_cast<std::int64_t>(out.size()) < count; ++pass) {
    const std::int64_t left = count - static_cast<std::int64_t>(out.size());
    if (left >= n && keep_first_pass_order) {
      for (std::int64_t i = 0; i < n; ++i)
        out.push_back(i);  // a whole copy, as stored
      continue;
    }
    const auto order =
        seeded_permutation(static_cast<std::size_t>(n), seed ^ (0x9E3779B97F4A7C15ull * (dataset + 1)), pass);
    for (std::int64_t i = 0; i < std::min(left, n); ++i)
      out.push_back(static_cast<std::int64_t>(order[static_cast<std::size_t>(i)]));
  }
  return out;
}

}  // namespace

Result<MixedData> mix_datasets(const std::vector<MixInput>& inputs, dsl::DataMix mix, std::uint64_t seed, bool pairs) {
  const std::size_t unit = pairs ? 2 : 1;
  MixedData out;
  std::vector<double> weights;
  for (const MixInput& in : inputs) {
    out.examples.push_back(static_cast<std::int64_t>(in.store.documents() / unit));
    weights.push_back(in.weight);
  }
  if (mix == dsl::DataMix::kConcat) {
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const double w = weights[i];
      const auto whole = static_cast<std::int64_t>(std::floor(w));
      out.taken.push_back(whole * out.examples[i] + static_cast<std::int64_t>(std::llround(
                                                        (w - std::floor(w)) * static_cast<double>(out.examples[i]))));
    }
  } else {
    // The shortest epoch in which every dataset is taken whole: quota_i =
    // N w_i / W >= n_i for all i.
    const double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
    std::int64_t total = 0;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      total = std::max(
          total, static_cast<std::int64_t>(std::ceil(static_cast<double>(out.examples[i]) * sum / weights[i] - 1e-9)));
    }
    out.taken = apportion(total, weights);
    for (std::size_t i = 0; i < inputs.size(); ++i)
      out.taken[i] = std::max(out.taken[i], out.examples[i]);
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (out.taken[i] == 0) {
      char weight[32];
      std::snprintf(weight, sizeof weight, "%g", weights[i]);
      return Status::invalid_argument("data.train[" + std::to_string(i) + "] (" + inputs[i].path + "): weight " +
                                      weight + " of " + group_thousands(out.examples[i]) +
                                      " examples takes none of them");
    }
  }
  // Which examples, per dataset; then the order of the mix.
  std::vector<std::vector<std::int64_t>> picks(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    picks[i] = take_examples(out.examples[i], out.taken[i], seed, i, mix == dsl::DataMix::kConcat);
  }
  std::vector<std::pair<std::uint32_t, std::int64_t>> order;  // (dataset, index into picks)
  if (mix == dsl::DataMix::kConcat) {
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      for (std::int64_t k = 0; k < out.taken[i]; ++k)
        order.emplace_back(static_cast<std::uint32_t>(i), k);
    }
  } else {
    // Dataset i's k-th example at (k + 0.5) / taken_i of the way: merged,
    // the datasets alternate in proportion everywhere along the epoch.
    std::vector<std::pair<double, std::pair<std::uint32_t, std::int64_t>>> keyed;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      for (std::int64_t k = 0; k < out.taken[i]; ++k) {
        keyed.push_back(
            {(static_cast<double>(k) + 0.5) / static_cast<double>(out.taken[i]), {static_cast<std::uint32_t>(i), k}});
      }
    }
    std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& k : keyed)
      order.push_back(k.second);
  }
  std::int64_t tokens = 0;
  for (const auto& [i, k] : order) {
    const std::int64_t e = picks[i][static_cast<std::size_t>(k)];
    for (std::size_t u = 0; u < unit; ++u)
      tokens += inputs[i].store.length(static_cast<std::size_t>(e) * unit + u);
  }
  std::vector<std::int32_t> ids;
  std::vector<std::uint8_t> trained;
  std::vector<std::int64_t> offsets{0};
  // Each document's value (a margin, a kto label) goes with it; a dataset
  // without values gives 0s, as its store reads.
  const bool valued =
      std::any_of(inputs.begin(), inputs.end(), [](const MixInput& in) { return in.store.has_values(); });
  std::vector<float> values;
  ids.reserve(static_cast<std::size_t>(tokens));
  trained.reserve(static_cast<std::size_t>(tokens));
  offsets.reserve(order.size() * unit + 1);
  out.source.reserve(order.size());
  out.record.reserve(order.size());
  for (const auto& [i, k] : order) {
    const std::int64_t e = picks[i][static_cast<std::size_t>(k)];
    for (std::size_t u = 0; u < unit; ++u) {
      const std::size_t doc = static_cast<std::size_t>(e) * unit + u;
      const auto t = inputs[i].store.tokens(doc);
      const auto m = inputs[i].store.trained(doc);
      ids.insert(ids.end(), t.begin(), t.end());
      trained.insert(trained.end(), m.begin(), m.end());
      offsets.push_back(static_cast<std::int64_t>(ids.size()));
      if (valued) values.push_back(inputs[i].store.value(doc));
    }
    out.source.push_back(i);
    out.record.push_back(e);
  }
  out.store = TokenStore::from_vectors(std::move(ids), std::move(trained), std::move(offsets), std::move(values));
  return out;
}

std::string describe(const MixedData& mixed, const std::vector<MixInput>& inputs) {
  std::int64_t total = 0;
  for (const std::int64_t t : mixed.taken)
    total += t;
  std::string out;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    char share[32];
    std::snprintf(share, sizeof share, "%.1f%%",
                  total > 0 ? 100.0 * static_cast<double>(mixed.taken[i]) / static_cast<double>(total) : 0.0);
    if (!out.empty()) out += "; ";
    out += inputs[i].path + ": " + group_thousands(mixed.examples[i]) + " examples -> " +
           group_thousands(mixed.taken[i]) + " (" + share + ")";
  }
  return out;
}

}  // namespace tailor::runner::data
