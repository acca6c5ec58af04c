#include "runner/data/preview.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/text.h"
#include "dsl/data_records.h"
#include "dsl/table_records.h"
#include "runner/data/chat_tokens.h"
#include "runner/data/file_io.h"
#include "runner/data/pair_tokens.h"
#include "runner/data/prompt_completion.h"
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
// text (the two encoded together: prompt_completion.h), EOS.
// A preference row (a pair's or a labelled completion's) as shown, its
// completion trained.
PreviewExample shown_row(PairRow&& row, std::string record) {
  PreviewExample shown;
  shown.record = std::move(record);
  shown.text = std::move(row.text);
  shown.ids = std::move(row.ids);
  shown.trained = std::move(row.trained);
  shown.trained_text.emplace_back(row.completion_begin, shown.text.size());
  return shown;
}

void prompt_and_completion(const Tokenizer& tok, std::string_view prompt, std::string_view text, PreviewExample& ex) {
  const PromptCompletion pc = encode_prompt_completion(tok, prompt, text);
  ex.text = std::string(prompt) + std::string(text);
  ex.ids.push_back(tok.bos_id());
  ex.ids.insert(ex.ids.end(), pc.ids.begin(), pc.ids.end());
  ex.ids.push_back(tok.eos_id());
  ex.trained.assign(ex.ids.size(), 1);
  std::fill(ex.trained.begin(), ex.trained.begin() + 1 + static_cast<std::ptrdiff_t>(pc.prompt_tokens), 0);
  ex.trained_text.emplace_back(byte_of_id(tok, prompt, text, pc, pc.prompt_tokens), ex.text.size());
}

}  // namespace

namespace {

// Every example of spec.data.train in order, read, rendered and tokenized as
// tailor-runner reads them, to `take` (false: enough). `head` is filled
// first (file, tokenizer, template, seq_len); bad records skipped by
// data.on_bad_record go to head.skipped.
Status walk_examples(const dsl::JobSpec& spec, DataPreview& head, const std::function<bool(PreviewExample&&)>& take) {
  const dsl::DataSpec& all = spec.data;
  for (const dsl::DataSource& source : dsl::train_sources(all)) {
    if (source.format.value_or(all.format) == dsl::DataFormat::kTokens) {
      return Status::invalid_argument(source.path +
                                      ": a tokens file holds ids, not text: there are no examples to preview or count");
    }
  }
  const dsl::DataSpec& data = all;
  TAILOR_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, make_tokenizer(spec.model));
  std::optional<ChatSetup> chat;
  if (dsl::is_chat(data)) {
    TAILOR_ASSIGN_OR_RETURN(chat, load_chat_setup(data, spec.model.path));
  }
  for (const dsl::DataSource& source : dsl::train_sources(all)) {
    head.file += (head.file.empty() ? "" : ", ") + source.path;
  }
  head.tokenizer = tok->describe();
  head.chat_template = chat ? chat->origin : "";
  head.seq_len = data.seq_len;
  head.on_long_example = data.on_long_example;
  const auto enough = [] { return Status::cancelled("enough"); };
  const dsl::DataRecordFn record =
      [&](const dsl::DataRecord& r) -> Status {
        PreviewExample ex;
        ex.record = std::string(r.where);
        // A record that cannot be tokenized: the error, or skipped as
        // data.on_bad_record says.
        const auto bad_record = [&](const Status& status) {
          const Status why = status.prefixed(ex.record);
          if (data.on_bad_record != dsl::OnBadRecord::kSkip) return why;
          head.skipped.add(why);
          return Status::ok();
        };
        if (!r.conversation.empty()) {
          auto tokens = tokenize_chat(*chat, *tok, r.conversation);
          if (!tokens.is_ok()) return bad_record(tokens.status());
          auto offsets = tok->encode_with_offsets(tokens->text);
          if (offsets.is_ok()) ex.role_tokens = tokens_by_role(*chat, r.conversation, *tokens, offsets->offsets);
          ex.text = std::move(tokens->text);
          ex.ids = std::move(tokens->ids);
          ex.trained = std::move(tokens->trained);
          ex.trained_text = std::move(tokens->trained_text);
          ex.turns_without_eos = tokens->turns_without_eos;
        } else if (dsl::is_labelled(data)) {
          // kto's labelled completion: its row, the label beside its name.
          auto row = tokenize_labelled(r, data, *tok, chat ? &*chat : nullptr);
          if (!row.is_ok()) return bad_record(row.status());
          ex = shown_row(std::move(*row), ex.record + (r.desirable ? " (desirable)" : " (undesirable)"));
          ex.label = r.desirable ? 1 : 0;
        } else if (!r.chosen.empty()) {
          // A preference pair: its two rows, as the dataset builds them.
          auto pair = tokenize_pair(r, data, *tok, chat ? &*chat : nullptr);
          if (!pair.is_ok()) return bad_record(pair.status());
          // A reward pair's margin beside its rows' names (data.margin_field).
          std::string margin;
          if (!data.margin_field.empty()) {
            std::ostringstream m;
            m << ", margin " << r.margin;
            margin = m.str();
          }
          for (auto [which, row] : {std::pair{"chosen", &pair->chosen}, std::pair{"rejected", &pair->rejected}}) {
            if (!take(shown_row(std::move(*row), ex.record + " (" + which + margin + ")"))) return enough();
          }
          return Status::ok();
        } else {
          if (r.prompt.empty() && r.text.empty()) return Status::ok();  // skipped, as training skips it
          prompt_and_completion(*tok, r.prompt, r.text, ex);
        }
        return take(std::move(ex)) ? Status::ok() : enough();
      };
  const dsl::DataSkipFn skip = [&](const Status& why) { head.skipped.add(why); };
  // Several datasets: each one's records in turn, before any mixing.
  for (const dsl::DataSource& source : dsl::train_sources(all)) {
    const dsl::DataSpec one = dsl::source_spec(all, source);
    std::string bytes;  // tables are read row group by row group, not whole
    if (!dsl::is_table(one.format)) {
      TAILOR_ASSIGN_OR_RETURN(bytes, read_file(one.train));
    }
    const Status walked = dsl::is_table(one.format)
                              ? dsl::for_each_table_record(one.train, one, record, 0, skip, open_data_file)
                              : dsl::for_each_record(bytes, one.train, one, record, 0, skip);
    if (walked.code() == StatusCode::kCancelled) return Status::ok();
    TAILOR_RETURN_IF_ERROR(walked);
  }
  return Status::ok();
}

// The value at fraction q of sorted `v` (nearest rank).
std::int64_t quantile(const std::vector<std::int64_t>& v, double q) {
  if (v.empty()) return 0;
  const auto at = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size(), std::max<std::size_t>(at, 1)) - 1];
}

}  // namespace

Result<DataPreview> preview_data(const dsl::JobSpec& spec, std::int64_t n) {
  DataPreview out;
  TAILOR_RETURN_IF_ERROR(walk_examples(spec, out, [&](PreviewExample&& ex) {
    out.examples.push_back(std::move(ex));
    return static_cast<std::int64_t>(out.examples.size()) < n;
  }));
  return out;
}

Result<DataStats> data_stats(const dsl::JobSpec& spec, std::int64_t max_examples) {
  DataPreview head;
  DataStats s;
  std::vector<std::int64_t> lengths;
  bool cut = false;
  TAILOR_RETURN_IF_ERROR(walk_examples(spec, head, [&](PreviewExample&& ex) {
    if (static_cast<std::int64_t>(lengths.size()) >= max_examples) {
      cut = true;
      return false;
    }
    const auto n = static_cast<std::int64_t>(ex.ids.size());
    lengths.push_back(n);
    s.tokens += n;
    s.trained_tokens += ex.trained_tokens();
    if (n > head.seq_len + 1) ++s.longer_than_seq_len;
    if (ex.label >= 0) s.desirable = std::max<std::int64_t>(s.desirable, 0) + ex.label;
    return true;
  }));
  s.file = head.file;
  s.seq_len = head.seq_len;
  s.on_long_example = head.on_long_example;
  s.packing = dsl::packing_of(spec.data);
  s.pairs = dsl::is_paired(spec.data);
  if (dsl::is_labelled(spec.data)) s.desirable = std::max<std::int64_t>(s.desirable, 0);
  s.skipped_records = head.skipped.count;
  s.examples = static_cast<std::int64_t>(lengths.size());
  s.complete = !cut;
  std::sort(lengths.begin(), lengths.end());
  if (!lengths.empty()) {
    s.min = lengths.front();
    s.p50 = quantile(lengths, 0.5);
    s.p90 = quantile(lengths, 0.9);
    s.p99 = quantile(lengths, 0.99);
    s.max = lengths.back();
  }
  return s;
}

namespace {

// What becomes of an example longer than a row.
const char* long_examples(const DataStats& s) {
  if (s.packing == dsl::Packing::kStream) return "continued";
  return s.on_long_example == dsl::LongExample::kDrop ? "dropped" : "truncated";
}

}  // namespace

std::string stats_json(const DataStats& s) {
  nlohmann::ordered_json j = {
      {"file", s.file},
      {"complete", s.complete},
      {"examples", s.examples},
      {"pairs", s.pairs ? nlohmann::ordered_json(s.examples / 2) : nlohmann::ordered_json()},
      {"desirable", s.desirable >= 0 ? nlohmann::ordered_json(s.desirable) : nlohmann::ordered_json()},
      {"tokens", s.tokens},
      {"trained_tokens", s.trained_tokens},
      {"tokens_per_example", {{"min", s.min}, {"p50", s.p50}, {"p90", s.p90}, {"p99", s.p99}, {"max", s.max}}},
      {"seq_len", s.seq_len},
      {"longer_than_seq_len", s.longer_than_seq_len},
      {"packing", dsl::to_string(s.packing)},
      {"long_examples", long_examples(s)},
      {"skipped_records", s.skipped_records}};
  return j.dump(2) + "\n";
}

std::string stats_text(const DataStats& s) {
  std::string out =
      "data.train: " + s.file + (s.complete ? "" : " (its first " + group_thousands(s.examples) + " examples)") + "\n";
  out += s.pairs ? group_thousands(s.examples) + " rows (" + group_thousands(s.examples / 2) +
                       " pairs, chosen and rejected)"
                 : group_thousands(s.examples) + " example" + (s.examples == 1 ? "" : "s");
  if (s.desirable >= 0) {
    out += " (" + group_thousands(s.desirable) + " desirable, " + group_thousands(s.examples - s.desirable) +
           " undesirable)";
  }
  out += ", " + group_thousands(s.tokens) + " tokens, " + group_thousands(s.trained_tokens) + " trained\n";
  out += std::string("tokens per ") + (s.pairs ? "row" : "example") + ": min " + group_thousands(s.min) + ", p50 " +
         group_thousands(s.p50) + ", p90 " + group_thousands(s.p90) + ", p99 " + group_thousands(s.p99) + ", max " +
         group_thousands(s.max) + "\n";
  out += group_thousands(s.longer_than_seq_len) + " longer than seq_len + 1 (" + std::to_string(s.seq_len + 1) +
         "): " + long_examples(s) +
         (s.packing == dsl::Packing::kStream ? " in the next row (the data is one stream)" : "") + "\n";
  if (s.skipped_records > 0)
    out += group_thousands(s.skipped_records) + " bad records skipped (data.on_bad_record: skip)\n";
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
    out += "\n--- " + e.record + " · " + group_thousands(n) + " tokens, " + group_thousands(e.trained_tokens()) +
           " trained";
    if (!e.role_tokens.empty()) {
      out += " ·";
      bool first = true;
      for (const auto& [role, count] : e.role_tokens) {
        out += (first ? " " : ", ") + role + " " + group_thousands(count);
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
  out += "\n" + group_thousands(static_cast<std::int64_t>(p.examples.size())) + " example" +
         (p.examples.size() == 1 ? "" : "s") + ": " + group_thousands(tokens) + " tokens, " + group_thousands(trained) +
         " trained";
  if (tokens > 0) out += " (" + std::to_string(trained * 100 / tokens) + "%)";
  out += "; " + group_thousands(p.too_long()) + " longer than seq_len + 1 (" + std::to_string(p.seq_len + 1) + ")\n";
  if (p.skipped.count > 0) {
    out += group_thousands(p.skipped.count) + " bad record" + (p.skipped.count == 1 ? "" : "s") +
           " skipped (data.on_bad_record: skip); first: " + p.skipped.first.front() + "\n";
  }
  std::int64_t without_eos = 0;
  for (const PreviewExample& e : p.examples) without_eos += e.turns_without_eos;
  if (without_eos > 0) {
    out += "warning: after " + group_thousands(without_eos) + " trained repl" + (without_eos == 1 ? "y" : "ies") +
           " the template writes no special token to train as its end (data.train_on_eos), so the model will not "
           "learn to stop there: the tokenizer (" +
           p.tokenizer +
           ") has no special token for the template's "
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
    j["examples"].push_back(
        {{"record", e.record},
         {"text", e.text},
         {"input_ids", e.ids},
         {"labels", labels},
         {"tokens", e.ids.size()},
         {"trained_tokens", e.trained_tokens()},
         {"role_tokens", e.role_tokens},
         {"turns_without_eos", e.turns_without_eos},
         {"trained_text", e.trained_text},
         {"too_long", static_cast<std::int64_t>(e.ids.size()) > p.seq_len + 1},
         {"desirable", e.label >= 0 ? nlohmann::ordered_json(e.label == 1) : nlohmann::ordered_json()}});
  }
  // Invalid UTF-8 in a rendered text is replaced, not an exception.
  return j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace tailor::runner::data
