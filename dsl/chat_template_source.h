// Where a job's chat template comes from: the one rule `tailor validate`,
// tailord and tailor-runner apply (data.chat_template, else the model
// folder's chat_template.jinja, else tokenizer_config.json's chat_template),
// with the special-token strings the template is given beside it.
#pragma once

#include <map>
#include <string>

#include "core/status.h"
#include "dsl/job_spec.h"

namespace tailor::dsl {

struct ChatTemplateSource {
  std::string text;    // the template
  std::string origin;  // the file it was read from ("...tokenizer_config.json's chat_template" for that one)
  // tokenizer_config.json's special tokens as strings (bos_token, eos_token,
  // unk_token, pad_token), as transformers gives them to a template; absent
  // when the folder does not name one.
  std::map<std::string, std::string> special_tokens;
};

// The template for `data` and the model folder `model_path` (empty: none).
// tokenizer_config.json's chat_template may be a string or a list of named
// templates, of which "default" is used. InvalidArgument when there is
// none (listing the places looked at and saying data.chat_template names
// one), when a file cannot be read, or tokenizer_config.json is not JSON.
Result<ChatTemplateSource> find_chat_template(const DataSpec& data, const std::string& model_path);

}  // namespace tailor::dsl
