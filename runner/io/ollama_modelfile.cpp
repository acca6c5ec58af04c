#include "runner/io/ollama_modelfile.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace tailor::runner::io {
namespace {

// Characters Ollama's parser keeps: it drops what strconv.IsPrint rejects,
// but for tabs and line breaks inside quotes. The C0 and C1 controls, DEL
// and the invisible format characters real templates could hold are checked
// (UTF-8 decoded by hand: the text is the chat template's, valid UTF-8).
bool parser_keeps(const std::string& text, std::string& bad) {
  for (std::size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    std::uint32_t cp = c;
    std::size_t n = 1;
    if (c >= 0xF0 && i + 3 < text.size()) {
      cp = ((c & 0x07u) << 18) | ((text[i + 1] & 0x3Fu) << 12) | ((text[i + 2] & 0x3Fu) << 6) | (text[i + 3] & 0x3Fu);
      n = 4;
    } else if (c >= 0xE0 && i + 2 < text.size()) {
      cp = ((c & 0x0Fu) << 12) | ((text[i + 1] & 0x3Fu) << 6) | (text[i + 2] & 0x3Fu);
      n = 3;
    } else if (c >= 0xC0 && i + 1 < text.size()) {
      cp = ((c & 0x1Fu) << 6) | (text[i + 1] & 0x3Fu);
      n = 2;
    }
    const bool control = (cp < 0x20 && cp != '\t' && cp != '\n') || (cp >= 0x7F && cp <= 0x9F);
    const bool format = (cp >= 0x200B && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202E) ||
                        (cp >= 0x2060 && cp <= 0x206F) || cp == 0xFEFF || cp == 0xAD;
    if (control || format) {
      char hex[16];
      std::snprintf(hex, sizeof hex, "U+%04X", static_cast<unsigned>(cp));
      bad = hex;
      return false;
    }
    i += n;
  }
  return true;
}

// A value as the parser reads it back: bare when it is one plain word,
// "..." on one line, """...""" across lines.
Result<std::string> quoted(const std::string& field, const std::string& value) {
  std::string bad;
  if (!parser_keeps(value, bad)) {
    return Status::invalid_argument("the Modelfile's " + field + " holds " + bad +
                                    ", which Ollama's parser drops: it is not written");
  }
  if (value.find("\"\"\"") != std::string::npos) {
    return Status::invalid_argument("the Modelfile's " + field +
                                    " holds \"\"\", which ends a value in Ollama's parser");
  }
  const bool plain = !value.empty() && value.find_first_of(" \t\n\"#") == std::string::npos;
  if (plain) return value;
  if (value.find('\n') == std::string::npos && value.front() != '"' && value.back() != '"') return "\"" + value + "\"";
  return "\"\"\"" + value + "\"\"\"";
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

Result<std::string> modelfile_text(const Modelfile& m) {
  std::string out;
  for (const std::string& c : m.comments) {
    if (c.find('\n') != std::string::npos) return Status::invalid_argument("a Modelfile comment holds a line break");
    out += "# " + c + "\n";
  }
  if (m.from.empty()) return Status::invalid_argument("the Modelfile has no FROM");
  TAILOR_ASSIGN_OR_RETURN(const std::string from, quoted("FROM", m.from));
  out += "FROM " + from + "\n";
  if (!m.template_text.empty()) {
    // Always in """ so that the template's first and last characters,
    // quotes and spaces included, are the template's.
    std::string bad;
    if (!parser_keeps(m.template_text, bad)) {
      return Status::invalid_argument("the chat template holds " + bad + ", which Ollama's parser drops");
    }
    if (m.template_text.find("\"\"\"") != std::string::npos) {
      return Status::invalid_argument("the Ollama template holds \"\"\", which ends a value in Ollama's parser");
    }
    out += "TEMPLATE \"\"\"" + m.template_text + "\"\"\"\n";
  }
  for (const auto& [name, value] : m.parameters) {
    TAILOR_ASSIGN_OR_RETURN(const std::string v, quoted("PARAMETER " + name, value));
    out += "PARAMETER " + name + " " + v + "\n";
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> ollama_sampling_parameters(const std::string& folder) {
  std::vector<std::pair<std::string, std::string>> out;
  std::ifstream in(std::filesystem::path(folder) / "generation_config.json");
  if (!in) return out;
  const nlohmann::json g = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!g.is_object()) return out;
  auto finite = [&](const char* key) -> const nlohmann::json* {
    auto it = g.find(key);
    return it != g.end() && it->is_number() && std::isfinite(it->get<double>()) ? &*it : nullptr;
  };
  // transformers samples only with do_sample; a folder that says it does
  // not is greedy, Ollama's temperature 0. One that says nothing keeps
  // Ollama's defaults.
  auto sample = g.find("do_sample");
  if (sample == g.end() || !sample->is_boolean()) return out;
  if (!sample->get<bool>()) {
    out.emplace_back("temperature", "0");
    return out;
  }
  if (const auto* t = finite("temperature")) out.emplace_back("temperature", number(t->get<double>()));
  if (const auto* p = finite("top_p")) out.emplace_back("top_p", number(p->get<double>()));
  if (const auto* k = finite("top_k"); k && k->is_number_integer())
    out.emplace_back("top_k", std::to_string(k->get<long long>()));
  if (const auto* m = finite("min_p")) out.emplace_back("min_p", number(m->get<double>()));
  if (const auto* r = finite("repetition_penalty")) out.emplace_back("repeat_penalty", number(r->get<double>()));
  return out;
}

}  // namespace tailor::runner::io
