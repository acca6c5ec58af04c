#include "runner/data/batcher.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>

#include "core/check.h"
#include "runner/data/seeded_order.h"

namespace tailor::runner::data {
namespace {

constexpr std::int32_t kIgnore = -100;  // PyTorch cross_entropy's default ignore_index

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// A batch of rows x cols, all padding until filled.
Batch blank_batch(std::int64_t rows, std::int64_t cols, std::int32_t pad_id) {
  Batch b;
  b.rows = rows;
  b.seq_len = cols;
  const auto cells = static_cast<std::size_t>(rows * cols);
  b.inputs.assign(cells, pad_id);
  b.targets.assign(cells, kIgnore);
  b.positions.assign(cells, 0);
  b.segment_ids.assign(cells, -1);
  return b;
}

}  // namespace

double PackingStats::efficiency() const {
  const double cells = static_cast<double>(rows_per_epoch) * static_cast<double>(seq_len);
  return cells > 0 ? static_cast<double>(input_cells) / cells : 0.0;
}

Batcher::Batcher(TokenStore store, std::int64_t seq_len, dsl::Packing packing, dsl::LongExample on_long,
                 std::int64_t micro_batch, std::uint64_t seed, std::int32_t pad_id, bool pairs)
    : store_(std::move(store)),
      seq_len_(seq_len),
      packing_(packing),
      micro_batch_(micro_batch),
      seed_(seed),
      pad_id_(pad_id),
      pairs_(pairs) {
  TAILOR_CHECK(store_.documents() > 0);
  TAILOR_CHECK(!pairs_ || (packing_ == dsl::Packing::kNone && store_.documents() % 2 == 0));
  TAILOR_CHECK(seq_len_ >= 1);
  TAILOR_CHECK(micro_batch_ >= 1);
  for (std::size_t d = 0; d < store_.documents(); ++d) TAILOR_CHECK(store_.length(d) >= 2);
  total_tokens_ = store_.total_tokens();
  stats_.packing = packing_;
  stats_.seq_len = seq_len_;
  stats_.documents = static_cast<std::int64_t>(store_.documents());
  if (packing_ == dsl::Packing::kStream) {
    // A stream of N tokens holds N - 1 (input, next token) pairs.
    rows_per_epoch_ = ceil_div(total_tokens_ - 1, seq_len_);
    stats_.examples = stats_.documents;
    stats_.input_cells = total_tokens_ - 1;
  } else {
    select_documents(on_long);
    if (packing_ == dsl::Packing::kWholeExamples) {
      pack_first_fit_decreasing();
      rows_per_epoch_ = static_cast<std::int64_t>(bin_starts_.size()) - 1;
    } else {
      rows_per_epoch_ = static_cast<std::int64_t>(kept_.size());
    }
  }
  stats_.rows_per_epoch = pairs_ ? 2 * rows_per_epoch_ : rows_per_epoch_;
}

Batcher::Batcher(const std::vector<Example>& examples, std::int64_t seq_len, dsl::Packing packing,
                 dsl::LongExample on_long, std::int64_t micro_batch, std::uint64_t seed, std::int32_t pad_id)
    : Batcher(TokenStore::from_examples(examples), seq_len, packing, on_long, micro_batch, seed, pad_id) {}

Batcher::Batcher(TokenStore store, std::int64_t seq_len, bool packing, std::int64_t micro_batch,
                 std::uint64_t seed, std::int32_t pad_id)
    : Batcher(std::move(store), seq_len, packing ? dsl::Packing::kStream : dsl::Packing::kNone,
              dsl::LongExample::kTruncate, micro_batch, seed, pad_id) {}

Batcher::Batcher(const std::vector<Example>& examples, std::int64_t seq_len, bool packing,
                 std::int64_t micro_batch, std::uint64_t seed, std::int32_t pad_id)
    : Batcher(TokenStore::from_examples(examples), seq_len, packing, micro_batch, seed, pad_id) {}

bool Batcher::too_long(std::size_t d) const { return store_.length(d) > seq_len_ + 1; }

bool Batcher::trains(std::size_t d) const {
  // Searched from the end: an untruncated example's EOS is trained, so
  // this usually looks at one flag.
  const auto used = store_.trained(d).subspan(1, static_cast<std::size_t>(row_length(d) - 1));
  return std::find(used.rbegin(), used.rend(), std::uint8_t{1}) != used.rend();
}

void Batcher::select_documents(dsl::LongExample on_long) {
  kept_.reserve(store_.documents());
  const std::size_t step = pairs_ ? 2 : 1;
  for (std::size_t d = 0; d < store_.documents(); d += step) {
    // A pair is kept or dropped whole.
    const bool long_one = too_long(d) || (pairs_ && too_long(d + 1));
    if (long_one && on_long == dsl::LongExample::kDrop) {
      ++stats_.dropped;
      continue;
    }
    if (!trains(d) || (pairs_ && !trains(d + 1))) {
      ++stats_.dropped;
      ++stats_.dropped_untrained;
      continue;
    }
    if (long_one) ++stats_.truncated;
    kept_.push_back(d);
    stats_.input_cells += row_length(d) - 1;
    if (pairs_) stats_.input_cells += row_length(d + 1) - 1;
  }
  stats_.examples = static_cast<std::int64_t>(kept_.size());
}

void Batcher::pack_first_fit_decreasing() {
  // Longest first (ties by document, so the packing is the same everywhere).
  std::vector<std::size_t> items = kept_;
  std::sort(items.begin(), items.end(), [&](std::size_t a, std::size_t b) {
    const std::int64_t la = row_length(a), lb = row_length(b);
    return la != lb ? la > lb : a < b;
  });
  // First fit in O(n log n): a max-tree over the room left in each
  // potential row finds the first row with room. First fit never leaves two
  // rows at most half full, so it needs fewer than 2 x cells / seq_len + 1
  // rows (and never more than one per item).
  const auto most_rows = static_cast<std::size_t>(
      std::min<std::int64_t>(static_cast<std::int64_t>(items.size()), 2 * stats_.input_cells / seq_len_ + 1));
  std::size_t leaves = 1;
  while (leaves < most_rows) leaves <<= 1;
  std::vector<std::int64_t> room(2 * leaves, seq_len_);
  std::vector<std::size_t> bin_of(items.size());
  std::size_t bins = 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::int64_t cols = row_length(items[i]) - 1;  // <= seq_len: every item fits an empty row
    TAILOR_CHECK(room[1] >= cols);
    std::size_t node = 1;
    while (node < leaves) node = room[2 * node] >= cols ? 2 * node : 2 * node + 1;
    bin_of[i] = node - leaves;
    bins = std::max(bins, bin_of[i] + 1);
    room[node] -= cols;
    for (node /= 2; node >= 1; node /= 2) room[node] = std::max(room[2 * node], room[2 * node + 1]);
  }
  // Rows as contiguous runs of documents (a counting sort by row).
  bin_starts_.assign(bins + 1, 0);
  for (std::size_t i = 0; i < items.size(); ++i) ++bin_starts_[bin_of[i] + 1];
  for (std::size_t b = 0; b < bins; ++b) bin_starts_[b + 1] += bin_starts_[b];
  bin_docs_.resize(items.size());
  std::vector<std::int64_t> fill(bin_starts_.begin(), bin_starts_.end() - 1);
  for (std::size_t i = 0; i < items.size(); ++i) {
    bin_docs_[static_cast<std::size_t>(fill[bin_of[i]]++)] = items[i];
  }
  kept_.clear();  // the rows say it all now
  kept_.shrink_to_fit();
}

std::int64_t Batcher::rows_per_epoch() const { return rows_per_epoch_; }

std::int64_t Batcher::batches_per_epoch() const { return ceil_div(rows_per_epoch_, micro_batch_); }

Batcher::State Batcher::state() const { return state_; }

Batcher::Position Batcher::position() const {
  const Order order = make_order(state_.epoch);
  const auto index = static_cast<std::size_t>(state_.index);
  switch (packing_) {
    case dsl::Packing::kNone:
      return {kept_[order.docs[index]], 0};
    case dsl::Packing::kWholeExamples:
      return {bin_docs_[static_cast<std::size_t>(bin_starts_[order.docs[index]])], 0};
    case dsl::Packing::kStream: {
      const std::int64_t row_start = state_.index * seq_len_;
      const auto i = static_cast<std::size_t>(
          std::upper_bound(order.starts.begin(), order.starts.end(), row_start) - order.starts.begin() - 1);
      return {order.docs[i], row_start - order.starts[i]};
    }
  }
  return {};
}

void Batcher::restore(State s) {
  TAILOR_CHECK(rows_per_epoch_ > 0);
  s.epoch = std::max<std::int64_t>(s.epoch, 0);
  s.index = std::max<std::int64_t>(s.index, 0);
  state_ = State{s.epoch + s.index / rows_per_epoch_, s.index % rows_per_epoch_};
}

double Batcher::epoch_progress() const {
  return static_cast<double>(state_.epoch) +
         static_cast<double>(state_.index) / static_cast<double>(rows_per_epoch_);
}

Batch Batcher::next() {
  TAILOR_CHECK(rows_per_epoch_ > 0);
  std::vector<State> rows;
  const Order* orders[2] = {nullptr, nullptr};
  for (std::int64_t r = 0; r < micro_batch_; ++r) {
    rows.push_back(state_);
    if (++state_.index == rows_per_epoch_) state_ = State{state_.epoch + 1, 0};
  }
  // A batch spans at most two epochs (micro_batch may exceed an epoch's
  // rows only for tiny data; then it spans more and orders are rebuilt).
  orders[0] = &order_for(rows.front().epoch);
  orders[1] = &order_for(rows.back().epoch);
  if (rows.back().epoch - rows.front().epoch > 1) {
    // Rare: rebuild per row below.
    orders[0] = orders[1] = nullptr;
  }
  return batch_of(rows, orders);
}

Batch Batcher::pass_batch(std::int64_t k) {
  TAILOR_CHECK(k >= 0 && k < batches_per_epoch());
  if (stored_.empty()) {
    // make_order's sources (documents of the stream; rows otherwise) unshuffled.
    Order order;
    order.docs.resize(packing_ == dsl::Packing::kStream ? store_.documents()
                                                        : static_cast<std::size_t>(rows_per_epoch_));
    std::iota(order.docs.begin(), order.docs.end(), std::size_t{0});
    if (packing_ == dsl::Packing::kStream) {
      order.starts.resize(order.docs.size() + 1);
      order.starts[0] = 0;
      for (std::size_t i = 0; i < order.docs.size(); ++i) order.starts[i + 1] = order.starts[i] + store_.length(i);
    }
    stored_.push_back(std::move(order));
  }
  std::vector<State> rows;
  for (std::int64_t r = k * micro_batch_; r < std::min((k + 1) * micro_batch_, rows_per_epoch_); ++r) {
    rows.push_back({0, r});
  }
  const Order* orders[2] = {&stored_[0], &stored_[0]};
  return batch_of(rows, orders);
}

Batch Batcher::longest_batch() const {
  TAILOR_CHECK(rows_per_epoch_ > 0);
  if (packing_ == dsl::Packing::kWholeExamples) {
    // Every packed batch is (micro_batch, seq_len); first-fit decreasing
    // fills its first rows fullest.
    Batch b = blank_batch(micro_batch_, seq_len_, pad_id_);
    for (std::int64_t r = 0; r < micro_batch_; ++r) fill_whole_row(b, r, static_cast<std::size_t>(r % rows_per_epoch_));
    return b;
  }
  if (packing_ == dsl::Packing::kStream) {
    // Every packed batch is (micro_batch, seq_len): epoch 0's first is as large as any.
    const Order order = make_order(0);
    std::vector<State> rows;
    for (std::int64_t r = 0; r < micro_batch_; ++r) rows.push_back({r / rows_per_epoch_, r % rows_per_epoch_});
    const Order* epoch0[2] = {&order, &order};
    const Order* rebuild[2] = {nullptr, nullptr};  // tiny data: the batch spans epochs
    return batch_of(rows, rows.back().epoch == 0 ? epoch0 : rebuild);
  }
  // The widest possible batch: every row is at most the longest document,
  // and a batch is widest when it holds the micro_batch longest together
  // (repeating documents when there are fewer than micro_batch).
  // Pairs: by their longer row.
  const auto length = [&](std::size_t d) {
    return pairs_ ? std::max(row_length(d), row_length(d + 1)) : row_length(d);
  };
  std::vector<std::size_t> docs = kept_;
  std::sort(docs.begin(), docs.end(), [&](std::size_t a, std::size_t b) {
    const std::int64_t la = length(a), lb = length(b);
    return la != lb ? la > lb : a < b;
  });
  std::vector<std::size_t> take;
  for (std::int64_t r = 0; r < micro_batch_; ++r) take.push_back(docs[static_cast<std::size_t>(r) % docs.size()]);
  return pairs_ ? pair_batch(take) : padded_batch(take);
}

Batcher::Order Batcher::make_order(std::int64_t epoch) const {
  Order order;
  order.docs.resize(packing_ == dsl::Packing::kStream ? store_.documents()
                                                      : static_cast<std::size_t>(rows_per_epoch_));
  std::iota(order.docs.begin(), order.docs.end(), std::size_t{0});
  // One key per seed, then the epoch mixed in, so (seed, epoch) pairs never
  // share a stream the way seed + epoch would (seed 1 epoch 0 = seed 0 epoch 1).
  std::uint64_t state = stream_state(seed_, static_cast<std::uint64_t>(epoch));
  seeded_shuffle(order.docs, state);
  if (packing_ == dsl::Packing::kStream) {
    order.starts.resize(order.docs.size() + 1);
    order.starts[0] = 0;
    for (std::size_t i = 0; i < order.docs.size(); ++i) {
      order.starts[i + 1] = order.starts[i] + store_.length(order.docs[i]);
    }
  }
  return order;
}

const Batcher::Order& Batcher::order_for(std::int64_t epoch) {
  for (int i = 0; i < 2; ++i) {
    if (order_epochs_[i] == epoch) return orders_[i];
  }
  // Replace the older of the two cached orders.
  const int slot = order_epochs_[0] < order_epochs_[1] ? 0 : 1;
  orders_[slot] = make_order(epoch);
  order_epochs_[slot] = epoch;
  return orders_[slot];
}

Batch Batcher::batch_of(const std::vector<State>& rows, const Order* const* orders) const {
  auto order_of = [&](std::int64_t epoch, Order& scratch) -> const Order& {
    if (orders[0] != nullptr && epoch == rows.front().epoch) return *orders[0];
    if (orders[1] != nullptr && epoch == rows.back().epoch) return *orders[1];
    scratch = make_order(epoch);
    return scratch;
  };
  Order scratch;
  if (packing_ == dsl::Packing::kNone) {
    std::vector<std::size_t> docs;
    for (const State& r : rows) {
      docs.push_back(kept_[order_of(r.epoch, scratch).docs[static_cast<std::size_t>(r.index)]]);
    }
    return pairs_ ? pair_batch(docs) : padded_batch(docs);
  }
  Batch b = blank_batch(static_cast<std::int64_t>(rows.size()), seq_len_, pad_id_);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Order& order = order_of(rows[i].epoch, scratch);
    if (packing_ == dsl::Packing::kWholeExamples) {
      fill_whole_row(b, static_cast<std::int64_t>(i), order.docs[static_cast<std::size_t>(rows[i].index)]);
    } else {
      fill_packed_row(b, static_cast<std::int64_t>(i), order, rows[i].index);
    }
  }
  return b;
}

void Batcher::fill_packed_row(Batch& b, std::int64_t r, const Order& order, std::int64_t row) const {
  const std::int64_t pairs = total_tokens_ - 1;
  const std::int64_t row_start = row * seq_len_;
  // The document holding the row's first token.
  std::size_t i = static_cast<std::size_t>(
      std::upper_bound(order.starts.begin(), order.starts.end(), row_start) - order.starts.begin() - 1);
  std::int32_t segment = -1;
  std::int32_t position = 0;
  for (std::int64_t c = 0; c < seq_len_; ++c) {
    const std::int64_t k = row_start + c;
    if (k >= pairs) break;  // the epoch's last row: the rest stays padding
    while (k >= order.starts[i + 1]) ++i;
    const auto offset = static_cast<std::size_t>(k - order.starts[i]);
    if (c == 0 || offset == 0) {
      ++segment;
      position = 0;
    }
    const std::size_t doc = order.docs[i];
    const auto length = static_cast<std::size_t>(store_.length(doc));
    // The next token is in this document, or it is the next document's
    // BOS, which is never trained (so never a target across documents).
    const std::size_t next_doc = offset + 1 < length ? doc : order.docs[i + 1];
    const std::size_t next_offset = offset + 1 < length ? offset + 1 : 0;
    const auto cell = static_cast<std::size_t>(r * seq_len_ + c);
    b.inputs[cell] = store_.tokens(doc)[offset];
    if (store_.trained(next_doc)[next_offset]) {
      b.targets[cell] = store_.tokens(next_doc)[next_offset];
      ++b.target_tokens;
    }
    b.positions[cell] = position++;
    b.segment_ids[cell] = segment;
  }
}

void Batcher::fill_whole_row(Batch& b, std::int64_t r, std::size_t bin) const {
  auto cell = static_cast<std::size_t>(r * seq_len_);
  std::int32_t segment = 0;
  for (auto k = bin_starts_[bin]; k < bin_starts_[bin + 1]; ++k, ++segment) {
    const std::size_t doc = bin_docs_[static_cast<std::size_t>(k)];
    const auto tokens = store_.tokens(doc);
    const auto trained = store_.trained(doc);
    const auto width = static_cast<std::size_t>(row_length(doc) - 1);
    for (std::size_t t = 0; t < width; ++t, ++cell) {
      b.inputs[cell] = tokens[t];
      if (trained[t + 1]) {
        b.targets[cell] = tokens[t + 1];
        ++b.target_tokens;
      }
      b.positions[cell] = static_cast<std::int32_t>(t);
      b.segment_ids[cell] = segment;
    }
  }
}

std::int64_t Batcher::row_length(std::size_t doc) const {
  return std::min(store_.length(doc), seq_len_ + 1);
}

Batch Batcher::padded_batch(std::span<const std::size_t> docs) const {
  std::int64_t cols = 0;
  for (std::size_t d : docs) cols = std::max(cols, row_length(d) - 1);
  Batch b = blank_batch(static_cast<std::int64_t>(docs.size()), cols, pad_id_);
  for (std::size_t r = 0; r < docs.size(); ++r) {
    const auto tokens = store_.tokens(docs[r]);
    const auto trained = store_.trained(docs[r]);
    const std::int64_t width = row_length(docs[r]) - 1;
    for (std::int64_t c = 0; c < width; ++c) {
      const auto cell = r * static_cast<std::size_t>(cols) + static_cast<std::size_t>(c);
      const auto t = static_cast<std::size_t>(c);
      b.inputs[cell] = tokens[t];
      if (trained[t + 1]) {
        b.targets[cell] = tokens[t + 1];
        ++b.target_tokens;
      }
      b.positions[cell] = static_cast<std::int32_t>(c);
      b.segment_ids[cell] = 0;
    }
  }
  if (store_.has_values()) {
    b.values.reserve(docs.size());
    for (const std::size_t d : docs)
      b.values.push_back(store_.value(d));
  }
  return b;
}

Batch Batcher::pair_batch(std::span<const std::size_t> firsts) const {
  std::vector<std::size_t> docs(firsts.begin(), firsts.end());
  for (std::size_t d : firsts) docs.push_back(d + 1);
  return padded_batch(docs);
}

Result<Batcher> make_batcher(TokenStore store, const dsl::DataSpec& spec, std::int64_t micro_batch,
                             std::uint64_t seed, std::int32_t pad_id) {
  Batcher b(std::move(store), spec.seq_len, dsl::packing_of(spec), spec.on_long_example, micro_batch, seed, pad_id,
            dsl::is_paired(spec));
  const PackingStats& s = b.stats();
  if (s.examples == 0) {
    const std::int64_t long_dropped = s.dropped - s.dropped_untrained;
    std::string why;
    if (long_dropped > 0) {
      why += std::to_string(long_dropped) + " longer than seq_len + 1 tokens (data.on_long_example: drop)";
    }
    if (s.dropped_untrained > 0) {
      why += std::string(why.empty() ? "" : ", ") + std::to_string(s.dropped_untrained) +
             " with no trained token within their first seq_len + 1 tokens";
    }
    return Status::invalid_argument(spec.train + ": every example was dropped at seq_len " +
                                    std::to_string(spec.seq_len) + ": " + why);
  }
  return b;
}

}  // namespace tailor::runner::data
