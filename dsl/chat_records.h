// Conversation records (data.chat): the record fields each chat format
// reads and the roles a chat template is given. A record becomes OpenAI's
// form, {"messages": [{"role", "content", ...}], "tools": ...}, which the
// runner renders with the model's chat template.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dsl/job_spec.h"

namespace tailor::dsl {

// The keys data.fields takes for `format`, each with its default record
// field, in the order the documentation lists them. Empty for kNone.
const std::vector<std::pair<std::string, std::string>>& chat_field_defaults(ChatFormat format);

// The record field spec.fields names for `key`, else the default.
std::string chat_field(const DataSpec& spec, const std::string& key);

// The roles a template is given: system, developer, user, assistant, tool,
// ipython (Llama 3's tool results).
const std::vector<std::string>& template_roles();

// ShareGPT "from" values and the roles they stand for, before data.roles.
const std::map<std::string, std::string>& default_sharegpt_roles();

}  // namespace tailor::dsl
