// Turning tokenized documents into micro-batches of int32 arrays: packing or
// dynamic padding, a portable per-epoch shuffle, and a resumable position.
// Torch-free; the training loop wraps the arrays in tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "dsl/job_spec.h"
#include "runner/data/byte_tokenizer.h"
#include "runner/data/token_store.h"

namespace tailor::runner::data {

// One micro-batch; every array is row-major (rows x seq_len).
struct Batch {
  std::int64_t rows = 0;                  // micro_batch from next(): a batch continues into the next
                                          // epoch; pass_batch's last may have fewer
  std::int64_t seq_len = 0;               // columns: with packing the batcher's seq_len; with dynamic
                                          // padding the longest row of this batch
  std::vector<std::int32_t> inputs;       // (rows, seq_len) token ids; padding = the batcher's pad_id
  std::vector<std::int32_t> targets;      // (rows, seq_len) the next token; -100 where not trained
                                          // (padding, masked prompt, a next document's BOS)
  std::vector<std::int32_t> positions;    // (rows, seq_len) position within its document's piece in
                                          // this row: 0 at each document start and at each row start,
                                          // so always < seq_len; 0 on padding
  std::vector<std::int32_t> segment_ids;  // (rows, seq_len) which document of the row (0, 1, ...);
                                          // -1 on padding. Attend only within equal ids.
  std::int64_t target_tokens = 0;         // count of targets != -100 (the loss denominator)
  std::vector<float> values;              // without packing, when the store has values: each row's
                                          // (a pair's margin on both its rows, a kto label); else empty

  // Row r's cells before its padding (without packing a row's padding is
  // all at its end).
  std::int64_t row_length(std::int64_t r) const {
    std::int64_t len = 0;
    while (len < seq_len && segment_ids[static_cast<std::size_t>(r * seq_len + len)] >= 0) ++len;
    return len;
  }
};

// What a Batcher made of the documents: counted once, at construction.
struct PackingStats {
  dsl::Packing packing = dsl::Packing::kStream;
  std::int64_t documents = 0;       // in the store
  std::int64_t examples = 0;        // trained on: documents less dropped
  std::int64_t truncated = 0;       // cut to their first seq_len + 1 tokens (kept)
  std::int64_t dropped = 0;         // left out: too long under LongExample::kDrop, or without a
                                    // trained target in what a row holds (see Batcher)
  std::int64_t dropped_untrained = 0;  // of dropped, those with no trained target
  std::int64_t rows_per_epoch = 0;
  std::int64_t input_cells = 0;     // non-padding cells an epoch yields
  std::int64_t seq_len = 0;
  // input_cells / (rows_per_epoch x seq_len): 1 when no cell is padding.
  // Without packing, relative to full seq_len rows (dynamic padding
  // computes fewer columns than that).
  double efficiency() const;
};

// Yields micro-batches from examples, forever, epoch after epoch, laid out
// as dsl::Packing says.
//
// Stream (plain text): each epoch the documents, in that epoch's order,
// form one stream cut into rows of seq_len inputs. Row r's inputs are
// stream[r*T, r*T+T) and its targets stream[r*T+1, r*T+T+1) (rows overlap
// by one token, the nanoGPT way), so no target is lost at a row boundary
// and an epoch's target_tokens add up to exactly the examples' trained
// tokens. A document longer than a row continues in the next one; its
// continuation restarts at position 0 and segment 0 since attention cannot
// reach back into the previous row. Only the epoch's last row is padded
// (the stream rarely divides evenly). LongExample does not apply.
//
// Whole examples (prompt/completion): no example is ever split. A document
// of L tokens takes L - 1 columns (inputs tokens[0, L-1), targets
// tokens[1, L) where trained) at position 0.. and its own segment, so its
// completion always sees its prompt. Documents are placed into rows of
// seq_len once, by first-fit decreasing (longest first, each into the
// first row with room), and each epoch shuffles the rows. The rest of a
// row is padding.
//
// No packing: one document per row, each batch padded only to its longest
// row.
//
// Pairs (preference data: documents 2p and 2p + 1 are a pair's chosen and
// rejected completions, tokenize_file's order): no packing, and a batch of
// micro_batch pairs is 2 x micro_batch rows, the pairs' chosen rows first,
// then their rejected rows in the same order (TRL's concatenated layout).
// Everything counted in pairs (rows_per_epoch(), the state, examples,
// dropped, truncated) but stats().rows_per_epoch, which counts rows. A pair
// is dropped when either row is (too long under kDrop, or nothing trained).
//
// Long examples (whole examples and no packing): a document longer than
// seq_len + 1 tokens is cut to its first seq_len + 1 (LongExample::
// kTruncate) or left out (kDrop). A document with no trained target in what
// its row holds (a completion truncated away entirely) is left out too:
// training on it would teach nothing. Both are counted in stats().
//
// Order: a Fisher-Yates shuffle of documents (stream, no packing) or rows
// (whole examples) driven by splitmix64 of (seed, epoch), the same on every
// platform and standard library, different every epoch.
// Every batch has exactly micro_batch rows: at an epoch's end it continues
// with the next epoch's first rows, so the global batch (micro-batch x
// accumulation) is the same for every optimizer step and the same rows are
// seen whatever the micro-batch size. Nothing kept is dropped and nothing
// repeats within an epoch.
//
// Not thread-safe. Reads documents from a TokenStore (a copy shares its
// storage: owned arrays or the token cache's mapping); it keeps a few
// bytes per document (the kept ones, the rows' contents) and, per epoch, an
// order of 16 bytes per document or row, never anything per token.
class Batcher {
 public:
  // Requires at least one document, each with at least 2 tokens (BOS and
  // EOS, as tokenize_file makes them); seq_len >= 1; micro_batch >= 1.
  // Violations are bugs (TAILOR_CHECK). pad_id fills padding inputs
  // (Tokenizer::pad_id()). Batches depend only on the documents' content,
  // not on whether the store is owned or mapped. When every document is
  // dropped (stats().examples == 0) it yields nothing: calling next() or
  // longest_batch() then is a bug; make_batcher turns it into an error.
  Batcher(TokenStore store, std::int64_t seq_len, dsl::Packing packing, dsl::LongExample on_long,
          std::int64_t micro_batch, std::uint64_t seed, std::int32_t pad_id, bool pairs = false);
  // The same from per-document vectors (tests, small callers); the byte
  // tokenizer's padding unless told otherwise.
  Batcher(const std::vector<Example>& examples, std::int64_t seq_len, dsl::Packing packing,
          dsl::LongExample on_long, std::int64_t micro_batch, std::uint64_t seed,
          std::int32_t pad_id = ByteTokenizer::kPad);
  // packing: true = the stream, false = one document per row; long
  // documents truncated.
  Batcher(TokenStore store, std::int64_t seq_len, bool packing, std::int64_t micro_batch, std::uint64_t seed,
          std::int32_t pad_id);
  Batcher(const std::vector<Example>& examples, std::int64_t seq_len, bool packing, std::int64_t micro_batch,
          std::uint64_t seed, std::int32_t pad_id = ByteTokenizer::kPad);

  const PackingStats& stats() const { return stats_; }

  // The batch at state() and advances; after an epoch's last batch the
  // state is {epoch + 1, 0}, reshuffled.
  Batch next();

  // The batch with the most tokens any epoch can yield, for a first step
  // that surfaces out-of-memory early: with packing a full (rows, seq_len)
  // batch (whole examples: the fullest rows); without, the micro_batch
  // longest documents together.
  // Does not move the state.
  Batch longest_batch() const;

  // Batch k (0 <= k < batches_per_epoch()) of one pass over the documents
  // in their stored order, unshuffled: the rows of the pass in batches of
  // micro_batch, the last one holding what is left (possibly fewer rows),
  // so each row is in exactly one batch and the pass's target_tokens add up
  // to one epoch's. For evaluation; does not move the state.
  Batch pass_batch(std::int64_t k);

  std::int64_t batches_per_epoch() const;
  std::int64_t rows_per_epoch() const;

  // Where next() reads: the epoch and the index of its next row
  // (0 <= index < rows_per_epoch()).
  struct State {
    std::int64_t epoch = 0;
    std::int64_t index = 0;
  };
  State state() const;
  // What next() reads first: the store's document that the next row starts
  // in, and the token of it where it starts (0 but for the stream, whose
  // rows cut documents). With pairs, the pair's first document. For the
  // checkpoint's record of where the data stands.
  struct Position {
    std::size_t document = 0;
    std::int64_t token = 0;
  };
  Position position() const;
  // Resumes at `s`, so next() gives bit-exactly the batches a batcher with
  // the same examples, settings and seed gave from that state. An index past
  // the epoch's end carries into later epochs; negative values read as 0.
  void restore(State s);

  // Epochs completed, counting rows: 1.25 = one epoch and a quarter of the
  // next one's rows.
  double epoch_progress() const;

 private:
  // One epoch's order of rows' sources (stream and no packing: documents,
  // with no packing indices into kept_; whole examples: rows of bins_) and,
  // for the stream, where each document starts in it (starts[i] for
  // order[i]; starts.back() = total).
  struct Order {
    std::vector<std::size_t> docs;
    std::vector<std::int64_t> starts;
  };
  Order make_order(std::int64_t epoch) const;
  const Order& order_for(std::int64_t epoch);
  // Rows (epoch, index) of a batch, in order.
  Batch batch_of(const std::vector<State>& rows, const Order* const* orders) const;
  void fill_packed_row(Batch& b, std::int64_t out_row, const Order& order, std::int64_t row) const;
  void fill_whole_row(Batch& b, std::int64_t out_row, std::size_t bin) const;
  // Which documents are kept, counted in stats_; then, for whole examples, the rows.
  void select_documents(dsl::LongExample on_long);
  bool too_long(std::size_t d) const;  // longer than a row (seq_len + 1 tokens)
  bool trains(std::size_t d) const;    // a trained target within its row
  // A pair's rows: the chosen documents of `firsts`, then the rejected ones.
  Batch pair_batch(std::span<const std::size_t> firsts) const;
  void pack_first_fit_decreasing();
  Batch padded_batch(std::span<const std::size_t> docs) const;
  std::int64_t row_length(std::size_t doc) const;  // tokens of a document used as an unpacked row

  TokenStore store_;
  std::int64_t seq_len_;
  dsl::Packing packing_;
  std::int64_t micro_batch_;
  std::uint64_t seed_;
  std::int32_t pad_id_;
  bool pairs_ = false;             // kept_ holds each kept pair's first document
  std::int64_t total_tokens_ = 0;  // sum of all documents' lengths
  std::int64_t rows_per_epoch_ = 0;
  PackingStats stats_;
  std::vector<std::size_t> kept_;        // whole examples and no packing: the documents trained on
  std::vector<std::size_t> bin_docs_;    // whole examples: the rows' documents, row after row
  std::vector<std::int64_t> bin_starts_; // row b holds bin_docs_[bin_starts_[b], bin_starts_[b+1])
  State state_;
  Order orders_[2];                // cache: the two most recent epochs' orders
  std::vector<Order> stored_;      // pass_batch's unshuffled order, made on first use
  std::int64_t order_epochs_[2] = {-1, -1};
};

// The training loop's batcher: the layout and long-example policy the spec
// says (dsl::packing_of(spec), spec.on_long_example, spec.seq_len).
// InvalidArgument naming spec.train and seq_len when every example is
// dropped.
Result<Batcher> make_batcher(TokenStore store, const dsl::DataSpec& spec, std::int64_t micro_batch,
                             std::uint64_t seed, std::int32_t pad_id);

}  // namespace tailor::runner::data
