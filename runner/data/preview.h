// What a job's data becomes, example by example: the text a tokenizer
// reads (a rendered conversation, or prompt + completion), its tokens and
// which of them are trained. `tailor data preview` prints it (tailor-data).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "dsl/job_spec.h"
#include "runner/data/dataset.h"

namespace tailor::runner::data {

struct PreviewExample {
  std::string record;  // "path:line"
  std::string text;    // what was tokenized: BOS and EOS of plain data are not in it
  std::vector<std::pair<std::size_t, std::size_t>> trained_text;  // trained bytes of text, [begin, end)
  std::vector<std::int32_t> ids;
  std::vector<std::uint8_t> trained;
  // Chat data: tokens of each role's turn texts (headers and markers belong
  // to none); empty where the turns could not be located.
  std::map<std::string, std::int64_t> role_tokens;
  std::int64_t turns_without_eos = 0;  // ChatExample's
  int label = -1;                      // kto's labelled completions: 1 desirable, 0 not; else -1
  std::int64_t trained_tokens() const;
};

struct DataPreview {
  std::string file;            // data.train
  std::string tokenizer;       // Tokenizer::describe()
  std::string chat_template;   // where it came from; empty for plain data
  std::int64_t seq_len = 0;
  dsl::LongExample on_long_example = dsl::LongExample::kTruncate;
  std::vector<PreviewExample> examples;
  SkippedRecords skipped;  // data.on_bad_record: skip: records left out before the last one shown
  // Of the examples shown, those longer than seq_len + 1 tokens (whole
  // examples are then cut or dropped, as on_long_example says).
  std::int64_t too_long() const;
};

// The first `n` examples of spec.data.train (n >= 1), read, rendered and
// tokenized as tailor-runner reads them. A tokens file is refused (it has
// no text); errors are the reader's, the tokenizer's and the template's,
// naming the file and record.
Result<DataPreview> preview_data(const dsl::JobSpec& spec, std::int64_t n);

// The lengths of spec.data.train's examples (a preference pair's two rows
// each count), over its first `max_examples` at most: what `tailor data
// stats` prints and `tailor plan` reports.
struct DataStats {
  std::string file;
  bool complete = true;  // every example was read (not cut at max_examples)
  bool pairs = false;    // preference pairs: each pair is two examples, chosen and rejected
  std::int64_t desirable = -1;  // kto's labelled completions: the desirable ones; else -1
  std::int64_t examples = 0, tokens = 0, trained_tokens = 0;
  std::int64_t min = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;  // tokens per example
  std::int64_t seq_len = 0;
  std::int64_t longer_than_seq_len = 0;  // over seq_len + 1 tokens
  dsl::Packing packing = dsl::Packing::kStream;  // what becomes of those: continued (a stream), or
  dsl::LongExample on_long_example = dsl::LongExample::kTruncate;  // cut or dropped
  std::int64_t skipped_records = 0;
};
Result<DataStats> data_stats(const dsl::JobSpec& spec, std::int64_t max_examples);
std::string stats_text(const DataStats& stats);
// {"file", "complete", "examples", "pairs" (null unless pairs), "desirable"
// (null unless kto's labelled completions), "tokens", "trained_tokens",
// "tokens_per_example": {"min", "p50", "p90", "p99", "max"}, "seq_len",
// "longer_than_seq_len", "packing", "long_examples" (continued, truncated
// or dropped), "skipped_records"}
std::string stats_json(const DataStats& stats);

// For a person: each example's text with its trained bytes marked, in
// green on a terminal (`colour`) or between [[ and ]] otherwise; counts per
// example and a summary.
std::string preview_text(const DataPreview& preview, bool colour);

// For scripts: {"file", "tokenizer", "chat_template", "seq_len",
// "skipped_records", "examples": [{"record", "text", "input_ids", "labels"
// (-100 where not trained), "tokens", "trained_tokens", "role_tokens",
// "turns_without_eos", "trained_text" ([begin, end) byte ranges of text),
// "too_long", "desirable" (kto's labelled completions; else null)}]}.
std::string preview_json(const DataPreview& preview);

}  // namespace tailor::runner::data
