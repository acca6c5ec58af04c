#include "runner/data/dataset.h"

#include <string_view>
#include <utility>

#include "dsl/data_records.h"
#include "dsl/table_records.h"
#include "runner/data/file_io.h"
#include "runner/data/pair_tokens.h"
#include "runner/data/prompt_completion.h"

namespace tailor::runner::data {
namespace {

// Documents appended to three flat arrays: no heap object per document.
class Builder {
 public:
  Builder(const Tokenizer& tok, std::size_t input_bytes) : tok_(tok) {
    // Reserved generously: untouched capacity is only address space, and
    // growing by doubling would copy a large corpus several times. With the
    // byte tokenizer this covers the content plus BOS/EOS of paragraphs of
    // 16 bytes or more; the final shrink returns the rest.
    const std::size_t guess = input_bytes + input_bytes / 8 + 16;
    tokens_.reserve(guess);
    trained_.reserve(guess);
  }

  void begin() {
    tokens_.push_back(tok_.bos_id());
    trained_.push_back(0);  // nothing predicts the first token
  }
  // Appends `text`, trained.
  void append_text(std::string_view text) {
    const auto ids = tok_.encode(text);
    tokens_.insert(tokens_.end(), ids.begin(), ids.end());
    trained_.insert(trained_.end(), ids.size(), 1);
  }
  // Appends `prompt` untrained and `completion` trained, encoded together.
  void append_prompt_completion(std::string_view prompt, std::string_view completion) {
    const PromptCompletion pc = encode_prompt_completion(tok_, prompt, completion);
    tokens_.insert(tokens_.end(), pc.ids.begin(), pc.ids.end());
    trained_.insert(trained_.end(), pc.prompt_tokens, 0);
    trained_.insert(trained_.end(), pc.ids.size() - pc.prompt_tokens, 1);
  }
  // A whole document as it comes: a rendered conversation carries its own
  // BOS and end-of-turn tokens.
  void append_document(const std::vector<std::int32_t>& ids, const std::vector<std::uint8_t>& trained) {
    tokens_.insert(tokens_.end(), ids.begin(), ids.end());
    trained_.insert(trained_.end(), trained.begin(), trained.end());
    offsets_.push_back(static_cast<std::int64_t>(tokens_.size()));
  }
  void append_id(std::int32_t id) {
    tokens_.push_back(id);
    trained_.push_back(1);
  }
  void end() {
    tokens_.push_back(tok_.eos_id());
    trained_.push_back(1);  // learning where a document ends is part of the task
    offsets_.push_back(static_cast<std::int64_t>(tokens_.size()));
  }
  // Tokens of the open document so far (BOS included).
  std::size_t open_length() const { return tokens_.size() - static_cast<std::size_t>(offsets_.back()); }
  std::size_t documents() const { return offsets_.size() - 1; }

  // The number of the document ended last (a reward pair's margin); the
  // store has values only when some document was given one.
  void set_value(float v) {
    values_.resize(documents(), 0.0f);
    values_.back() = v;
  }

  // The documents ended so far; an open one (a lone BOS) is dropped.
  TokenStore finish() && {
    tokens_.resize(static_cast<std::size_t>(offsets_.back()));
    trained_.resize(tokens_.size());
    tokens_.shrink_to_fit();
    trained_.shrink_to_fit();
    if (!values_.empty()) values_.resize(documents(), 0.0f);
    return TokenStore::from_vectors(std::move(tokens_), std::move(trained_), std::move(offsets_), std::move(values_));
  }

 private:
  const Tokenizer& tok_;
  std::vector<std::int32_t> tokens_;
  std::vector<std::uint8_t> trained_;
  std::vector<std::int64_t> offsets_{0};
  std::vector<float> values_;
};

// A preference pair as two documents in a row, chosen then rejected
// (pair_tokens.h): the batcher keeps them together. With data.margin_field
// both carry the pair's margin.
Status append_pair(const dsl::DataRecord& r, const dsl::DataSpec& spec, const Tokenizer& tok, const ChatSetup* chat,
                   Builder& out) {
  TAILOR_ASSIGN_OR_RETURN(const PairTokens pair, tokenize_pair(r, spec, tok, chat));
  const bool margin = !spec.margin_field.empty();
  out.append_document(pair.chosen.ids, pair.chosen.trained);
  if (margin) out.set_value(static_cast<float>(r.margin));
  out.append_document(pair.rejected.ids, pair.rejected.trained);
  if (margin) out.set_value(static_cast<float>(r.margin));
  return Status::ok();
}

// kto's labelled completion as one document whose value is its label (1
// desirable, 0 not).
Status append_labelled(const dsl::DataRecord& r, const dsl::DataSpec& spec, const Tokenizer& tok, const ChatSetup* chat,
                       Builder& out) {
  TAILOR_ASSIGN_OR_RETURN(const PairRow row, tokenize_labelled(r, spec, tok, chat));
  out.append_document(row.ids, row.trained);
  out.set_value(r.desirable ? 1.0f : 0.0f);
  return Status::ok();
}

// jsonl, json, text and tables: the records dsl::for_each_record and
// for_each_table_record read, the same readers `tailor validate` and
// tailord's submission check files with.
Status load_records(std::string_view bytes, const std::string& path, const dsl::DataSpec& spec,
                    const ChatSetup* chat, const Tokenizer& tok, Builder& out, SkippedRecords& skipped) {
  const auto skip = [&](const Status& why) { skipped.add(why); };
  const dsl::DataRecordFn record = [&](const dsl::DataRecord& r) -> Status {
    if (!r.conversation.empty()) {
      if (chat == nullptr) return Status::internal("chat data without its chat template");
      auto example = tokenize_chat(*chat, tok, r.conversation);
      if (!example.is_ok()) {
        const Status why = example.status().prefixed(std::string(r.where));
        if (spec.on_bad_record != dsl::OnBadRecord::kSkip) return why;
        skipped.add(why);
        return Status::ok();
      }
      if (example->ids.empty()) return Status::ok();
      out.append_document(example->ids, example->trained);
      return Status::ok();
    }
    if (spec.preference) {
      const Status pair =
          dsl::is_labelled(spec) ? append_labelled(r, spec, tok, chat, out) : append_pair(r, spec, tok, chat, out);
      if (pair.is_ok()) return pair;
      const Status why = pair.prefixed(std::string(r.where));
      if (spec.on_bad_record != dsl::OnBadRecord::kSkip) return why;
      skipped.add(why);
      return Status::ok();
    }
    if (r.prompt.empty() && r.text.empty()) return Status::ok();
    out.begin();
    if (r.prompt.empty()) {
      out.append_text(r.text);
    } else {
      out.append_prompt_completion(r.prompt, r.text);
    }
    out.end();
    return Status::ok();
  };
  if (dsl::is_table(spec.format)) return dsl::for_each_table_record(path, spec, record, 0, skip, open_data_file);
  return dsl::for_each_record(bytes, path, spec, record, 0, skip);
}

Status load_tokens(std::string_view bytes, const std::string& path, const Tokenizer& tok, Builder& out) {
  if (bytes.size() % 4 != 0) {
    return Status::invalid_argument(path + ": size " + std::to_string(bytes.size()) +
                                    " bytes is not a multiple of 4 (expected little-endian int32 ids)");
  }
  const std::int32_t bos = tok.bos_id(), eos = tok.eos_id();
  // A document is opened lazily and closed at EOS; an open document with
  // nothing but its BOS is left open for the next one (never ended).
  bool open = false;
  const std::size_t count = bytes.size() / 4;
  for (std::size_t i = 0; i < count; ++i) {
    // Assembled byte by byte so the file reads the same on any host order.
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data() + 4 * i);
    const std::uint32_t u = std::uint32_t{p[0]} | (std::uint32_t{p[1]} << 8) |
                            (std::uint32_t{p[2]} << 16) | (std::uint32_t{p[3]} << 24);
    const auto id = static_cast<std::int32_t>(u);
    if (id < 0) {
      return Status::invalid_argument(path + ": token " + std::to_string(i) + " (byte " +
                                      std::to_string(4 * i) + "): negative id " + std::to_string(id));
    }
    if (!open) {
      out.begin();
      open = true;
    }
    if (id == eos) {
      if (out.open_length() > 1) {
        out.end();
        open = false;
      }
    } else if (id == bos && out.open_length() == 1) {
      // The file already marks the start of this document: ours stands for it.
    } else {
      out.append_id(id);
    }
  }
  if (open && out.open_length() > 1) out.end();  // the last document may lack its EOS
  return Status::ok();
}

}  // namespace

void SkippedRecords::add(const Status& why) {
  if (first.size() < kShownSkips) first.push_back(why.message());
  ++count;
}

Result<TokenStore> tokenize_file(const std::string& path, const dsl::DataSpec& spec, const Tokenizer& tok,
                                 const ChatSetup* chat, SkippedRecords* skipped) {
  SkippedRecords local;
  SkippedRecords& skips = skipped != nullptr ? *skipped : local;
  if (dsl::is_chat(spec) && chat == nullptr) {
    return Status::invalid_argument(path + ": chat data needs its chat template (load_chat_setup)");
  }
  std::string bytes;  // tables are read row group by row group, not whole
  if (!dsl::is_table(spec.format)) {
    TAILOR_ASSIGN_OR_RETURN(bytes, read_file(path));
  }
  Builder out(tok, bytes.size());
  if (spec.format == dsl::DataFormat::kTokens) {
    TAILOR_RETURN_IF_ERROR(load_tokens(bytes, path, tok, out));
  } else {
    TAILOR_RETURN_IF_ERROR(load_records(bytes, path, spec, chat, tok, out, skips));
  }
  if (out.documents() == 0) {
    return Status::invalid_argument(path + ": no documents (the file is empty or holds only empty " +
                                    std::string(dsl::to_string(spec.format)) + " documents)");
  }
  return std::move(out).finish();
}

Result<std::vector<Example>> load_examples(const std::string& path, const dsl::DataSpec& spec,
                                           const Tokenizer& tok, const ChatSetup* chat) {
  TAILOR_ASSIGN_OR_RETURN(const TokenStore store, tokenize_file(path, spec, tok, chat));
  return store.to_examples();
}

}  // namespace tailor::runner::data
