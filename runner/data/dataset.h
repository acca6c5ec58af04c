// Loading a job's training or eval file into tokenized documents. Plain C++
// with no torch: the batcher turns these into int32 arrays and the training
// loop into tensors. Does not stream: a file is read whole (fine for corpora
// of a few hundred MB; tokens cost 5 bytes each in memory). The token cache
// (token_cache.h) keeps the result on disk so a file is tokenized once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "dsl/job_spec.h"
#include "runner/data/chat_tokens.h"
#include "runner/data/token_store.h"
#include "runner/data/tokenizer.h"

namespace tailor::runner::data {

// Reads `path` as `spec.format` and tokenizes it with `tok` into documents
// of BOS + content + EOS (tok's ids):
//  - text, jsonl, json: the records of dsl::for_each_record (paragraphs, or
//            objects by line or in an array). With both spec.prompt_field
//            and spec.completion_field set, a document is prompt +
//            completion (concatenated as is, no separator) with trained = 0
//            on BOS and the prompt, 1 on the completion and EOS. Otherwise
//            it is the record's text, all trained but BOS. Chat data
//            (spec.chat) is a document per conversation as tokenize_chat
//            renders and masks it with `chat` (required then), nothing
//            added around it.
//  - tokens: little-endian int32 ids, documents separated by tok.eos_id() (a
//            final document may lack it); a BOS already leading a document is not
//            doubled. Ids are not checked against any vocab here (the file
//            may come from a real tokenizer); negative ids are errors.
// Documents
// with no content (an empty "text", two EOS in a row) are skipped. With
// SentencePiece, a prompt and its completion are encoded separately and
// concatenated, so the completion starts a new word (its own "▁" prefix).
//
// Errors (InvalidArgument) name the file and line (dsl/data_records.h), e.g.
//   data.jsonl:17: missing field "completion"
//   data.jsonl:3:12: not valid JSON: syntax error while parsing value ...
// a file that cannot be read is NotFound or IOError, and a file without a
// single document is InvalidArgument. Never throws.
//
// Preference pairs are two documents each, chosen then rejected; with
// spec.margin_field both have the pair's margin as their store value.
// kto's labelled completions (spec.label_field) are one document each,
// valued 1 where desirable and 0 where not.
//
// With spec.on_bad_record: skip, a record that cannot be read or rendered
// is left out and counted in `skipped` (when given), with its error.
struct SkippedRecords {
  std::int64_t count = 0;
  std::vector<std::string> first;  // the first few errors (up to kShownSkips)
  static constexpr std::size_t kShownSkips = 3;
  void add(const Status& why);
};
Result<TokenStore> tokenize_file(const std::string& path, const dsl::DataSpec& spec, const Tokenizer& tok,
                                 const ChatSetup* chat = nullptr, SkippedRecords* skipped = nullptr);

// tokenize_file as one Example per document (small data and tests).
Result<std::vector<Example>> load_examples(const std::string& path, const dsl::DataSpec& spec,
                                           const Tokenizer& tok, const ChatSetup* chat = nullptr);

// Bumped whenever tokenize_file's output for the same input could change
// (document splitting, masking, specials): part of the token cache's key.
// 3: a prompt and its completion encoded together (prompt_completion.h).
inline constexpr int kDatasetFormatVersion = 3;

}  // namespace tailor::runner::data
