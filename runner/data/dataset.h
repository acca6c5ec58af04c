// Loading a job's training or eval file into tokenized documents. Plain C++
// with no torch: the batcher turns these into int32 arrays and the training
// loop into tensors. Does not stream: a file is read whole (fine for corpora
// of a few hundred MB; tokens cost 5 bytes each in memory).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "dsl/job_spec.h"
#include "runner/data/byte_tokenizer.h"

namespace tailor::runner::data {

// One training document: its tokens, and which of them are trained on.
struct Example {
  std::vector<std::int32_t> tokens;   // BOS + content + EOS
  std::vector<std::uint8_t> trained;  // same length; trained[i] = 1 when predicting tokens[i] counts
                                      // in the loss. Always 0 for the leading BOS (nothing predicts
                                      // it); 0 on the prompt of prompt/completion pairs.
};

// Reads `path` as `spec.format` and tokenizes it with `tok`:
//  - text:   documents are paragraphs separated by one or more blank lines
//            (whitespace-only lines count as blank); the lines of a paragraph
//            are joined with "\n"; "\r\n" endings are read as "\n".
//  - jsonl:  one JSON object per line; blank lines are skipped. With both
//            spec.prompt_field and spec.completion_field set, a document is
//            prompt + completion (concatenated as is, no separator) with
//            trained = 0 on BOS and the prompt, 1 on the completion and EOS.
//            Otherwise it is the string in spec.field, all trained but BOS.
//  - tokens: little-endian int32 ids, documents separated by kEos (a final
//            document may lack it); a kBos already leading a document is not
//            doubled. Ids are not checked against any vocab here (the file
//            may come from a real tokenizer); negative ids are errors.
// A UTF-8 byte-order mark opening a text or jsonl file is dropped. Documents
// with no content (an empty "text", two kEos in a row) are skipped.
//
// Errors (InvalidArgument) name the file and line, e.g.
//   data.jsonl:17: missing field "completion"
//   data.jsonl:3:12: not valid JSON: syntax error while parsing value ...
// a file that cannot be read is NotFound or IOError, and a file without a
// single document is InvalidArgument. Never throws.
Result<std::vector<Example>> load_examples(const std::string& path, const dsl::DataSpec& spec,
                                           const ByteTokenizer& tok);

}  // namespace tailor::runner::data
