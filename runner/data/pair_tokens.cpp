#include "runner/data/pair_tokens.h"

#include <algorithm>
#include <tuple>

#include "runner/data/prompt_completion.h"

namespace tailor::runner::data {
namespace {

// BOS, the prompt's first `untrained` ids of `pc`, the rest trained, EOS.
PairRow string_row(const Tokenizer& tok, std::string_view prompt, std::string_view completion,
                   const PromptCompletion& pc, std::size_t untrained) {
  PairRow row;
  row.text = std::string(prompt) + std::string(completion);
  row.completion_begin = byte_of_id(tok, prompt, completion, pc, untrained);
  row.ids.push_back(tok.bos_id());
  row.ids.insert(row.ids.end(), pc.ids.begin(), pc.ids.end());
  row.ids.push_back(tok.eos_id());
  row.trained.assign(row.ids.size(), 1);
  std::fill(row.trained.begin(), row.trained.begin() + 1 + static_cast<std::ptrdiff_t>(untrained), 0);
  return row;
}

Status prompt_fits(std::size_t prompt_tokens, std::int64_t seq_len) {
  if (static_cast<std::int64_t>(prompt_tokens) < seq_len) return Status::ok();
  return Status::invalid_argument("the prompt is " + std::to_string(prompt_tokens) + " tokens, and seq_len is " +
                                  std::to_string(seq_len) +
                                  ": no completion token fits (shorten the prompt or raise data.seq_len)");
}

struct Encoded {
  std::string text;
  EncodedText tokens;
};

Result<Encoded> render_and_encode(const ChatSetup& chat, const Tokenizer& tok, std::string_view conversation,
                                  bool add_generation_prompt) {
  Encoded out;
  TAILOR_ASSIGN_OR_RETURN(out.text, render_conversation(chat, conversation, add_generation_prompt));
  TAILOR_ASSIGN_OR_RETURN(out.tokens, tok.encode_with_offsets(out.text));
  return out;
}

std::size_t common_prefix(const std::vector<std::int32_t>& a, const std::vector<std::int32_t>& b) {
  const auto n = std::min(a.size(), b.size());
  std::size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

// A conversation's row: trained from `untrained` on (at least its first
// id untrained); `which` names it in the error when nothing follows.
Status conversation_row(Encoded& e, std::size_t untrained, const char* which, PairRow& row) {
  if (e.tokens.ids.size() <= untrained) {
    return Status::invalid_argument(std::string("the ") + which + " conversation renders no token after its prompt");
  }
  row.completion_begin = e.tokens.offsets[untrained].first;
  row.text = std::move(e.text);
  row.ids = std::move(e.tokens.ids);
  row.trained.assign(row.ids.size(), 1);
  std::fill(row.trained.begin(), row.trained.begin() + static_cast<std::ptrdiff_t>(std::max<std::size_t>(untrained, 1)),
            0);
  return Status::ok();
}

}  // namespace

Result<PairRow> tokenize_labelled(const dsl::DataRecord& r, const dsl::DataSpec& spec, const Tokenizer& tok,
                                  const ChatSetup* chat) {
  if (!dsl::is_chat(spec)) {
    const PromptCompletion pc = encode_prompt_completion(tok, tok.encode(r.prompt), r.prompt, r.chosen);
    TAILOR_RETURN_IF_ERROR(prompt_fits(pc.prompt_tokens, spec.seq_len));
    return string_row(tok, r.prompt, r.chosen, pc, pc.prompt_tokens);
  }
  if (chat == nullptr) return Status::internal("conversational completions without their chat template");
  TAILOR_ASSIGN_OR_RETURN(const Encoded prompt, render_and_encode(*chat, tok, r.prompt, true));
  TAILOR_ASSIGN_OR_RETURN(Encoded whole, render_and_encode(*chat, tok, r.chosen, false));
  const std::size_t untrained = common_prefix(prompt.tokens.ids, whole.tokens.ids);
  TAILOR_RETURN_IF_ERROR(prompt_fits(untrained, spec.seq_len));
  PairRow row;
  TAILOR_RETURN_IF_ERROR(conversation_row(whole, untrained, "completion's", row));
  return row;
}

Result<PairTokens> tokenize_pair(const dsl::DataRecord& r, const dsl::DataSpec& spec, const Tokenizer& tok,
                                 const ChatSetup* chat) {
  PairTokens out;
  if (!dsl::is_chat(spec)) {
    // TRL's DPOTrainer: each completion encoded after its prompt, the prompt
    // the ids both rows share with it alone (prompt_completion.h); its
    // KTOTrainer: the ids each row shares.
    const std::vector<std::int32_t> prompt_ids = tok.encode(r.prompt);
    const PromptCompletion chosen = encode_prompt_completion(tok, prompt_ids, r.prompt, r.chosen);
    const PromptCompletion rejected = encode_prompt_completion(tok, prompt_ids, r.prompt, r.rejected);
    const std::size_t shared = std::min(chosen.prompt_tokens, rejected.prompt_tokens);
    TAILOR_RETURN_IF_ERROR(prompt_fits(shared, spec.seq_len));
    out.chosen = string_row(tok, r.prompt, r.chosen, chosen, spec.unpaired ? chosen.prompt_tokens : shared);
    out.rejected = string_row(tok, r.prompt, r.rejected, rejected, spec.unpaired ? rejected.prompt_tokens : shared);
    return out;
  }
  if (chat == nullptr) return Status::internal("conversational pairs without their chat template");
  // TRL's DPOTrainer: the completion is what follows the longest run the
  // prompt's ids share with both conversations' (a template may render the
  // prompt's last turn apart from the completion differently); its
  // KTOTrainer: with the row's own.
  TAILOR_ASSIGN_OR_RETURN(const Encoded prompt, render_and_encode(*chat, tok, r.prompt, true));
  TAILOR_ASSIGN_OR_RETURN(Encoded chosen, render_and_encode(*chat, tok, r.chosen, false));
  TAILOR_ASSIGN_OR_RETURN(Encoded rejected, render_and_encode(*chat, tok, r.rejected, false));
  const std::size_t shared = std::min(common_prefix(prompt.tokens.ids, chosen.tokens.ids),
                                      common_prefix(prompt.tokens.ids, rejected.tokens.ids));
  TAILOR_RETURN_IF_ERROR(prompt_fits(shared, spec.seq_len));
  for (auto [which, e, row] : {std::tuple{"chosen", &chosen, &out.chosen}, std::tuple{"rejected", &rejected, &out.rejected}}) {
    const std::size_t untrained = spec.unpaired ? common_prefix(prompt.tokens.ids, e->tokens.ids) : shared;
    const Status made = conversation_row(*e, untrained, which, *row);
    if (!made.is_ok()) return Status::invalid_argument(made.message() + ": a pair needs two completions");
  }
  return out;
}

}  // namespace tailor::runner::data
