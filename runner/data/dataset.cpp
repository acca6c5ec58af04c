#include "runner/data/dataset.h"

#include <filesystem>
#include <fstream>
#include <string_view>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/text.h"

namespace tailor::runner::data {
namespace {

using Json = nlohmann::json;

Result<std::string> read_file(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) {
    const std::string msg = path + ": " + ec.message();
    if (ec == std::errc::no_such_file_or_directory) return Status::not_found(msg);
    return Status::io_error(msg);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::io_error(path + ": cannot open for reading");
  std::string bytes(size, '\0');
  if (size > 0 && !in.read(bytes.data(), static_cast<std::streamsize>(size))) {
    return Status::io_error(path + ": read failed");
  }
  return bytes;
}

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

// Appends `text` as trained or untrained tokens.
void append(Example& ex, const ByteTokenizer& tok, std::string_view text, bool trained) {
  const auto ids = tok.encode(text);
  ex.tokens.insert(ex.tokens.end(), ids.begin(), ids.end());
  ex.trained.insert(ex.trained.end(), ids.size(), trained ? 1 : 0);
}

// Reserving the exact size matters: growing by push_back would leave up to
// half of a 100 MB corpus's 500 MB of tokens as unused capacity.
Example begin_example(std::size_t content_bytes) {
  Example ex;
  ex.tokens.reserve(content_bytes + 2);
  ex.trained.reserve(content_bytes + 2);
  ex.tokens.push_back(ByteTokenizer::kBos);
  ex.trained.push_back(0);  // nothing predicts the first token
  return ex;
}

void end_example(Example& ex) {
  ex.tokens.push_back(ByteTokenizer::kEos);
  ex.trained.push_back(1);  // learning where a document ends is part of the task
}

std::vector<Example> load_text(std::string_view text, const ByteTokenizer& tok) {
  std::vector<Example> out;
  std::string paragraph;
  auto flush = [&] {
    if (paragraph.empty()) return;
    Example ex = begin_example(paragraph.size());
    append(ex, tok, paragraph, true);
    end_example(ex);
    out.push_back(std::move(ex));
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
  return out;
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

Result<std::vector<Example>> load_jsonl(std::string_view text, const std::string& path,
                                        const dsl::DataSpec& spec, const ByteTokenizer& tok) {
  const bool pairs = !spec.prompt_field.empty() || !spec.completion_field.empty();
  if (pairs && (spec.prompt_field.empty() || spec.completion_field.empty())) {
    return Status::invalid_argument(
        "data: prompt_field and completion_field must be set together (got prompt_field=" +
        quote(spec.prompt_field) + ", completion_field=" + quote(spec.completion_field) + ")");
  }
  if (!pairs && spec.field.empty()) return Status::invalid_argument("data: field must not be empty");

  std::vector<Example> out;
  const Status status = for_each_line(text, [&](std::int64_t number, std::string_view line) -> Status {
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
    Example ex;
    if (pairs) {
      TAILOR_ASSIGN_OR_RETURN(const std::string_view prompt, string_field(obj, spec.prompt_field, where));
      TAILOR_ASSIGN_OR_RETURN(const std::string_view completion,
                              string_field(obj, spec.completion_field, where));
      if (prompt.empty() && completion.empty()) return Status::ok();
      ex = begin_example(prompt.size() + completion.size());
      append(ex, tok, prompt, false);
      append(ex, tok, completion, true);
    } else {
      TAILOR_ASSIGN_OR_RETURN(const std::string_view content, string_field(obj, spec.field, where));
      if (content.empty()) return Status::ok();
      ex = begin_example(content.size());
      append(ex, tok, content, true);
    }
    end_example(ex);
    out.push_back(std::move(ex));
    return Status::ok();
  });
  TAILOR_RETURN_IF_ERROR(status);
  return out;
}

Result<std::vector<Example>> load_tokens(std::string_view bytes, const std::string& path) {
  if (bytes.size() % 4 != 0) {
    return Status::invalid_argument(path + ": size " + std::to_string(bytes.size()) +
                                    " bytes is not a multiple of 4 (expected little-endian int32 ids)");
  }
  std::vector<Example> out;
  Example ex = begin_example(0);
  auto flush = [&] {
    if (ex.tokens.size() > 1) {
      end_example(ex);
      ex.tokens.shrink_to_fit();  // the length was unknown while reading
      ex.trained.shrink_to_fit();
      out.push_back(std::move(ex));
    }
    ex = begin_example(0);
  };
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
    if (id == ByteTokenizer::kEos) {
      flush();
    } else if (id == ByteTokenizer::kBos && ex.tokens.size() == 1) {
      // The file already marks the start of this document: ours stands for it.
    } else {
      ex.tokens.push_back(id);
      ex.trained.push_back(1);
    }
  }
  flush();
  return out;
}

}  // namespace

Result<std::vector<Example>> load_examples(const std::string& path, const dsl::DataSpec& spec,
                                           const ByteTokenizer& tok) {
  TAILOR_ASSIGN_OR_RETURN(const std::string bytes, read_file(path));
  Result<std::vector<Example>> examples = std::vector<Example>{};
  switch (spec.format) {
    case dsl::DataFormat::kText:
      examples = load_text(drop_utf8_bom(bytes), tok);
      break;
    case dsl::DataFormat::kJsonl:
      examples = load_jsonl(drop_utf8_bom(bytes), path, spec, tok);
      break;
    case dsl::DataFormat::kTokens:
      examples = load_tokens(bytes, path);
      break;
  }
  if (!examples.is_ok()) return examples.status();
  if (examples->empty()) {
    return Status::invalid_argument(path + ": no documents (the file is empty or holds only empty " +
                                    std::string(dsl::to_string(spec.format)) + " documents)");
  }
  return examples;
}

}  // namespace tailor::runner::data
