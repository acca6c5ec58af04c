#include "runner/data/dataset.h"

#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/text.h"
#include "runner/data/file_io.h"

namespace tailor::runner::data {
namespace {

using Json = nlohmann::json;

std::string_view drop_utf8_bom(std::string_view s) {
  if (s.substr(0, 3) == "\xEF\xBB\xBF") s.remove_prefix(3);
  return s;
}

// Calls fn(line_number, line) for each line, 1-based, without its "\n" or a
// trailing "\r"; stops at the first non-ok Status and returns it.
template <class Fn>
Status for_each_line(std::string_view text, Fn&& fn) {
  std::int64_t number = 0;
  while (!text.empty()) {
    const auto end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    TAILOR_RETURN_IF_ERROR(fn(++number, line));
  }
  return Status::ok();
}

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
  // Appends `text` as trained or untrained tokens.
  void append_text(std::string_view text, bool trained) {
    const auto ids = tok_.encode(text);
    tokens_.insert(tokens_.end(), ids.begin(), ids.end());
    trained_.insert(trained_.end(), ids.size(), trained ? 1 : 0);
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

  // The documents ended so far; an open one (a lone BOS) is dropped.
  TokenStore finish() && {
    tokens_.resize(static_cast<std::size_t>(offsets_.back()));
    trained_.resize(tokens_.size());
    tokens_.shrink_to_fit();
    trained_.shrink_to_fit();
    return TokenStore::from_vectors(std::move(tokens_), std::move(trained_), std::move(offsets_));
  }

 private:
  const Tokenizer& tok_;
  std::vector<std::int32_t> tokens_;
  std::vector<std::uint8_t> trained_;
  std::vector<std::int64_t> offsets_{0};
};

void load_text(std::string_view text, Builder& out) {
  std::string paragraph;
  auto flush = [&] {
    if (paragraph.empty()) return;
    out.begin();
    out.append_text(paragraph, true);
    out.end();
    paragraph.clear();
  };
  (void)for_each_line(text, [&](std::int64_t, std::string_view line) {
    if (trim(line).empty()) {
      flush();
    } else {
      if (!paragraph.empty()) paragraph += '\n';
      paragraph += line;
    }
    return Status::ok();
  });
  flush();
}

// The string in obj[name], or an error naming the line.
Result<std::string_view> string_field(const Json& obj, const std::string& name, const std::string& where) {
  const auto it = obj.find(name);
  if (it == obj.end()) return Status::invalid_argument(where + "missing field " + quote(name));
  if (!it->is_string()) {
    return Status::invalid_argument(where + "field " + quote(name) + " must be a string, got " +
                                    it->type_name());
  }
  return std::string_view(it->get_ref<const std::string&>());
}

// nlohmann's message reads "[json.exception.parse_error.101] parse error at
// line 1, column 12: syntax error ..."; the position is already in ours.
// Its "last read" echoes the token so far, which for an unterminated string
// can be a whole megabyte line: cut it.
std::string parse_reason(const Json::parse_error& e) {
  std::string_view what = e.what();
  if (const auto col = what.find("column "); col != std::string_view::npos) {
    if (const auto colon = what.find(": ", col); colon != std::string_view::npos) {
      what.remove_prefix(colon + 2);
    }
  }
  constexpr std::size_t kMaxReason = 200;
  if (what.size() > kMaxReason) return std::string(what.substr(0, kMaxReason)) + "...";
  return std::string(what);
}

Status load_jsonl(std::string_view text, const std::string& path, const dsl::DataSpec& spec, Builder& out) {
  const bool pairs = !spec.prompt_field.empty() || !spec.completion_field.empty();
  if (pairs && (spec.prompt_field.empty() || spec.completion_field.empty())) {
    return Status::invalid_argument(
        "data: prompt_field and completion_field must be set together (got prompt_field=" +
        quote(spec.prompt_field) + ", completion_field=" + quote(spec.completion_field) + ")");
  }
  if (!pairs && spec.field.empty()) return Status::invalid_argument("data: field must not be empty");

  return for_each_line(text, [&](std::int64_t number, std::string_view line) -> Status {
    if (trim(line).empty()) return Status::ok();
    const std::string where = path + ":" + std::to_string(number) + ": ";
    Json obj;
    try {
      obj = Json::parse(line);
    } catch (const Json::parse_error& e) {
      // e.byte is the 1-based offset in the line, i.e. the column.
      return Status::invalid_argument(path + ":" + std::to_string(number) + ":" +
                                      std::to_string(e.byte) + ": not valid JSON: " + parse_reason(e));
    }
    if (!obj.is_object()) {
      return Status::invalid_argument(where + "expected a JSON object, got " + obj.type_name());
    }
    if (pairs) {
      TAILOR_ASSIGN_OR_RETURN(const std::string_view prompt, string_field(obj, spec.prompt_field, where));
      TAILOR_ASSIGN_OR_RETURN(const std::string_view completion,
                              string_field(obj, spec.completion_field, where));
      if (prompt.empty() && completion.empty()) return Status::ok();
      out.begin();
      out.append_text(prompt, false);
      out.append_text(completion, true);
    } else {
      TAILOR_ASSIGN_OR_RETURN(const std::string_view content, string_field(obj, spec.field, where));
      if (content.empty()) return Status::ok();
      out.begin();
      out.append_text(content, true);
    }
    out.end();
    return Status::ok();
  });
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

Result<TokenStore> tokenize_file(const std::string& path, const dsl::DataSpec& spec, const Tokenizer& tok) {
  TAILOR_ASSIGN_OR_RETURN(const std::string bytes, read_file(path));
  Builder out(tok, bytes.size());
  switch (spec.format) {
    case dsl::DataFormat::kText:
      load_text(drop_utf8_bom(bytes), out);
      break;
    case dsl::DataFormat::kJsonl:
      TAILOR_RETURN_IF_ERROR(load_jsonl(drop_utf8_bom(bytes), path, spec, out));
      break;
    case dsl::DataFormat::kTokens:
      TAILOR_RETURN_IF_ERROR(load_tokens(bytes, path, tok, out));
      break;
  }
  if (out.documents() == 0) {
    return Status::invalid_argument(path + ": no documents (the file is empty or holds only empty " +
                                    std::string(dsl::to_string(spec.format)) + " documents)");
  }
  return std::move(out).finish();
}

Result<std::vector<Example>> load_examples(const std::string& path, const dsl::DataSpec& spec,
                                           const Tokenizer& tok) {
  TAILOR_ASSIGN_OR_RETURN(const TokenStore store, tokenize_file(path, spec, tok));
  return store.to_examples();
}

}  // namespace tailor::runner::data
