// A data file's records as the job reads them: the one reader that
// tailor-runner tokenizes from and that `tailor validate`/`plan` and
// tailord's submission check with, so a file the runner would refuse is an
// error with file:line before a job is queued.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "dsl/job_spec.h"

namespace tailor::dsl {

// One example of a jsonl, json or text file, as the spec's fields select it.
// The views live until the callback returns.
struct DataRecord {
  std::int64_t line = 0;    // 1-based line where the record starts (a table's row number from 1)
  std::string_view where;   // for errors: "path:line", or a table's "path: row 7 (row group 0, row 7 in it)"
  std::string_view prompt;  // prompt/completion data: the prompt (untrained); else empty
  std::string_view text;    // the completion, the `field` text, or a text paragraph
  // Chat data (data.chat): the record in OpenAI's form, serialized JSON
  // {"messages": [{"role", "content", ...}], "tools": [...]} (dsl/chat_records.h);
  // prompt and text are empty.
  std::string_view conversation;
  // Preference pairs (data.preference): the two completions of `prompt`,
  // neither empty and not equal; text is empty. With data.chat (messages)
  // all three are conversations serialized as `conversation` is: `prompt`
  // its turns alone, `chosen` and `rejected` the prompt's turns and then
  // each completion's.
  std::string_view chosen, rejected;
  // Preference pairs with data.margin_field (reward): the pair's margin;
  // 0 without the key.
  double margin = 0.0;
  // kto's labelled completions (data.label_field): the completion is
  // `chosen` (with data.chat the whole conversation, `prompt` its turns
  // alone), rejected is empty, and this its label.
  bool desirable = false;
};

// Calls fn for each record of `bytes`, the content of `path` read as
// spec.format (jsonl, json or text; tokens files have no records here, and
// parquet and arrow are read by for_each_table_record):
//  - text:  paragraphs separated by blank lines (whitespace-only lines are
//           blank), their lines joined with "\n", "\r\n" read as "\n".
//  - jsonl: one JSON object per line; blank lines are skipped.
//  - json:  a JSON array of objects, or JSON Lines (what Hugging Face's
//           `json` loader accepts), told apart by the first character.
// In jsonl and json, with spec.chat set a record is a conversation (its
// turns checked: roles, contents, a turn data.train_on trains), with
// spec.preference a prompt/chosen/rejected pair (strings; an empty or
// duplicated completion is a bad record; with spec.margin_field its
// margin, a finite number), with spec.label_field (kto) a prompt, a
// completion and its label (true or false, 1 or 0), with
// spec.prompt_field and completion_field set that pair, else the string in
// spec.field. A UTF-8 byte-order
// mark is dropped. Records whose strings are all empty are delivered too
// (the caller skips them). Stops after `max_records` records (0: all) or at
// the first non-ok Status from fn, which it returns.
//
// Errors (InvalidArgument) start with "path:line: " or "path:line:col: ":
// invalid JSON, a record that is not an object, a missing or non-string
// field (naming the fields the record has, and saying so when the record
// is a conversation or a preference pair), a JSON array in a jsonl file
// (with the `jq` line that converts it), an array not closed.
//
// With spec.on_bad_record: skip and a `skip` function, a record that cannot
// be read (invalid JSON, a missing or mistyped field, a conversation with an
// unknown role or no turn to train) goes to `skip` with that error, and the
// walk goes on; nothing of it reaches fn. What is not a record (an array
// not closed, text after it) stays an error.
using DataRecordFn = std::function<Status(const DataRecord&)>;
using DataSkipFn = std::function<void(const Status&)>;
Status for_each_record(std::string_view bytes, const std::string& path, const DataSpec& spec,
                       const DataRecordFn& fn, std::int64_t max_records = 0, const DataSkipFn& skip = {});

// One record given as the text of a JSON object, as the table readers
// (dsl/table_records.h) give a row: `where` starts its errors and is the
// record's `where`; `number` its `line`. Skipping as for_each_record does.
Status deliver_record_json(std::string_view json, std::int64_t number, const std::string& where,
                           const DataSpec& spec, const DataRecordFn& fn, const DataSkipFn& skip = {});

// What checking a data file found.
struct DataFileFacts {
  std::string key;             // "data.train" or "data.eval" (the spec loader's)
  std::string path;
  DataFormat format = DataFormat::kJsonl;
  bool json_array = false;     // json: the file is one array (else JSON Lines)
  std::uint64_t bytes = 0;
  std::int64_t records = -1;   // records (tokens for a tokens file); -1: too large to count
  std::int64_t checked = 0;    // records read in full as the runner reads them
  bool all_checked = false;    // every record was
  std::int64_t skipped = 0;    // data.on_bad_record: skip: records of those read that were skipped
  std::string first_skipped;   // the first one's error
};

// Reads `path` as tailor-runner will, within a bounded cost: files up to
// kCheckWholeBytes are read in full; larger ones have their first
// kCheckedRecords records read and (up to kCountBytes) their records
// counted. Errors name the file and, where it applies, the line:
//  - NotFound: the file does not exist;
//  - InvalidArgument: a directory, FIFO, socket or device (never opened,
//    so a FIFO cannot block the check); empty; no record with content; any
//    for_each_record error; a tokens file whose size is not a multiple of 4
//    or which holds a negative id;
//  - IOError: it cannot be read (permissions), with the system's reason.
inline constexpr std::uint64_t kCheckWholeBytes = 16ull << 20;
inline constexpr std::int64_t kCheckedRecords = 10000;
inline constexpr std::uint64_t kCountBytes = 1ull << 30;
Result<DataFileFacts> check_data_file(const std::string& path, const DataSpec& spec);

// "1,234 records, 3.1 MiB" / "JSON array of 20 records, 2.0 KiB" /
// "51,200 tokens, 200.0 KiB" / "records not counted, 3.5 GiB", then
// "; 2 bad records skipped (first: data.jsonl:7: ...)" where any were.
std::string describe(const DataFileFacts& facts);

}  // namespace tailor::dsl
