#include "runner/data/preview.h"

#include <algorithm>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "dsl/data_records.h"
#include "runner/data/chat_tokens.h"
#include "runner/data/pair_tokens.h"
#include "runner/data/file_io.h"
#include "runner/data/tokenizer.h"

namespace tailor::runner::data {
namespace {

// Tokens per role: those overlapping each turn's text.
std::map<std::string, std::int64_t> tokens_by_role(const ChatSetup& setup, std::string_view conversation,
                                                   const ChatExample& ex, const std::vector<std::pair<std::uint32_t, std::uint32_t>>& offsets) {
  std::map<std::string, std::int64_t> out;
  auto turns = locate_turn_texts(setup, conversation, ex.text);
  if (!turns.is_ok()) return out;  // a template whose turns cannot be located: no counts, not an error
  const ChatJson messages = ChatJson::parse(conversation)["messages"];
  for (std::size_t k = 0; k < turns->size() && k < messages.size(); ++k) {
    const auto [begin, end] = (*turns)[k];
    if (begin == std::string::npos) continue;
    std::int64_t& n = out[messages[k].value("role", std::string("?"))];
    for (const auto& [b, e] : offsets) n += b < end && e > begin ? 1 : 0;
  }
  return out;
}

std::string grouped(std::int64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

std::int64_t PreviewExample::trained_tokens() const {
  return std::count(trained.begin(), trained.end(), std::uint8_t{1});
}

std::int64_t DataPreview::too_long() const {
  return std::count_if(examples.begin(), examples.end(), [&](const PreviewExample& e) {
    return static_cast<std::int64_t>(e.ids.size()) > seq_len + 1;
  });
}

namespace {

// As the dataset builds a document: BOS, the untrained prompt, the trained
// text, EOS.
void prompt_and_completion(const Tokenizer& tok, std::string_view prompt, std::string_view text, PreviewExample& ex) {
  ex.text = std::string(prompt) + std::string(text);
  ex.ids.push_back(tok.bos_id());
  ex.trained.push_back(0);
  const auto p = tok.encode(prompt), t = tok.encode(text);
  ex.ids.insert(ex.ids.end(), p.begin(), p.end());
  ex.trained.insert(ex.trained.end(), p.size(), 0);
  ex.ids.insert(ex.ids.end(), t.begin(), t.end());
  ex.trained.insert(ex.trained.end(), t.size(), 1);
  ex.ids.push_back(tok.eos_id());
  ex.trained.push_back(1);
  ex.trained_text.emplace_back(prompt.size(), ex.text.size());
}

}  // namespace

Result<DataPreview> preview_data(const dsl::JobSpec& spec, std::int64_t n) {
  const dsl::DataSpec& data = spec.data;
  if (data.format == dsl::DataFormat::kTokens) {
    return Status::invalid_argument(data.train + ": a tokens file holds ids, not text; there is nothing to preview");
  }
  TAILOR_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, make_tokenizer(spec.model));
  std::optional<ChatSetup> chat;
  if (dsl::is_chat(data)) {
    TAILOR_ASSIGN_OR_RETURN(chat, load_chat_setup(data, spec.model.path));
  }
  DataPreview out;
  out.file = data.train;
  out.tokenizer = tok->describe();
  out.chat_template = chat ? chat->origin : "";
  out.seq_len = data.seq_len;
  out.on_long_example = data.on_long_example;
  TAILOR_ASSIGN_OR_RETURN(const std::string bytes, read_file(data.train));
  const Status walked = dsl::for_each_record(
      bytes, data.train, data,
      [&](const dsl::DataRecord& r) -> Status {
        PreviewExample ex;
        ex.record = data.train + ":" + std::to_string(r.line);
        if (!r.conversation.empty()) {
          auto tokens = tokenize_chat(*chat, *tok, r.conversation);
          if (!tokens.is_ok()) {
            const Status why = tokens.status().prefixed(ex.record);
            if (data.on_bad_record != dsl::OnBadRecord::kSkip) return why;
            out.skipped.add(why);
            return Status::ok();
          }
          auto offsets = tok->encode_with_offsets(tokens->text);
          if (offsets.is_ok()) ex.role_tokens = tokens_by_role(*chat, r.conversation, *tokens, offsets->offsets);
          ex.text = std::move(tokens->text);
          ex.ids = std::move(tokens->ids);
          ex.trained = std::move(tokens->trained);
          ex.trained_text = std::move(tokens->trained_text);
          ex.turns_without_eos = tokens->turns_without_eos;
        } else if (!r.chosen.empty()) {
          // A preference pair: its two rows, as the dataset builds them.
          auto pair = tokenize_pair(r, data, *tok, chat ? &*chat : nullptr);
          if (!pair.is_ok()) {
            const Status why = pair.status().prefixed(ex.record);
            if (data.on_bad_record != dsl::OnBadRecord::kSkip) return why;
            out.skipped.add(why);
            return Status::ok();
          }
          for (auto [which, row] : {std::pair{" (chosen)", &pair->chosen}, std::pair{" (rejected)", &pair->rejected}}) {
            PreviewExample shown;
            shown.record = ex.record + which;
            shown.text = std::move(row->text);
            shown.ids = std::move(row->ids);
            shown.trained = std::move(row->trained);
            shown.trained_text.emplace_back(row->completion_begin, shown.text.size());
            out.examples.push_back(std::move(shown));
          }
          return static_cast<std::int64_t>(out.examples.size()) >= n ? Status::cancelled("enough") : Status::ok();
        } else {
          if (r.prompt.empty() && r.text.empty()) return Status::ok();  // skipped, as training skips it
          prompt_and_completion(*tok, r.prompt, r.text, ex);
        }
        out.examples.push_back(std::move(ex));
        return static_cast<std::int64_t>(out.examples.size()) >= n ? Status::cancelled("enough") : Status::ok();
      },
      0, [&](const Status& why) { out.skipped.add(why); });
  if (!walked.is_ok() && walked.code() != StatusCode::kCancelled) return walked;
  return out;
}

std::string preview_text(const DataPreview& p, bool colour) {
  const std::string on = colour ? "\x1b[1;32m" : "[[", off = colour ? "\x1b[0m" : "]]";
  std::string out = "data.train: " + p.file + "\ntokenizer: " + p.tokenizer + "\n";
  if (!p.chat_template.empty()) out += "chat template: " + p.chat_template + "\n";
  out += "trained text is " + (colour ? std::string("green") : std::string("between [[ and ]]")) + "\n";
  std::int64_t tokens = 0, trained = 0;
  for (const PreviewExample& e : p.examples) {
    const auto n = static_cast<std::int64_t>(e.ids.size());
    tokens += n;
    trained += e.trained_tokens();
    out += "\n--- " + e.record + " · " + grouped(n) + " tokens, " + grouped(e.trained_tokens()) + " trained";
    if (!e.role_tokens.empty()) {
      out += " ·";
      bool first = true;
      for (const auto& [role, count] : e.role_tokens) {
        out += (first ? " " : ", ") + role + " " + grouped(count);
        first = false;
      }
    }
    if (n > p.seq_len + 1) {
      out += std::string(" · longer than seq_len + 1 (") + std::to_string(p.seq_len + 1) + "): " +
             (p.on_long_example == dsl::LongExample::kDrop ? "dropped" : "truncated");
    }
    out += " ---\n";
    std::size_t at = 0;
    for (const auto& [begin, end] : e.trained_text) {
      out += e.text.substr(at, begin - at) + on + e.text.substr(begin, end - begin) + off;
      at = end;
    }
    out += e.text.substr(at);
    if (out.back() != '\n') out += '\n';
  }
  out += "\n" + grouped(static_cast<std::int64_t>(p.examples.size())) + " example" +
         (p.examples.size() == 1 ? "" : "s") + ": " + grouped(tokens) + " tokens, " + grouped(trained) + " trained";
  if (tokens > 0) out += " (" + std::to_string(trained * 100 / tokens) + "%)";
  out += "; " + grouped(p.too_long()) + " longer than seq_len + 1 (" + std::to_string(p.seq_len + 1) + ")\n";
  if (p.skipped.count > 0) {
    out += grouped(p.skipped.count) + " bad record" + (p.skipped.count == 1 ? "" : "s") +
           " skipped (data.on_bad_record: skip); first: " + p.skipped.first.front() + "\n";
  }
  std::int64_t without_eos = 0;
  for (const PreviewExample& e : p.examples) without_eos += e.turns_without_eos;
  if (without_eos > 0) {
    out += "warning: after " + grouped(without_eos) + " trained repl" + (without_eos == 1 ? "y" : "ies") +
           " the template writes no special token to train as its end (data.train_on_eos), so the model will not "
           "learn to stop there: the tokenizer (" + p.tokenizer + ") has no special token for the template's "
           "end-of-turn text\n";
  }
  return out;
}

std::string preview_json(const DataPreview& p) {
  nlohmann::ordered_json j = {{"file", p.file},
                              {"tokenizer", p.tokenizer},
                              {"chat_template", p.chat_template.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(p.chat_template)},
                              {"seq_len", p.seq_len},
                              {"skipped_records", p.skipped.count},
                              {"examples", nlohmann::ordered_json::array()}};
  for (const PreviewExample& e : p.examples) {
    std::vector<std::int32_t> labels(e.ids.size());
    for (std::size_t i = 0; i < e.ids.size(); ++i) labels[i] = e.trained[i] ? e.ids[i] : -100;
    j["examples"].push_back({{"record", e.record},
                             {"text", e.text},
                             {"input_ids", e.ids},
                             {"labels", labels},
                             {"tokens", e.ids.size()},
                             {"trained_tokens", e.trained_tokens()},
                             {"role_tokens", e.role_tokens},
                             {"turns_without_eos", e.turns_without_eos},
                             {"too_long", static_cast<std::int64_t>(e.ids.size()) > p.seq_len + 1}});
  }
  // Invalid UTF-8 in a rendered text is replaced, not an exception.
  return j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace tailor::runner::data
