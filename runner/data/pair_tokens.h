// A preference pair (training.method: dpo) as its two training rows, the
// chosen completion's and the rejected one's, each the prompt (untrained)
// then the completion (trained): the one tokenization the dataset and
// `tailor data preview` share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "dsl/data_records.h"
#include "dsl/job_spec.h"
#include "runner/data/chat_tokens.h"
#include "runner/data/tokenizer.h"

namespace tailor::runner::data {

struct PairRow {
  std::vector<std::int32_t> ids;
  std::vector<std::uint8_t> trained;  // 0 on the prompt, 1 on the completion
  std::string text;                   // what was tokenized (a rendered conversation, or prompt + completion)
  std::size_t completion_begin = 0;   // where the completion starts in `text`
};

struct PairTokens {
  PairRow chosen, rejected;
};

// Strings: BOS + prompt + completion + EOS, prompt and completion encoded
// together (prompt_completion.h). Conversations (data.chat: messages,
// `chat` required): as TRL reads them, the prompt rendered with the
// generation prompt and each whole conversation rendered and encoded (no
// BOS or EOS added: the template writes its own). Either way the
// completion starts where the prompt's ids and the row's part: the earlier
// place of the two rows (TRL's DPOTrainer), or each row's own with
// spec.unpaired (its KTOTrainer). InvalidArgument (without the record's place)
// when the prompt alone takes seq_len tokens or a completion has no token
// of its own; the template's and the tokenizer's errors.
Result<PairTokens> tokenize_pair(const dsl::DataRecord& record, const dsl::DataSpec& spec, const Tokenizer& tok,
                                 const ChatSetup* chat);

// kto's labelled completion (data.label_field; the completion in
// record.chosen) as its one row, encoded as each row of a pair is under
// spec.unpaired: the completion starts where its own ids leave the
// prompt's. The same errors.
Result<PairRow> tokenize_labelled(const dsl::DataRecord& record, const dsl::DataSpec& spec, const Tokenizer& tok,
                                  const ChatSetup* chat);

}  // namespace tailor::runner::data
