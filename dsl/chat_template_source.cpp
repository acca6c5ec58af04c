#include "dsl/chat_template_source.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/text.h"

namespace tailor::dsl {
namespace {

namespace fs = std::filesystem;

Result<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::invalid_argument(path + ": cannot be read");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::invalid_argument(path + ": cannot be read");
  return ss.str();
}

// A special token as tokenizer_config.json writes it: a string, or an
// AddedToken object with its "content".
std::string token_text(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return {};
}

}  // namespace

Result<ChatTemplateSource> find_chat_template(const DataSpec& data, const std::string& model_path) {
  ChatTemplateSource out;
  nlohmann::json config;
  const std::string config_path = model_path.empty() ? "" : (fs::path(model_path) / "tokenizer_config.json").string();
  std::error_code ec;
  if (!config_path.empty() && fs::is_regular_file(config_path, ec)) {
    TAILOR_ASSIGN_OR_RETURN(const std::string text, read_text(config_path));
    try {
      config = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      return Status::invalid_argument(config_path + ": not valid JSON: " + e.what());
    }
    if (config.is_object()) {
      for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
        if (const auto it = config.find(key); it != config.end()) {
          if (std::string t = token_text(*it); !t.empty()) out.special_tokens[key] = std::move(t);
        }
      }
    }
  }
  if (!data.chat_template.empty()) {
    TAILOR_ASSIGN_OR_RETURN(out.text, read_text(data.chat_template));
    out.origin = data.chat_template;
    return out;
  }
  if (model_path.empty()) {
    return Status::invalid_argument(
        "no chat template: the model has no folder (a preset or model.arch), so data.chat_template must name a "
        "template file");
  }
  const std::string jinja = (fs::path(model_path) / "chat_template.jinja").string();
  if (fs::is_regular_file(jinja, ec)) {
    TAILOR_ASSIGN_OR_RETURN(out.text, read_text(jinja));
    out.origin = jinja;
    return out;
  }
  if (config.is_object() && config.contains("chat_template")) {
    const nlohmann::json& t = config["chat_template"];
    out.origin = config_path + "'s chat_template";
    if (t.is_string()) {
      out.text = t.get<std::string>();
      return out;
    }
    if (t.is_array()) {
      std::vector<std::string> names;
      for (const auto& named : t) {
        if (!named.is_object() || !named.contains("name") || !named["name"].is_string()) continue;
        names.push_back(quote(named["name"].get<std::string>()));
        if (named["name"] == "default" && named.contains("template") && named["template"].is_string()) {
          out.text = named["template"].get<std::string>();
          return out;
        }
      }
      return Status::invalid_argument(config_path + ": chat_template lists templates named " + join(names, ", ") +
                                      " but none named \"default\"; save the one to train with as a file and name "
                                      "it in data.chat_template");
    }
    return Status::invalid_argument(config_path + ": chat_template must be a string or a list of named templates");
  }
  return Status::invalid_argument("no chat template: data.chat_template is not set, " + jinja +
                                  " does not exist and " +
                                  (config.is_object() ? config_path + " has no chat_template"
                                                      : config_path + " does not exist") +
                                  "; set data.chat_template to a Jinja template file");
}

}  // namespace tailor::dsl
