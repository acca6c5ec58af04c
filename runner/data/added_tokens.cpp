#include "runner/data/added_tokens.h"

#include <algorithm>
#include <filesystem>

#include "runner/data/file_io.h"

namespace tailor::runner::data {

using nlohmann::json;

bool valid_token_id(const json& v) {
  return v.is_number_integer() && v.get<std::int64_t>() >= 0 && v.get<std::int64_t>() < kMaxTokenId;
}

Result<AddedTokens> AddedTokens::read(const json& tokenizer_json, const std::string& path) {
  AddedTokens out;
  std::size_t k = 0;
  for (const json& a : tokenizer_json.value("added_tokens", json::array())) {
    const std::string where = path + ": added_tokens[" + std::to_string(k++) + "]";
    if (!a.is_object() || !a.contains("id") || !valid_token_id(a["id"]) || !a.contains("content") ||
        !a["content"].is_string() || a["content"].get<std::string>().empty()) {
      return Status::invalid_argument(where + " is not {id in [0, 2^24), content}");
    }
    for (const char* key : {"lstrip", "rstrip", "single_word"}) {
      if (a.value(key, false)) {
        return Status::invalid_argument(where + " (" + a["content"].dump() + "): " + key + " is not supported");
      }
    }
    out.tokens_.push_back({a["content"].get<std::string>(), a["id"].get<std::int32_t>(), a.value("special", false)});
  }
  std::stable_sort(out.tokens_.begin(), out.tokens_.end(),
                   [](const AddedToken& x, const AddedToken& y) { return x.content.size() > y.content.size(); });
  for (const AddedToken& t : out.tokens_)
    out.first_byte_[static_cast<unsigned char>(t.content[0])] = true;
  return out;
}

const AddedToken* AddedTokens::find(std::string_view content) const {
  for (const AddedToken& t : tokens_) {
    if (t.content == content) return &t;
  }
  return nullptr;
}

std::int64_t AddedTokens::max_id() const {
  std::int64_t m = -1;
  for (const AddedToken& t : tokens_)
    m = std::max<std::int64_t>(m, t.id);
  return m;
}

const AddedToken* AddedTokens::match(std::string_view text, std::size_t at) const {
  for (const AddedToken& t : tokens_) {
    if (text.compare(at, t.content.size(), t.content) == 0) return &t;
  }
  return nullptr;
}

Result<json> read_tokenizer_config(const std::string& tokenizer_path) {
  const std::string path = (std::filesystem::path(tokenizer_path).parent_path() / "tokenizer_config.json").string();
  auto text = read_file(path);
  if (!text.is_ok()) {
    if (text.status().code() == StatusCode::kNotFound) return json::object();
    return text.status();
  }
  json cfg = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (cfg.is_discarded() || !cfg.is_object()) return json::object();
  return cfg;
}

std::string token_text(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return {};
}

}  // namespace tailor::runner::data
